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

from tests.ports import free_port
from tests.trainer.processes import TrainerJob

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


def train_under_ttj(
    ps: str,
    tmp_path: Path,
    entrypoint: str,
    args: dict[str, str],
    steps: int = STEPS,
    *,
    checkpoint_dir: str = "",
    overlap: bool = False,
    wire: bool = True,
) -> Any:
    """``ps``: the PS addresses, comma-separated; with ``checkpoint_dir`` the probe also checkpoints there;
    ``overlap``: the exchange overlapped with the next step (else exact steps); ``wire``: over the PS's wire
    where it can (else always TensorFlow's call)."""
    out = tmp_path / "trained.npz"
    env = os.environ | {
        "PYTHONPATH": str(ROOT),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PROBE_OVERLAP": str(int(overlap)),
        "PROBE_WIRE": str(int(wire)),
    }
    own = f"127.0.0.7:{free_port('127.0.0.7')}"
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
        *([checkpoint_dir] if checkpoint_dir else []),
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


#: How a test's exchanges go: over the wire (the default), or through TensorFlow's call with the wire turned off.
TRANSPORTS = {"wire": {}, "turned off": {"wire": False}}


@pytest.mark.parametrize(("optimizer", "transport"), [("sgd", "wire"), ("adam", "wire"), ("adam", "turned off")])
def test_one_worker_one_ps_trains_exactly_as_keras_fit(
    parameter_server: str, tmp_path: Path, optimizer: str, transport: str, record_property: Any
) -> None:
    """SGD with Nesterov momentum, and Adam with an exponential-decay schedule of the global step, on a model
    with BatchNormalization, Dropout, an L2 regulariser and a custom layer; the exchange over the PS's wire
    (after the first, which traces it through TensorFlow's call), and through TensorFlow's call alone (the
    wire turned off)."""
    entrypoint, args = f"{PROGRAMS}:mlp", {"optimizer": optimizer}
    trained = train_under_ttj(parameter_server, tmp_path, entrypoint, args, **TRANSPORTS[transport])
    wire = transport == "wire"
    model, keras_optimizer = train_with_keras_fit(entrypoint, args)
    assert int(keras_optimizer.iterations.numpy()) == STEPS
    assert int(trained["ps.ttj_global_step"]) == STEPS
    over_wire = STEPS - 1 if wire else 0
    assert (trained["exchanges.wire"], trained["exchanges.tensorflow"]) == (over_wire, STEPS - over_wire)
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


