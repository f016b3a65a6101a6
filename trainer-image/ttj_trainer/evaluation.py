"""Evaluation of a program's evaluation set: done by the chief after each periodic checkpoint and after the
final one, on the model as the parameter servers hold it then.

What is evaluated: the first ``Program.eval_steps`` batches (:data:`DEFAULT_EVAL_STEPS` unless the program
says) of ``eval_input``, called with :func:`context` (slot 0 of 1, the job's batch size and the job's seed, so
every evaluation reads the same batches). The loss is what Keras's ``Model.evaluate`` reports: the program's
loss plus the model's own losses (regularisers), averaged over examples; each metric of ``Program.metrics``
(Keras ``Metric`` objects) is reported by its ``name``. Each evaluation uses fresh copies of the metrics
(``from_config``): a reconnect to the parameter servers resets the worker's own variables.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ttj_trainer.program import DEFAULT_EVAL_STEPS, InputContext, Program

__all__ = ["DEFAULT_EVAL_STEPS", "LOSS", "Evaluation", "context", "evaluate", "fresh_metrics"]
LOSS = "loss"


@dataclass(frozen=True)
class Evaluation:
    """The metrics by Keras name (the loss as ``loss``) of the state at global step ``step``."""

    step: int
    metrics: dict[str, float]


def context(batch_size: int, seed: int) -> InputContext:
    """What ``eval_input`` is called with: the same for every evaluation and every chief."""
    return InputContext(slot=0, slot_count=1, per_worker_batch=batch_size, seed=seed)


def fresh_metrics(metrics: list[Any]) -> list[Any]:
    """New, empty copies of the program's metrics (same class and configuration)."""
    return [type(metric).from_config(metric.get_config()) for metric in metrics]


def batch_size(features: Any) -> int:
    import tensorflow as tf

    first = tf.nest.flatten(features)[0]
    return int(tf.shape(first)[0])


def evaluate(
    program: Program,
    batches: Any,
    forward: Callable[[Any, Any], tuple[Any, Any]],
    *,
    max_steps: int,
    device: str,
    beat: Callable[[], None] = lambda: None,
) -> dict[str, float]:
    """The metrics of ``forward`` (features, labels → predictions, loss) over at most ``max_steps`` of
    ``batches``. ``beat`` is called after every batch: evaluating is the training loop at work."""
    import tensorflow as tf

    metrics = fresh_metrics(program.metrics)
    total = 0.0
    examples = 0
    for taken, (features, labels) in enumerate(batches):
        if taken >= max_steps:
            break
        predictions, loss = forward(features, labels)
        count = batch_size(features)
        total += float(loss) * count
        examples += count
        with tf.device(device):
            for metric in metrics:
                metric.update_state(labels, predictions)
        beat()
    results = {LOSS: total / max(1, examples)}
    for metric in metrics:
        results[metric.name] = float(metric.result())
    return results
