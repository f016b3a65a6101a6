"""The chief's TensorBoard summaries, read back from the event files as TensorBoard reads them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ttj_trainer import metrics, tensorboard


def _events(logdir: Path) -> list[tuple[str, int, Any]]:
    import tensorflow as tf

    read = []
    for path in sorted(logdir.iterdir()):
        for record in tf.compat.v1.train.summary_iterator(str(path)):
            for value in record.summary.value:
                content = tf.make_ndarray(value.tensor)
                read.append(
                    (value.tag, record.step, content.item().decode() if content.dtype == object else float(content))
                )
    return read


def test_the_chief_writes_training_scalars_evaluations_and_elections(tmp_path: Path) -> None:
    now = [100.0]
    summaries = tensorboard.Summaries(str(tmp_path / "ckpt"), "job-worker-0-1", clock=lambda: now[0])
    metrics.global_step.set(40)
    metrics.loss.set(2.5)
    metrics.learning_rate.set(0.05)
    metrics.steps_per_second.set(4.0)
    metrics.active_workers.set(3)
    summaries.elected(2)
    summaries.sample()
    metrics.global_step.set(45)
    now[0] += tensorboard.SAMPLE_SECONDS - 1
    summaries.sample()  # too soon: nothing
    metrics.global_step.set(80)
    metrics.loss.set(1.5)
    now[0] += 1
    summaries.sample()
    summaries.evaluation(80, {"accuracy": 0.75, "loss": 1.25})
    summaries.flush()
    assert _events(tmp_path / "ckpt" / "tensorboard") == [
        ("chief", 40, "job-worker-0-1 elected chief (epoch 2)"),
        ("train/loss", 40, 2.5),
        ("train/learning_rate", 40, pytest.approx(0.05)),
        ("train/steps_per_second", 40, 4.0),
        ("train/active_workers", 40, 3.0),
        ("train/loss", 80, 1.5),
        ("train/learning_rate", 80, pytest.approx(0.05)),
        ("train/steps_per_second", 80, 4.0),
        ("train/active_workers", 80, 3.0),
        ("evaluation/accuracy", 80, 0.75),
        ("evaluation/loss", 80, 1.25),
    ]


def test_a_location_it_cannot_write_stops_the_summaries_not_the_chief(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    summaries = tensorboard.Summaries(str(blocked), "p")
    summaries.evaluation(1, {"loss": 1.0})  # raises nothing
    summaries.evaluation(2, {"loss": 1.0})
    assert summaries._failed