def test_with_overlap_each_step_lacks_exactly_the_workers_own_previous_gradient(
    parameter_server: str, tmp_path: Path
) -> None:
    """Least squares with plain SGD, followed in numpy: the first two steps as exact training, then step t
    computes its gradient on the weights after step t - 2; every gradient reaches the PS (global step =
    steps), and the PS ends with each of them applied once."""
    from tests.trainer.programs.models import FEATURES, LINEAR_RATE, linear
    from ttj_trainer.program import InputContext

    trained = train_under_ttj(parameter_server, tmp_path, f"{PROGRAMS}:linear", {}, overlap=True)
    dataset = linear({}).train_input(InputContext(0, 1, BATCH, SEED))
    batches = [(f.numpy().astype(np.float64), y.numpy().astype(np.float64)) for f, y in dataset.take(STEPS)]
    kernel, bias = np.zeros(FEATURES), 0.0
    weights = [(kernel, bias)]  # weights[t]: after t updates
    losses = []
    for t, (features, targets) in enumerate(batches, start=1):
        kernel, bias = weights[max(0, t - 2)] if t > 2 else weights[t - 1]
        error = features @ kernel + bias - targets
        losses.append(np.mean(error**2))
        gradient_kernel, gradient_bias = 2 * features.T @ error / len(targets), 2 * np.mean(error)
        last_kernel, last_bias = weights[-1]
        weights.append((last_kernel - LINEAR_RATE * gradient_kernel, last_bias - LINEAR_RATE * gradient_bias))
    assert int(trained["ps.ttj_global_step"]) == STEPS
    np.testing.assert_allclose(trained["losses"], losses, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(trained["ps.model_00000"][:, 0], weights[-1][0], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(trained["ps.model_00001"][0], weights[-1][1], rtol=1e-4, atol=1e-6)


def test_a_step_that_reads_its_batch_trains_as_one_given_the_batch_and_the_data_end_is_the_programs_error() -> None:
    """The worker's step reads a ``tf.data`` batch inside its function: the same losses and variables as
    steps given the same batches, and the data's end is StopIteration, not an error of the TensorFlow runtime
    (which the worker takes for a lost parameter server), and to the worker the program's error."""
    import keras

    from ttj_trainer import program
    from ttj_trainer.config import load
    from ttj_trainer.parameters import ParameterStore
    from ttj_trainer.program import ProgramError
    from ttj_trainer.selfcheck import sample_env
    from ttj_trainer.training import Training

    entrypoint = f"{PROGRAMS}:mlp"
    runs = []
    for reading in (False, True):
        keras.utils.set_random_seed(SEED)
        prepared = program.prepare(entrypoint, program.load(entrypoint, {}), program.InputContext(0, 1, BATCH, SEED))
        store = ParameterStore.of(
            prepared,
            ps_count=1,
            worker_slots=1,
            local_device="/device:CPU:0",
            ps_device_of=lambda _i: "/device:CPU:0",
            overlap=False,
        )
        store.open()
        store.assign_all(store.initial_values())
        finite = iter(prepared.program.train_input(program.InputContext(0, 1, BATCH, SEED)).take(3))
        if reading:
            losses = [store.train_step_reading(finite, 1.0)[0] for _ in range(3)]
            with pytest.raises(StopIteration):
                store.train_step_reading(finite, 1.0)
            training = Training(load(sample_env()), simulated_gpu_seconds=0.0)
            with pytest.raises(ProgramError, match="train_input's dataset ended after 0 steps of this worker"):
                training.step(store, finite, None, chief=False)
        else:
            losses = [store.train_step(*batch, 1.0)[0] for batch in finite]
        store.flush()
        runs.append((losses, store.read_all()))
        keras.backend.clear_session()
    (given, given_values), (read, read_values) = runs
    np.testing.assert_allclose(read, given, rtol=1e-6)
    assert given_values.keys() == read_values.keys()
    for name, value in given_values.items():
        np.testing.assert_allclose(read_values[name], value, rtol=1e-6, atol=1e-7, err_msg=name)


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


def test_plan_balances_variables_with_their_slots_by_bytes_and_splits_none() -> None:
    """Largest group (a variable and its slots) first onto the PS task with the fewest bytes; the optimizer's
    own variables, the global step and the heartbeats on PS 0."""
    from types import SimpleNamespace

    import tensorflow as tf

    from ttj_trainer.parameters import HEARTBEATS, STEP_REPORTS, plan
    from ttj_trainer.variables import GLOBAL_STEP, Shared

    def var(shape: tuple[int, ...], dtype: str = "float32") -> Any:
        return SimpleNamespace(shape=shape, dtype=dtype)

    variables = [
        Shared("model/00000", var((1000, 16))),  # 64 KB, with its slot 128 KB
        Shared("model/00001", var((16,))),
        Shared("model/00002", var((500, 16))),  # 32 KB, with its slot 64 KB
        Shared("model/00003", var((300, 16), "float64")),  # float64: 38.4 KB, with its slot 76.8 KB
        Shared("model/00004", var((100, 16))),  # no slot (not trainable, e.g. BatchNormalization's statistics)
        Shared(GLOBAL_STEP, var((), "int64")),
        Shared("optimizer/00001", var((1000, 16)), beside="model/00000"),
        Shared("optimizer/00002", var((16,)), beside="model/00001"),
        Shared("optimizer/00003", var((500, 16)), beside="model/00002"),
        Shared("optimizer/00004", var((300, 16), "float64"), beside="model/00003"),
    ]
    placed = {slot.name: (slot.ps_index, slot.shape, slot.dtype) for slot in plan(variables, 3, 2)}
    f32, f64 = tf.float32, tf.float64
    assert placed == {
        "model/00000": (0, (1000, 16), f32),
        "optimizer/00001": (0, (1000, 16), f32),
        "model/00003": (1, (300, 16), f64),  # 76.8 KB: before the 64 KB group although it has fewer elements
        "optimizer/00004": (1, (300, 16), f64),
        "model/00002": (2, (500, 16), f32),
        "optimizer/00003": (2, (500, 16), f32),
        "model/00004": (2, (100, 16), f32),  # 6.4 KB onto PS 2 (64 KB) rather than PS 1 (76.8 KB)
        "model/00001": (2, (16,), f32),
        "optimizer/00002": (2, (16,), f32),
        GLOBAL_STEP: (0, (), tf.int64),
        HEARTBEATS: (0, (2,), f64),
        STEP_REPORTS: (0, (2, 4), f64),
    }


def test_a_step_moves_the_model_variables_of_each_ps_but_not_the_slots_nor_tables_looked_up_by_row() -> None:
    import tensorflow as tf

    from ttj_trainer.parameters import HEARTBEATS, Slot, step_bytes_per_ps
    from ttj_trainer.variables import GLOBAL_STEP

    slots = [
        Slot("model/00000", (1000, 16), tf.float32, 0),  # an embedding table, looked up by row
        Slot("optimizer/00001", (1000, 16), tf.float32, 0),
        Slot("model/00001", (16, 4), tf.float32, 1),
        Slot("optimizer/00002", (16, 4), tf.float32, 1),
        Slot("model/00002", (4,), tf.float64, 1),  # e.g. BatchNormalization's statistics: read and written
        Slot(GLOBAL_STEP, (), tf.int64, 0),
        Slot(HEARTBEATS, (2,), tf.float64, 0),
    ]
    assert step_bytes_per_ps(slots, 3, {"model/00000"}) == [0, 16 * 4 * 4 + 4 * 8, 0]
    assert step_bytes_per_ps(slots, 3, set()) == [1000 * 16 * 4, 16 * 4 * 4 + 4 * 8, 0]


def test_two_ps_tasks_hold_the_variables_as_planned_and_the_checkpoint_restores_into_the_plain_model(
    tmp_path: Path,
) -> None:
    """Trained against two real PS processes: each variable is on the task the plan gives it, the table's
    gradient still arrives as rows (every exchange through TensorFlow's call: the update spans both PS tasks),
    and the checkpoint restores into the program's own model in three lines."""
    from ttj_trainer import program
    from ttj_trainer.parameters import LIVE, plan

    job = TrainerJob(tmp_path, tmp_path / "unused-kubeconfig", slots=1, ps_count=2)
    job.start("ps", 0)
    job.start("ps", 1)
    entrypoint, args = f"{PROGRAMS}:embedding", {"rows": "200000", "width": "8", "optimizer": "adagrad"}
    checkpoint_dir = str(tmp_path / "checkpoints")
    try:
        trained = train_under_ttj(
            ",".join(job.ps_addresses), tmp_path, entrypoint, args, 6, checkpoint_dir=checkpoint_dir
        )
    finally:
        job.stop_all()
    prepared = program.prepare(entrypoint, program.load(entrypoint, args), program.InputContext(0, 1, BATCH, SEED))
    planned = {s.name: s.ps_index for s in plan(prepared.shared, 2, 1)}
    placed = {k[len("device.") :]: str(trained[k]) for k in trained.files if k.startswith("device.")}
    assert placed == {
        name.replace("/", "_"): f"/job:ps/replica:0/task:{planned[name]}/device:CPU:0"
        for name in planned
        if name not in LIVE
    }
    assert {planned["model/00000"], planned["model/00001"]} == {0, 1}  # the table on one task, the tower on the other
    table_bytes = 200_000 * 8 * 4
    assert float(np.median(trained["moved"][2:])) < table_bytes / 20
    assert (trained["exchanges.wire"], trained["exchanges.tensorflow"]) == (0, 6)
    # The three lines of docs/programs.md, in this process: the user's plain Keras model.
    p = program.load(entrypoint, args)
    model = program.built_model(p)
    program.restore(model, checkpoint_dir)
    for i, variable in enumerate(model.variables):
        np.testing.assert_array_equal(variable.numpy(), trained[f"model.{i}"], err_msg=variable.path)


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("missing_module:program", "cannot import 'missing_module': ModuleNotFoundError: No module named"),
        ("tests.trainer.programs.bad:NOT_A_FUNCTION", "'NOT_A_FUNCTION' is a int, not a function"),
        ("tests.trainer.programs.bad:raises", "raised KeyError: \"no argument 'units' in ['lr']\""),
        ("tests.trainer.programs.bad:wrong_return", "returned a Sequential, not a ttj_trainer.program.Program"),
        ("tests.trainer.programs.bad:no_trainable", "the model has no trainable variables"),
        ("tests.trainer.programs.bad:misfit", "the model cannot take train_input's features"),
        ("no_colon", "must be 'module:function'"),
    ],
)
def test_a_bad_program_is_named_with_its_error(name: str, says: str) -> None:
    from ttj_trainer import program

    with pytest.raises(program.ProgramError) as info:
        program.prepare(name, program.load(name, {"lr": "0.1"}), program.InputContext(0, 1, 4, 0))
    assert str(info.value).startswith(f"spec.program.entrypoint {name!r}: ")
    assert says in str(info.value)


