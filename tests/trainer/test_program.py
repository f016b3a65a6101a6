"""User programs under the trainer: the same training as plain Keras, sparse embedding traffic, fail-fast."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.trainer.processes import TrainerJob, free_port

pytestmark = pytest.mark.tensorflow

ROOT = Path(__file__).resolve().parents[2]
PROBE = str(Path(__file__).with_name("program_probe.py"))
PROGRAMS = "tests.trainer.programs.models"
STEPS, BATCH, SEED = 12, 16, 5


@pytest.fixture
def parameter_server(tmp_path: Path) -> Iterator[str]:
    """A real PS process (``python -m ttj_trainer`` as task ps 0); yields its address."""
    job = TrainerJob(tmp_path, tmp_path / "unused-kubeconfig", slots=1)
    job.start("ps", 0)
    try:
        yield job.ps_addresses[0]
    finally:
        job.stop_all()


def train_under_ttj(ps: str, tmp_path: Path, entrypoint: str, args: dict[str, str], steps: int = STEPS) -> Any:
    out = tmp_path / "trained.npz"
    env = os.environ | {"PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    own = f"127.0.0.7:{free_port()}"
    command = [
        sys.executable,
        PROBE,
        ps,
        own,
        entrypoint,
        json.dumps(args),
        str(steps),
        str(BATCH),
        str(SEED),
        str(out),
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return np.load(out)


def train_with_keras_fit(entrypoint: str, args: dict[str, str], steps: int = STEPS) -> tuple[Any, Any]:
    """The same program, model.fit on the same batches in this process: the reference."""
    import keras

    from ttj_trainer import program

    keras.utils.set_random_seed(SEED)
    p = program.load(entrypoint, args)
    dataset = p.train_input(program.InputContext(0, 1, BATCH, SEED))
    p.model.compile(optimizer=p.optimizer, loss=p.loss, jit_compile=False)
    p.model.fit(dataset.take(steps), epochs=1, shuffle=False, verbose=0)
    return p.model, p.optimizer


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_one_worker_one_ps_trains_exactly_as_keras_fit(
    parameter_server: str, tmp_path: Path, optimizer: str, record_property: Any
) -> None:
    """SGD with Nesterov momentum, and Adam with an exponential-decay schedule of the global step, on a model
    with BatchNormalization, Dropout, an L2 regulariser and a custom layer."""
    entrypoint, args = f"{PROGRAMS}:mlp", {"optimizer": optimizer}
    trained = train_under_ttj(parameter_server, tmp_path, entrypoint, args)
    model, keras_optimizer = train_with_keras_fit(entrypoint, args)
    assert int(keras_optimizer.iterations.numpy()) == STEPS
    assert int(trained["ps.ttj_global_step"]) == STEPS
    worst = 0.0
    for i, variable in enumerate(model.variables):
        expected = variable.numpy()
        np.testing.assert_allclose(trained[f"model.{i}"], expected, rtol=1e-5, atol=1e-6, err_msg=variable.path)
        worst = max(worst, float(np.max(np.abs(trained[f"model.{i}"] - expected))))
    slots = [v for v in keras_optimizer.variables if v.name != "learning_rate"]
    ours = [trained[k] for k in sorted(trained.files) if k.startswith("ps.optimizer_")]
    assert len(ours) == len(slots) - 1  # all but the iteration count, which is the global step
    for variable, value in zip([v for v in slots if v.name != "iteration"], ours, strict=True):
        np.testing.assert_allclose(value, variable.numpy(), rtol=1e-5, atol=1e-6, err_msg=variable.path)
        worst = max(worst, float(np.max(np.abs(value - variable.numpy()))))
    record_property("max_abs_difference", worst)
    print(f"{optimizer}: {STEPS} steps, largest absolute difference from model.fit {worst:.3g}")


def test_embedding_gradients_reach_the_ps_as_rows(parameter_server: str, tmp_path: Path) -> None:
    """A 1M-row table (32 MB) with Adagrad: a step moves kilobytes, growing with the rows it touches."""
    entrypoint = f"{PROGRAMS}:embedding"
    moved = {}
    for ids in (2, 16):
        trained = train_under_ttj(parameter_server, tmp_path, entrypoint, {"ids": str(ids), "optimizer": "adagrad"}, 6)
        assert np.all(np.isfinite(trained["losses"]))
        moved[ids] = float(np.median(trained["moved"][2:]))  # after the first steps' function set-up
        print(f"1M x 8 table: {moved[ids]:.0f} bytes per step touching {BATCH * ids} ids")
    table_bytes = 1_000_000 * 8 * 4
    assert moved[16] < table_bytes / 100
    assert moved[16] > moved[2] + (16 - 2) * BATCH * 8 * 4  # at least the extra rows read
