"""The trainer as real processes: a PS and workers on 127.0.0.x, a Lease served by an HTTP double of the API."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.ports import free_port
from tests.trainer.cluster_lease import ClusterLease
from tests.trainer.lease_double import LeaseDouble
from tests.trainer.processes import TrainerJob, wait_for
from ttj_contract import lease_name

pytestmark = pytest.mark.tensorflow

STARTUP = 90.0  # generous: several TensorFlow processes start at once on 2 shared cores


@pytest.fixture
def lease(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The job's Lease, with job-worker-0 as the first chief: on the cluster under test (the local cluster
    unless KUBECONFIG names one), or on the HTTP double when TTJ_TRAINER_TESTS_LEASE=double."""
    if os.environ.get("TTJ_TRAINER_TESTS_LEASE") == "double":
        with LeaseDouble("default", lease_name("job"), holder="job-worker-0") as double:
            yield double
        return
    kubeconfig = request.getfixturevalue("kubeconfig")
    with ClusterLease(kubeconfig, lease_name("job"), holder="job-worker-0") as on_cluster:
        yield on_cluster


@pytest.fixture
def make_job(tmp_path: Path, lease: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    jobs: list[TrainerJob] = []

    def make(**settings: Any) -> TrainerJob:
        job = TrainerJob(
            tmp_path, lease.write_kubeconfig(tmp_path / "kubeconfig"), namespace=lease.namespace, **settings
        )
        jobs.append(job)
        return job

    yield make
    for job in jobs:
        job.stop_all()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(job.dump_logs())  # shown by pytest with the failure


def scrape(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            text: str = response.read().decode()
    except OSError:
        return None
    return text if 'role="chief"} 1.0' in text else None


def latest(job: TrainerJob) -> Any:
    from ttj_trainer import checkpoints

    return checkpoints.latest(job.checkpoint_uri)


class ProgressRecorder(threading.Thread):
    """Samples the chief's published progress, to check that the global step never goes back."""

    def __init__(self, lease: Any) -> None:
        super().__init__(daemon=True)
        self.lease = lease
        self.samples: list[int] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.1):
            progress = self.lease.progress()
            if progress is not None:
                self.samples.append(progress.global_step)

    def __enter__(self) -> ProgressRecorder:
        self.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.stopped.set()
        self.join()


def evaluate_loss(checkpoint_path: str) -> float:
    """Cross-entropy of the small CNN from a checkpoint on a fixed synthetic batch, computed here in the test
    (the checkpoint restored into the built-in program's model, as a user restores theirs)."""
    import keras

    from ttj_trainer import data, program

    p = program.load("ttj_trainer.builtin:program", {"model": "small-cnn", "dataset": "synthetic"})
    model = program.built_model(p)
    program.restore(model, checkpoint_path)
    images, labels = next(data.synthetic_batches(512, seed=0, rng=np.random.default_rng(1234)))
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return float(loss(labels, model(images, training=False)))


def test_named_variables_are_shared_between_clients_of_one_server(tmp_path: Path) -> None:
    """Pins TensorFlow behaviour the design rests on: two clients opening one shared_name see one variable."""
    ps_address = f"127.0.0.1:{free_port()}"
    job = TrainerJob(tmp_path, tmp_path / "unused-kubeconfig", slots=1)
    job.ps_addresses = [ps_address]
    job.start("ps", 0)
    client = str(Path(__file__).with_name("shared_variable_client.py"))
    try:

        def add(amount: int) -> int:
            own = f"127.0.0.{20 + amount}:{free_port(f'127.0.0.{20 + amount}')}"
            result = subprocess.run(
                [sys.executable, client, ps_address, own, str(amount)],
                capture_output=True,
                text=True,
                timeout=STARTUP,
                check=False,
            )
            assert result.returncode == 0, result.stderr[-2000:]
            return int(result.stdout.strip().splitlines()[-1])

        assert add(1) == 1
        # A second client, after the first has gone, sees (and updates) the same variable.
        assert add(2) == 3
        assert add(4) == 7
    finally:
        job.stop_all()


def test_one_ps_three_workers_train_and_the_loss_falls(make_job: Any, lease: Any) -> None:
    job = make_job(slots=3, TTJ_TRAIN_STEPS="240", TTJ_CHECKPOINT_INTERVAL_STEPS="80", TTJ_CHECKPOINTS_TO_KEEP="50")
    job.start("ps", 0)
    for slot in range(3):
        job.start("worker", slot)
    with ProgressRecorder(lease) as recorder:
        codes = [job.wait("worker", slot, 180) for slot in range(3)]
    assert codes == [0, 0, 0]
    final = latest(job)
    assert final is not None
    assert final.step >= 240
    assert final.epoch == 0
    assert recorder.samples == sorted(recorder.samples)
    progress = lease.progress()
    assert progress is not None
    assert progress.checkpoint_step == final.step
    assert progress.checkpoint_path == final.path
    # The chief's training loss rides along: finite, and below the fresh model's held-out loss.
    assert progress.loss is not None
    assert 0 < progress.loss < evaluate_loss(f"{job.checkpoint_uri}/ckpt-0-e0")
    # Every worker took part: each logged at least one training step of its own.
    trained = {e["pod"] for e in job.logs() if e.get("msg") in ("training", "reached the last step")}
    assert trained == {"job-worker-0", "job-worker-1", "job-worker-2"}
    first = f"{job.checkpoint_uri}/ckpt-0-e0"
    assert evaluate_loss(final.path) < 0.5 * evaluate_loss(first)


def test_chief_killed_another_worker_takes_over_without_losing_steps(make_job: Any, lease: Any) -> None:
    job = make_job(slots=3)
    job.start("ps", 0)
    for slot in range(3):
        job.start("worker", slot)
    with ProgressRecorder(lease) as recorder:
        before = wait_for(lambda: (c := latest(job)) and c.step >= 100 and c, STARTUP, "the first chief's checkpoints")
        job.signal("worker", 0, signal.SIGKILL)
        job.wait("worker", 0, 10)
        # The furthest the job had got when its chief died: its last checkpoint or last published step.
        killed_at = max([latest(job).step, *recorder.samples])
        epoch = lease.elect("job-worker-1")
        handover = wait_for(lambda: (c := latest(job)) and c.epoch == epoch and c, 60, "a checkpoint by the new chief")
        later = wait_for(lambda: (c := latest(job)) and c.step >= handover.step + 100 and c, 60, "training to go on")
    assert later.epoch == epoch
    assert handover.step >= killed_at >= before.step  # the new chief did not restore over the live PS
    assert recorder.samples == sorted(recorder.samples)  # the global step never went back
    assert lease.snapshot()["spec"]["renewTime"]  # the new chief renews its Lease
    assert not any(e.get("msg", "").startswith("parameter server restored") for e in job.logs())


def test_sigterm_makes_the_chief_checkpoint_and_exit_143(make_job: Any, lease: Any) -> None:
    job = make_job(slots=2, TTJ_CHECKPOINT_INTERVAL_STEPS="0", TTJ_CHECKPOINT_INTERVAL_SECONDS="0")
    metrics_port = free_port()
    job.start("ps", 0)
    job.start("worker", 0, TTJ_METRICS_PORT=str(metrics_port))
    job.start("worker", 1)
    wait_for(lambda: (p := lease.progress()) and p.global_step >= 50, STARTUP, "training")
    # The chief serves Prometheus metrics on its POD_IP.
    metrics_url = f"http://{job.worker_addresses[0].rsplit(':', 1)[0]}:{metrics_port}/metrics"
    text = wait_for(lambda: scrape(metrics_url), 30, "metrics")
    assert 'ttj_trainer_role{role="chief"} 1.0' in text
    assert "ttj_trainer_global_step " in text
    assert "ttj_trainer_steps_per_second " in text
    step_before = lease.progress().global_step
    sent = time.monotonic()
    job.signal("worker", 0, signal.SIGTERM)
    code = job.wait("worker", 0, 15)
    elapsed = time.monotonic() - sent
    assert code == 143
    assert elapsed < 5.0, f"the chief took {elapsed:.1f}s to checkpoint and exit"
    checkpoint = latest(job)
    assert checkpoint is not None
    assert checkpoint.step >= step_before
    assert any(e.get("msg") == "checkpoint written" and e.get("reason") == "sigterm" for e in job.logs())
    # A plain worker stops cleanly too.
    job.signal("worker", 1, signal.SIGTERM)
    assert job.wait("worker", 1, 15) == 143


def test_ps_restart_new_chief_restores_latest_checkpoint(make_job: Any, lease: Any) -> None:
    job = make_job(slots=2, TTJ_CHECKPOINT_INTERVAL_STEPS="50")
    job.start("ps", 0)
    job.start("worker", 0)
    job.start("worker", 1)
    wait_for(lambda: (c := latest(job)) and c.step >= 100, STARTUP, "checkpoints")
    job.signal("ps", 0, signal.SIGKILL)
    job.wait("ps", 0, 10)
    saved = latest(job)
    lost_at = lease.progress().global_step
    epoch = lease.elect("job-worker-1")
    job.start("ps", 0)
    resumed = wait_for(lambda: (c := latest(job)) and c.epoch == epoch and c, STARTUP, "the new chief's checkpoint")
    assert resumed.step >= saved.step
    restored = [e for e in job.logs() if e.get("msg") == "parameter server restored from checkpoint"]
    assert [(e["pod"], e["step"]) for e in restored] == [("job-worker-1", saved.step)]
    assert lost_at - saved.step <= 50 + 10  # at most one interval (plus steps in flight) was lost
    wait_for(lambda: (c := latest(job)) and c.step >= saved.step + 100, 60, "training to resume after the restore")


def test_workers_started_before_their_parameter_server_wait_for_it(make_job: Any, lease: Any) -> None:
    """A worker can start while its PS is down (a replacement during a PS restart, or the job's first pods
    started in any order): it waits for the PS instead of exiting, which the operator would count as a failure."""
    job = make_job(slots=2, TTJ_CHECKPOINT_INTERVAL_STEPS="50")
    workers = [job.start("worker", 0), job.start("worker", 1)]
    wait_for(
        lambda: any(e.get("msg") == "waiting for the parameter servers to accept connections" for e in job.logs()),
        STARTUP,
        "the workers to wait for the parameter server",
    )
    assert [w.poll() for w in workers] == [None, None], job.dump_logs()
    job.start("ps", 0)
    wait_for(lambda: (c := latest(job)) and c.step >= 100, STARTUP, "checkpoints once the PS is up")
    assert [w.poll() for w in workers] == [None, None]


def test_stale_chief_cannot_write(make_job: Any, lease: Any) -> None:
    """A chief frozen while another was elected wakes up and must not write a checkpoint of its old epoch."""
    # Two parameter servers here, so that spreading the variables over several is exercised too.
    job = make_job(slots=2, ps_count=2, TTJ_CHECKPOINT_INTERVAL_STEPS="20")
    job.start("ps", 0)
    job.start("ps", 1)
    job.start("worker", 0)
    job.start("worker", 1)
    wait_for(lambda: (c := latest(job)) and c.step >= 40, STARTUP, "checkpoints")
    job.signal("worker", 0, signal.SIGSTOP)
    epoch = lease.elect("job-worker-1")
    wait_for(lambda: (c := latest(job)) and c.epoch == epoch, 60, "a checkpoint by the new chief")
    job.signal("worker", 0, signal.SIGCONT)
    wait_for(
        lambda: any(
            e.get("msg") == "no longer chief: stopped checkpointing" and e["pod"] == "job-worker-0" for e in job.logs()
        ),
        60,
        "the old chief to step down",
    )
    # Let both run on for a while; the index must stay in the new epoch.
    mark = latest(job).step
    wait_for(lambda: latest(job).step >= mark + 60, 60, "more checkpoints")
    assert latest(job).epoch == epoch
    written = [e for e in job.logs() if e.get("msg") == "checkpoint written" and e["pod"] == "job-worker-0"]
    stepped_down = min(
        e["time"]
        for e in job.logs()
        if e.get("msg") == "no longer chief: stopped checkpointing" and e["pod"] == "job-worker-0"
    )
    assert all(e["time"] <= stepped_down for e in written)


def test_checkpoint_fencing_refuses_an_older_epoch(tmp_path: Path) -> None:
    from ttj_trainer import checkpoints

    uri = str(tmp_path / "ckpt")
    values = {"w": np.ones((2, 2), np.float32), "ttj/global_step": np.array(7, np.int64)}
    checkpoints.claim(uri, 3, "chief-a")
    path = checkpoints.save(uri, 7, 3, values, writer="chief-a")
    assert checkpoints.latest(uri) == (7, 3, path)
    with pytest.raises(checkpoints.StaleEpochError):
        checkpoints.claim(uri, 2, "chief-old")
    with pytest.raises(checkpoints.StaleEpochError):
        checkpoints.save(uri, 9, 2, values, writer="chief-old")

    # A fence that finds the Lease moved on refuses the commit after the data was written.
    def moved_on() -> None:
        raise checkpoints.StaleEpochError("the Lease names someone else")

    with pytest.raises(checkpoints.StaleEpochError):
        checkpoints.save(uri, 11, 3, values, writer="chief-a", fence=moved_on)
    assert checkpoints.latest(uri) == (7, 3, path)
    restored = checkpoints.restore(path, {"w": np.float32, "ttj/global_step": np.int64})
    assert restored["ttj/global_step"] == 7
    assert json.loads((tmp_path / "ckpt" / checkpoints.INDEX).read_text())["history"] == [path]


@pytest.mark.slow
def test_resnet32_trains_and_checkpoints(make_job: Any, lease: Any) -> None:
    """The paper's model end to end on CPU (slow: a ResNet-32 step takes a while on 2 cores)."""
    import tensorflow as tf

    from ttj_trainer import program, variables

    job = make_job(slots=1, TTJ_MODEL="resnet32", TTJ_TRAIN_STEPS="6", TTJ_BATCH_SIZE="8")
    job.start("ps", 0)
    job.start("worker", 0)
    assert job.wait("worker", 0, 280) == 0
    final = latest(job)
    assert final is not None
    assert final.step >= 6
    stored = tf.train.load_checkpoint(final.path).get_variable_to_shape_map()
    model = program.built_model(
        program.load("ttj_trainer.builtin:program", {"model": "resnet32", "dataset": "synthetic"})
    )
    names = variables.model_names(model)
    assert len(names) == 5 + 15 * 2 * 5 + 2  # a conv (1) and its BN (4) first and twice per block; the classifier
    for name, variable in names.items():
        assert tuple(stored[name]) == tuple(variable.shape)
