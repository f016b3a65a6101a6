"""The trainer in the field, as real processes against the HTTP double of the Lease: a chief that learns it
is chief only at the end, a checkpoint location reused by a new job, a chief cut off from the API, storage
that refuses the chief, and checkpoints that cannot be read."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.trainer.lease_double import LeaseDouble
from tests.trainer.processes import TrainerJob, wait_for
from ttj_contract import TrainerExit, lease_name

pytestmark = pytest.mark.tensorflow

STARTUP = 120.0  # several TensorFlow processes start at once on 2 shared cores


@pytest.fixture
def jobs(request: pytest.FixtureRequest) -> Iterator[list[TrainerJob]]:
    """Jobs a test starts: stopped afterwards, their logs printed when the test failed."""
    started: list[TrainerJob] = []
    yield started
    for job in started:
        job.stop_all()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(job.dump_logs())


def latest(uri: str) -> Any:
    from ttj_trainer import checkpoints

    return checkpoints.latest(uri)


def logged(job: TrainerJob, msg: str, pod: str | None = None) -> list[dict[str, Any]]:
    return [e for e in job.logs() if e.get("msg") == msg and (pod is None or e.get("pod") == pod)]


# -- success without the model ---------------------------------------------------------------------
def test_a_chief_that_learns_it_is_chief_only_at_the_end_writes_the_final_checkpoint(
    tmp_path: Path, jobs: list[TrainerJob]
) -> None:
    with LeaseDouble("default", lease_name("job"), holder="job-worker-0") as lease:
        job = TrainerJob(
            tmp_path,
            lease.write_kubeconfig(tmp_path / "kubeconfig"),
            slots=2,
            TTJ_TRAIN_STEPS="300",
            TTJ_CHECKPOINT_INTERVAL_STEPS="1000",
        )
        jobs.append(job)
        door, cut_off = lease.door(tmp_path / "kubeconfig-worker-1")
        job.start("ps", 0)
        job.start("worker", 0)
        job.start("worker", 1, KUBECONFIG=str(cut_off))
        wait_for(lambda: (p := lease.progress()) and p.global_step >= 30, STARTUP, "training")
        # The new chief's API access is cut just as the old chief goes and it is named.
        lease.cut(door)
        job.signal("worker", 0, signal.SIGKILL)
        job.wait("worker", 0, 10)
        epoch = lease.elect("job-worker-1")
        wait_for(lambda: logged(job, "reached the last step", "job-worker-1"), STARTUP, "worker-1 to reach the end")
        assert job.processes["job-worker-1"].poll() is None, "a worker at the end waits for the final checkpoint"
        assert latest(job.checkpoint_uri).epoch != epoch
        lease.cut(door, cut=False)
        assert job.wait("worker", 1, 60) == 0
    final = latest(job.checkpoint_uri)
    assert final.step >= 300
    assert final.epoch == epoch
    progress = lease.progress()
    assert progress is not None
    assert (progress.checkpoint_step, progress.epoch) == (final.step, epoch), "published for the operator"


# -- a reused checkpoint location --------------------------------------------------------------------
def test_a_new_job_resumes_from_an_earlier_jobs_checkpoints_in_the_same_location(
    tmp_path: Path, jobs: list[TrainerJob]
) -> None:
    shared = str(tmp_path / "shared-checkpoints")
    created = datetime.now(UTC) - timedelta(hours=1)
    with LeaseDouble("default", lease_name("first"), holder="first-worker-0", created=created) as first_lease:
        for _ in range(3):  # an earlier job that went through a few chiefs: its epoch is well above 0
            first_lease.elect("first-worker-0")
        (tmp_path / "first").mkdir()
        first = TrainerJob(
            tmp_path / "first",
            first_lease.write_kubeconfig(tmp_path / "kubeconfig-first"),
            slots=1,
            job_name="first",
            TTJ_TRAIN_STEPS="120",
            TTJ_CHECKPOINT_URI=shared,
        )
        jobs.append(first)
        first.start("ps", 0)
        first.start("worker", 0)
        assert first.wait("worker", 0, STARTUP + 60) == 0
        first.stop_all()
    earlier = latest(shared)
    assert (earlier.step >= 120, earlier.epoch) == (True, 3)

    with LeaseDouble("default", lease_name("second"), holder="second-worker-0") as second_lease:
        (tmp_path / "second").mkdir()
        second = TrainerJob(
            tmp_path / "second",
            second_lease.write_kubeconfig(tmp_path / "kubeconfig-second"),
            slots=1,
            job_name="second",
            TTJ_TRAIN_STEPS="240",
            TTJ_CHECKPOINT_URI=shared,
        )
        jobs.append(second)
        second.start("ps", 0)
        second.start("worker", 0)
        assert second.wait("worker", 0, STARTUP + 60) == 0
    restored = logged(second, "parameter server restored from checkpoint")
    assert [(e["step"], e["epoch"]) for e in restored] == [(earlier.step, 3)], "it went on from the earlier job"
    assert logged(second, "the checkpoint location holds an earlier job's checkpoints: resuming from them")
    assert not [e for e in second.logs() if "stale" in e.get("msg", "")], "no stale-epoch loop"
    final = latest(shared)
    assert (final.step >= 240, final.epoch) == (True, 0)
    index = json.loads((Path(shared) / "ttj-checkpoint.json").read_text())
    assert index["scope"].endswith(second_lease.lease["metadata"]["uid"])


# -- fencing: a chief that cannot renew steps down ------------------------------------------------------
def test_a_chief_cut_off_for_longer_than_its_lease_stops_checkpointing_until_it_renews(
    tmp_path: Path, jobs: list[TrainerJob]
) -> None:
    with LeaseDouble("default", lease_name("job"), holder="job-worker-0", duration=6) as lease:
        job = TrainerJob(
            tmp_path,
            lease.write_kubeconfig(tmp_path / "kubeconfig"),
            slots=1,
            TTJ_CHECKPOINT_INTERVAL_STEPS="20",
        )
        jobs.append(job)
        door, chiefs = lease.door(tmp_path / "kubeconfig-chief")
        job.start("ps", 0)
        job.start("worker", 0, KUBECONFIG=str(chiefs))
        wait_for(lambda: (c := latest(job.checkpoint_uri)) and c.step >= 40, STARTUP, "checkpoints")
        lease.cut(door)
        wait_for(
            lambda: logged(
                job, "could not renew the Lease for longer than the lease: stepping down until it is renewed"
            ),
            60,
            "the chief to step down",
        )
        during = latest(job.checkpoint_uri).step
        lease.cut(door, cut=False)
        wait_for(lambda: latest(job.checkpoint_uri).step > during + 40, 60, "checkpoints once it renews again")
    elected = logged(job, "elected chief")
    assert len(elected) == 2, "chief again, in the same epoch, once renewed"
    assert {e["epoch"] for e in elected} == {0}


# -- liveness is not progress: storage errors are storage errors -----------------------------------------
def test_a_checkpoint_location_that_refuses_the_chief_is_reported_as_a_storage_error(
    tmp_path: Path, jobs: list[TrainerJob]
) -> None:
    (tmp_path / "not-a-directory").write_text("a file where the checkpoint location should be")
    with LeaseDouble("default", lease_name("job"), holder="job-worker-0") as lease:
        job = TrainerJob(
            tmp_path,
            lease.write_kubeconfig(tmp_path / "kubeconfig"),
            slots=1,
            TTJ_CHECKPOINT_URI=str(tmp_path / "not-a-directory" / "checkpoints"),
        )
        jobs.append(job)
        job.start("ps", 0)
        job.start("worker", 0)
        progress = wait_for(lambda: (p := lease.progress()) and p.last_error and p, STARTUP, "the chief's error")
        assert progress.last_error.startswith("checkpoint storage")
        assert "not-a-directory" in progress.last_error
        assert progress.global_step == 0
        warnings = [e for e in job.logs() if e.get("msg", "").startswith("checkpoint storage error")]
        assert warnings
        assert not logged(job, "lost the parameter server; reconnecting")
        assert job.processes["job-worker-0"].poll() is None, "it keeps trying; the operator judges the stall"


# -- corrupt or partial checkpoints ----------------------------------------------------------------------
def saved(uri: str, steps: list[int]) -> list[str]:
    from ttj_trainer import checkpoints

    checkpoints.claim(uri, 1, "chief")
    return [
        checkpoints.save(
            uri,
            step,
            1,
            {"w": np.full((2,), step, np.float32), "ttj/global_step": np.array(step, np.int64)},
            writer="c",
        )
        for step in steps
    ]


DTYPES = {"w": np.float32, "ttj/global_step": np.int64}


def test_a_checkpoint_that_cannot_be_restored_falls_back_to_the_previous_one(tmp_path: Path) -> None:
    from ttj_trainer import checkpoints

    uri = str(tmp_path / "ckpt")
    paths = saved(uri, [10, 20, 30])
    Path(paths[-1] + ".data-00000-of-00001").write_bytes(b"torn write")
    restored = checkpoints.restore_latest(uri, DTYPES)
    assert restored is not None
    assert restored.checkpoint == (20, 1, paths[1])
    assert [p for p, _ in restored.skipped] == [paths[-1]]
    assert int(restored.values["ttj/global_step"]) == 20


def test_no_restorable_checkpoint_at_all_is_a_clear_error(tmp_path: Path) -> None:
    from ttj_trainer import checkpoints

    uri = str(tmp_path / "ckpt")
    for path in saved(uri, [10, 20]):
        Path(path + ".index").write_bytes(b"")
    with pytest.raises(checkpoints.CorruptIndexError, match="none of the 2 checkpoints"):
        checkpoints.restore_latest(uri, DTYPES)


def test_claiming_clears_what_a_crashed_writer_left(tmp_path: Path) -> None:
    from ttj_trainer import checkpoints

    uri = tmp_path / "ckpt"
    paths = saved(str(uri), [10])
    leftovers = [
        uri / "ttj-checkpoint.json.tmp-chief-123",
        uri / "ckpt-15-e1.index",  # a checkpoint the index never took
        uri / "ckpt-15-e1.data-00000-of-00001",
    ]
    for path in leftovers:
        path.write_bytes(b"partial")
    removed = checkpoints.claim(str(uri), 2, "next-chief")
    assert sorted(removed) == sorted(str(p) for p in leftovers)
    assert Path(paths[0] + ".index").exists(), "committed checkpoints stay"
    assert checkpoints.latest(str(uri)).step == 10


def test_a_corrupt_index_is_named_with_what_to_do(tmp_path: Path) -> None:
    from ttj_trainer import checkpoints

    uri = tmp_path / "ckpt"
    saved(str(uri), [10])
    (uri / "ttj-checkpoint.json").write_text('{"step": 10, "epo')
    with pytest.raises(checkpoints.CorruptIndexError, match=r"ttj-checkpoint.json is corrupt.*spec.checkpoint.uri"):
        checkpoints.latest(str(uri))


def test_a_worker_facing_a_corrupt_index_exits_with_its_own_code_and_termination_message(
    tmp_path: Path, jobs: list[TrainerJob]
) -> None:
    uri = tmp_path / "checkpoints"
    saved(str(uri), [10])
    (uri / "ttj-checkpoint.json").write_text("not json")
    termination = tmp_path / "termination-log"
    with LeaseDouble("default", lease_name("job"), holder="job-worker-0") as lease:
        job = TrainerJob(tmp_path, lease.write_kubeconfig(tmp_path / "kubeconfig"), slots=1)
        jobs.append(job)
        job.start("ps", 0)
        job.start("worker", 0, TTJ_TERMINATION_LOG=str(termination))
        assert job.wait("worker", 0, STARTUP) == TrainerExit.CHECKPOINT_INDEX_CORRUPT
    assert "ttj-checkpoint.json is corrupt" in termination.read_text()


def test_a_missing_dataset_exits_with_its_own_code_and_names_the_spec_field(
    tmp_path: Path, jobs: list[TrainerJob]
) -> None:
    termination = tmp_path / "termination-log"
    with LeaseDouble("default", lease_name("job"), holder="job-worker-0") as lease:
        job = TrainerJob(
            tmp_path,
            lease.write_kubeconfig(tmp_path / "kubeconfig"),
            slots=1,
            TTJ_DATASET="cifar10",
            TTJ_DATA_URI=str(tmp_path / "no-such-data"),
        )
        jobs.append(job)
        job.start("worker", 0, TTJ_TERMINATION_LOG=str(termination))
        assert job.wait("worker", 0, STARTUP) == TrainerExit.DATA_UNAVAILABLE
    message = termination.read_text()
    assert f"spec.data.uri '{tmp_path / 'no-such-data'}'" in message
    assert "TTJ_" not in message
