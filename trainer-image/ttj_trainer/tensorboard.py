"""TensorBoard summaries from the chief, under ``<checkpoint.uri>/tensorboard``: ``tensorboard --logdir
<checkpoint.uri>/tensorboard`` shows the job while it trains.

Scalars at the global step: ``train/loss``, ``train/learning_rate``, ``train/steps_per_second`` (the chief's
own), ``train/active_workers``, sampled from the gauges the chief keeps anyway (``ttj_trainer.metrics``) at
most every ``SAMPLE_SECONDS``; ``evaluation/<metric>`` after each evaluation; and the text ``chief`` when a
pod becomes chief (a preemption of the chief shows as the next one's election). Each chief writes its own event
file (named after its pod) in the one directory, and TensorBoard merges them by step, so the curves go on
across elections. The files are written by TensorFlow's file system layer, ``gs://`` included, in the format
``tf.summary.scalar``/``.text`` write (without the tensorboard package in the image). Summaries are a view: a
write that fails is logged once and summaries stop, training never does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import REGISTRY

from ttj_trainer.logs import event

log = logging.getLogger("ttj_trainer.tensorboard")

#: How often the chief's loop samples the training scalars; also how often the writer flushes.
SAMPLE_SECONDS = 10.0
#: Scalar tag → the trainer gauge it samples.
TRAINING_SCALARS = {
    "train/loss": "ttj_trainer_loss",
    "train/learning_rate": "ttj_trainer_learning_rate",
    "train/steps_per_second": "ttj_trainer_steps_per_second",
    "train/active_workers": "ttj_trainer_active_workers_seen",
}
GLOBAL_STEP_GAUGE = "ttj_trainer_global_step"


def logdir_of(checkpoint_uri: str) -> str:
    return checkpoint_uri.rstrip("/") + "/tensorboard"


def _plugin(name: str) -> bytes:
    """Summary metadata naming the TensorBoard plugin that shows a value: tf.summary.scalar and .text are
    TensorBoard's own code, which the trainer image does not carry; the event files are the same."""
    from tensorflow.core.framework import summary_pb2

    data = summary_pb2.SummaryMetadata.PluginData(plugin_name=name)
    return bytes(summary_pb2.SummaryMetadata(plugin_data=data).SerializeToString())


def _gauge(name: str) -> float | None:
    return REGISTRY.get_sample_value(name)


class Summaries:
    """The chief's summary writer, opened on its first write."""

    def __init__(self, checkpoint_uri: str, pod_name: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.logdir = logdir_of(checkpoint_uri)
        self.pod_name = pod_name
        self.clock = clock
        self._writer: Any = None
        self._next_sample = 0.0
        self._failed = False

    def _write(self, step: int, body: Callable[[Any], None]) -> None:
        if self._failed:
            return
        try:
            import tensorflow as tf

            if self._writer is None:
                self._writer = tf.summary.create_file_writer(
                    self.logdir, flush_millis=int(SAMPLE_SECONDS * 1000), filename_suffix=f".{self.pod_name}"
                )
            with self._writer.as_default(step=step):
                body(tf)
        except Exception as exc:  # a view of training: never a reason to stop it
            self._failed = True
            event(log, "TensorBoard summaries stopped", logging.WARNING, logdir=self.logdir, error=str(exc))

    def sample(self) -> None:
        """The training scalars at the global step, when ``SAMPLE_SECONDS`` have passed since the last."""
        now = self.clock()
        if now < self._next_sample:
            return
        self._next_sample = now + SAMPLE_SECONDS
        step = _gauge(GLOBAL_STEP_GAUGE)
        values = {tag: _gauge(gauge) for tag, gauge in TRAINING_SCALARS.items()}
        if step is None:
            return
        self.scalars(int(step), {tag: value for tag, value in values.items() if value is not None})

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        def body(tf: Any) -> None:
            for tag, value in values.items():
                tf.summary.write(tag, tf.constant(value, tf.float32), metadata=_plugin("scalars"))

        self._write(step, body)

    def evaluation(self, step: int, metrics: Mapping[str, float]) -> None:
        self.scalars(step, {f"evaluation/{name}": value for name, value in metrics.items()})
        self.flush()

    def elected(self, epoch: int) -> None:
        step = int(_gauge(GLOBAL_STEP_GAUGE) or 0)
        said = f"{self.pod_name} elected chief (epoch {epoch})"
        self._write(step, lambda tf: tf.summary.write("chief", tf.constant(said), metadata=_plugin("text")))
        self.flush()

    def flush(self) -> None:
        if self._writer is not None and not self._failed:
            self._writer.flush()
