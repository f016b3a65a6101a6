"""Evaluation of a program's evaluation set by the chief at its checkpoints, reported in its progress record."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.trainer.lease_double import LeaseDouble
from tests.trainer.processes import TrainerJob
from ttj_contract import lease_name

pytestmark = pytest.mark.tensorflow

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = "tests.trainer.programs.models"
BATCH, SEED = 16, 3


def keras_evaluate(entrypoint: str, checkpoint: str) -> dict[str, float]:
    """What Keras's own Model.evaluate says of the program's model restored from ``checkpoint``, on the
    batches the chief evaluates (eval_input's first eval_steps batches, slot 0 of 1, the job's seed)."""
    from ttj_trainer import evaluation, program

    p = program.load(entrypoint, {"optimizer": "adam"})
    model = program.built_model(p)
    program.restore(model, checkpoint)
    model.compile(loss=p.loss, metrics=evaluation.fresh_metrics(p.metrics), jit_compile=False)
    assert p.eval_input is not None
    batches = p.eval_input(evaluation.context(BATCH, SEED)).take(p.eval_steps)
    result: dict[str, float] = model.evaluate(batches, verbose=0, return_dict=True)
    return {name: float(value) for name, value in result.items()}


def test_evaluate_reads_at_most_eval_steps_batches_and_agrees_with_keras() -> None:
    """In one process, no PS: the evaluation itself, against Model.evaluate of the same model and batches."""
    import keras

    from tests.trainer.programs.models import EVAL_STEPS
    from ttj_trainer import evaluation, program

    keras.utils.set_random_seed(0)
    p = program.load(f"{PROGRAMS}:mlp_with_evaluation", {})
    model = program.built_model(p)
    assert p.eval_input is not None
    loss_fn = p.loss

    def forward(features: Any, labels: Any) -> tuple[Any, Any]:
        predictions = model(features, training=False)
        return predictions, loss_fn(labels, predictions) + sum(model.losses)

    beats: list[int] = []
    ours = evaluation.evaluate(
        p,
        iter(p.eval_input(evaluation.context(BATCH, SEED))),
        forward,
        max_steps=EVAL_STEPS,
        device="/device:CPU:0",
        beat=lambda: beats.append(1),
    )
    assert len(beats) == EVAL_STEPS  # six batches in the set, four read; a beat after each
    model.compile(loss=p.loss, metrics=evaluation.fresh_metrics(p.metrics), jit_compile=False)
    expected = model.evaluate(
        p.eval_input(evaluation.context(BATCH, SEED)).take(EVAL_STEPS), verbose=0, return_dict=True
    )
    assert sorted(ours) == sorted(expected) == ["accuracy", "crossentropy", "loss"]
    for name, value in expected.items():
        assert ours[name] == pytest.approx(float(value), rel=1e-5, abs=1e-6), name


def test_the_gauge_carries_each_metric_by_name() -> None:
    from prometheus_client import REGISTRY

    from ttj_trainer import metrics
    from ttj_trainer.evaluation import Evaluation

    metrics.show_evaluation(Evaluation(step=30, metrics={"loss": 0.25, "accuracy": 0.875}))
    assert REGISTRY.get_sample_value("ttj_trainer_evaluation", {"metric": "loss"}) == 0.25
    assert REGISTRY.get_sample_value("ttj_trainer_evaluation", {"metric": "accuracy"}) == 0.875
    assert REGISTRY.get_sample_value("ttj_trainer_evaluation_step") == 30


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("tests.trainer.programs.bad:eval_misfit", "the model cannot take eval_input's features"),
        (
            "tests.trainer.programs.bad:eval_metric_not_a_metric",
            "Program.metrics[0] is a str, not a keras.metrics.Metric",
        ),
    ],
)
def test_a_bad_evaluation_set_fails_at_the_check(name: str, says: str) -> None:
    from ttj_trainer import program

    with pytest.raises(program.ProgramError) as info:
        program.prepare(name, program.load(name, {}), program.InputContext(0, 1, 4, 0))
    assert str(info.value).startswith(f"spec.program.entrypoint {name!r}: ")
    assert says in str(info.value)


@pytest.fixture
def lease_and_job(tmp_path: Path) -> Iterator[tuple[LeaseDouble, TrainerJob]]:
    with LeaseDouble("default", lease_name("job"), holder="job-worker-0") as double:
        job = TrainerJob(
            tmp_path,
            double.write_kubeconfig(tmp_path / "kubeconfig"),
            slots=1,
            TTJ_PROGRAM=f"{PROGRAMS}:mlp_with_evaluation",
            TTJ_PROGRAM_ARGS='{"optimizer": "adam"}',
            TTJ_TRAIN_STEPS="40",
            TTJ_CHECKPOINT_INTERVAL_STEPS="15",
            TTJ_BATCH_SIZE=str(BATCH),
            TTJ_SEED=str(SEED),
        )
        try:
            yield double, job
        finally:
            job.stop_all()


def test_the_chief_reports_its_evaluations_and_the_exported_model(lease_and_job: Any) -> None:
    """One worker, one PS, 40 steps, a checkpoint every 15: evaluations at 15, 30 and the final 40, each in a
    log event; the last report carries the final one, equal to Keras's evaluate of the final checkpoint,
    and the exported model's directory."""
    from ttj_trainer import checkpoints, export

    lease, job = lease_and_job
    job.start("ps", 0)
    job.start("worker", 0, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    assert job.wait("worker", 0, 240) == 0, job.dump_logs()
    final = checkpoints.latest(job.checkpoint_uri)
    assert final is not None
    assert final.step == 40
    evaluated = [e for e in job.logs() if e.get("msg") == "evaluated"]
    assert [e["step"] for e in evaluated] == [15, 30, 40]
    progress = lease.progress()
    assert progress is not None
    assert progress.evaluation_step == 40
    assert progress.evaluation == evaluated[-1]["metrics"]
    expected = keras_evaluate(f"{PROGRAMS}:mlp_with_evaluation", final.path)
    assert sorted(progress.evaluation) == sorted(expected) == ["accuracy", "crossentropy", "loss"]
    for name, value in expected.items():
        assert progress.evaluation[name] == pytest.approx(value, rel=1e-5, abs=1e-6), name
    assert progress.export_path == export.location(job.checkpoint_uri, final.step)
    assert Path(progress.export_path, export.KERAS_FILE).is_file()
    # what a step moves to and from its one PS: the model's variables (the operator prices cross-zone traffic)
    from ttj_trainer import program

    name = f"{PROGRAMS}:mlp_with_evaluation"
    built = program.prepare(name, program.load(name, {"optimizer": "adam"}), program.InputContext(0, 1, BATCH, 0))
    model_bytes = sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in built.program.model.variables)
    assert progress.parameter_bytes == (model_bytes,)
    assert np.isfinite(progress.evaluation["loss"])