def test_self_check_builds_a_program_and_says_its_bytes_per_ps() -> None:
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "ttj_trainer", "--self-check", "--program", f"{PROGRAMS}:embedding"]
    command += ["--arg", "rows=1000", "--arg", "width=4", "--ps", "2"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    # The table (1000 x 4) and its momentum on PS 0 with the global step and a heartbeat (8 bytes each) and
    # a step report (4 x 8 bytes), the dense tower (8 x 1 + 1, and momentum) on PS 1.
    assert report["parameters"] == 1000 * 4 + 8 + 1
    assert report["bytes_per_ps"] == [1000 * 4 * 4 * 2 + 8 + 8 + 32, (8 + 1) * 4 * 2]
    assert report["imbalance"] == round(report["bytes_per_ps"][0] / (sum(report["bytes_per_ps"]) / 2), 3)
    assert report["largest_per_ps"] == ["wide/embedding/embeddings", "wide/dense/kernel"]
    # A step moves the table's rows only (not counted) and the dense tower whole, both ways.
    assert report["step_bytes_per_ps"] == [0, (8 + 1) * 4]
    assert np.isfinite(report["first_loss"])
    bad = subprocess.run(
        [sys.executable, "-m", "ttj_trainer", "--self-check", "--program", "tests.trainer.programs.bad:misfit"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert bad.returncode == 1
    assert "the model cannot take train_input's features" in bad.stderr


@pytest.fixture
def job_with_lease(tmp_path: Path) -> Iterator[Any]:
    """Makes one job's processes (a PS and workers) with its Lease on the HTTP double; stops them after."""
    from tests.trainer.lease_double import LeaseDouble
    from ttj_contract import lease_name

    jobs: list[TrainerJob] = []
    with LeaseDouble("default", lease_name("job"), holder="job-worker-0") as double:

        def make(**settings: str) -> TrainerJob:
            job = TrainerJob(tmp_path, double.write_kubeconfig(tmp_path / "kubeconfig"), slots=1, **settings)
            jobs.append(job)
            return job

        yield make
        for job in jobs:
            job.stop_all()


def test_a_program_that_does_not_import_ends_the_worker_with_its_own_exit_code(job_with_lease: Any) -> None:
    from ttj_contract import TrainerExit

    job = job_with_lease(TTJ_PROGRAM="my_pkg.train:program", TTJ_PROGRAM_ARGS='{"units": "64"}')
    termination = job.workdir / "termination-log"
    job.start("ps", 0)
    job.start("worker", 0, TTJ_TERMINATION_LOG=str(termination))
    assert job.wait("worker", 0, 240) == TrainerExit.PROGRAM_INVALID
    message = termination.read_text()
    assert message.startswith("program error: spec.program.entrypoint 'my_pkg.train:program': cannot import")
    assert message.endswith("ModuleNotFoundError: No module named 'my_pkg'")


def test_a_loss_that_turns_nan_stops_training_and_keeps_the_good_checkpoint(job_with_lease: Any) -> None:
    from ttj_contract import TrainerExit
    from ttj_trainer import checkpoints

    job = job_with_lease(TTJ_PROGRAM="tests.trainer.programs.bad:nan_loss", TTJ_TRAIN_STEPS="100")
    termination = job.workdir / "termination-log"
    job.start("ps", 0)
    job.start("worker", 0, TTJ_TERMINATION_LOG=str(termination), PYTHONPATH=str(ROOT))
    assert job.wait("worker", 0, 240) == TrainerExit.LOSS_NOT_FINITE
    # On the fresh weights (global step 0); its gradients never reached the PS.
    assert termination.read_text().startswith("loss not finite: the loss is nan at global step 0")
    latest = checkpoints.latest(job.checkpoint_uri)
    assert latest is not None
    assert latest.step == 0  # the chief's first checkpoint, of the fresh weights; nothing after the NaN


def test_a_finished_job_exports_a_model_that_predicts_as_its_final_checkpoint(job_with_lease: Any) -> None:
    """A functional model with BatchNormalization: trained to the end, exported by the chief; a fresh process
    loads model.keras and the SavedModel and predicts what the final checkpoint, restored into the program's
    own model with ttj_trainer.program.restore, predicts."""
    from ttj_trainer import checkpoints, export, program

    job = job_with_lease(TTJ_PROGRAM=f"{PROGRAMS}:mlp", TTJ_PROGRAM_ARGS='{"optimizer": "adam"}', TTJ_TRAIN_STEPS="30")
    job.start("ps", 0)
    job.start("worker", 0, PYTHONPATH=str(ROOT))
    assert job.wait("worker", 0, 240) == 0
    final = checkpoints.latest(job.checkpoint_uri)
    assert final is not None
    assert final.step >= 30
    where = export.location(job.checkpoint_uri, final.step)
    batch = np.random.default_rng(0).standard_normal((8, 12)).astype(np.float32)
    np.save(job.workdir / "batch.npy", batch)
    probe = str(Path(__file__).with_name("export_probe.py"))
    result = subprocess.run(
        [sys.executable, probe, where, str(job.workdir / "batch.npy"), PROGRAMS],
        env=os.environ | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    p = program.load(f"{PROGRAMS}:mlp", {"optimizer": "adam"})
    model = program.built_model(p)
    program.restore(model, job.checkpoint_uri)
    expected = np.asarray(model(batch, training=False))
    np.testing.assert_allclose(np.asarray(loaded["keras"]), expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(loaded["saved_model"]), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("entrypoint", "args"), [("ctr:program", {"rows": "5000"}), ("custom_step:program", {})])
def test_the_example_programs_build_and_take_a_step(entrypoint: str, args: dict[str, str]) -> None:
    """examples/programs (the CIFAR-10 one downloads its data, so only its manifest is checked here)."""
    env = os.environ | {"PYTHONPATH": str(ROOT / "examples" / "programs" / entrypoint.partition(":")[0])}
    command = [sys.executable, "-m", "ttj_trainer", "--self-check", "--program", entrypoint]
    command += [f"--arg={key}={value}" for key, value in args.items()]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert np.isfinite(json.loads(result.stdout.strip().splitlines()[-1])["first_loss"])


def test_the_example_manifests_are_valid_jobs() -> None:
    import yaml

    from ttj.api.models import TransientTrainingJob

    manifests = sorted((ROOT / "examples" / "programs").glob("*/job.yaml"))
    assert [m.parent.name for m in manifests] == ["cifar_applications", "ctr", "custom_step"]
    for manifest in manifests:
        job = TransientTrainingJob.model_validate(yaml.safe_load(manifest.read_text()))
        assert job.spec.program is not None
        assert job.spec.program.entrypoint == f"{manifest.parent.name}:program"
