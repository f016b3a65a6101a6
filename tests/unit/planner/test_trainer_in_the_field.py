"""The operator's side of the trainer in the field: success needs the model, a stall is seen and acted on,
a trainer's clock does not matter, and errors no retry can mend end the job with the trainer's message."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from tests.unit.planner.builders import T0, renew, terminate
from tests.unit.planner.test_scenarios import S, settle, started
from ttj.api.models import JobRef
from ttj.planner import CreateChild
from ttj.planner.world import World


def condition(world: World, type_: str) -> dict[str, Any]:
    found = [c for c in world.job["status"].get("conditions") or [] if c["type"] == type_]
    assert found, f"no {type_} condition in {world.job['status'].get('conditions')}"
    return dict(found[0])


def final(step: int, epoch: int, **more: Any) -> dict[str, Any]:
    return {"globalStep": step, "checkpointStep": step, "checkpointPath": f"/ckpt/ckpt-{step}-e{epoch}", "epoch": epoch}


def chief(world: World) -> str:
    return str(world.job["status"]["chief"]["pod"])


# -- success without the model ---------------------------------------------------------------------
def test_a_chief_that_exits_0_without_a_final_checkpoint_is_replaced_not_taken_for_success() -> None:
    world = started(trainSteps=1000)
    first = chief(world)
    # The chief trained to the end as a plain worker: it published steps, but its last checkpoint is short.
    renew(world, T0 + 5 * S, {"globalStep": 1000, "checkpointStep": 700, "epoch": 1})
    terminate(world, first, 0, reason="Completed", now=T0 + 6 * S)
    settle(world, T0 + 7 * S)
    status = world.job["status"]
    assert status["phase"] != "Succeeded"
    assert chief(world) != first
    assert status["chief"]["epoch"] == 2
    assert (status["preemptions"], status["failures"]) == (0, 0)
    # The new chief writes the final checkpoint in its epoch and exits 0: now the job has its model.
    renew(world, T0 + 10 * S, final(1000, 2))
    terminate(world, chief(world), 0, reason="Completed", now=T0 + 11 * S)
    world.reconcile(T0 + 12 * S)
    assert world.job["status"]["phase"] == "Succeeded"
    assert "final checkpoint at global step 1000 (epoch 2)" in condition(world, "Succeeded")["message"]


def test_a_final_checkpoint_reported_in_an_older_epoch_is_not_the_current_chiefs() -> None:
    world = started(trainSteps=1000)
    renew(world, T0 + 5 * S, final(1000, 0))
    terminate(world, chief(world), 0, reason="Completed", now=T0 + 6 * S)
    world.reconcile(T0 + 7 * S)
    assert world.job["status"]["phase"] != "Succeeded"


def test_when_every_worker_exited_without_the_final_checkpoint_new_workers_are_made_to_write_it() -> None:
    world = started(trainSteps=1000)
    renew(world, T0 + 5 * S, {"globalStep": 1000, "checkpointStep": 700, "epoch": 1})
    for name in ("mnist-worker-0-1", "mnist-worker-1-1", "mnist-worker-2-1"):
        terminate(world, name, 0, reason="Completed", now=T0 + 6 * S)
    result = world.reconcile(T0 + 7 * S)
    created = sorted(a.name for a in result.of_type(CreateChild) if a.kind == "Pod")
    assert created == ["mnist-worker-0-2", "mnist-worker-1-2", "mnist-worker-2-2"]
    assert world.job["status"]["phase"] != "Succeeded"


def test_a_report_without_an_epoch_counts_once_the_holder_renewed_since_its_election() -> None:
    world = started(trainSteps=1000)
    holder = chief(world)
    renew(world, T0 + 5 * S, {"globalStep": 1000, "checkpointStep": 1000})  # a trainer that names no epoch
    terminate(world, holder, 0, reason="Completed", now=T0 + 6 * S)
    world.reconcile(T0 + 7 * S)
    assert world.job["status"]["phase"] == "Succeeded"


# -- the old chief's SIGTERM checkpoint comes before the next chief -------------------------------------------
def stop_gracefully(world: World, name: str, at: datetime, grace: int = 30) -> None:
    """A graceful deletion (spot preemption, kubectl delete): deletionTimestamp set, the container still runs."""
    from ttj_contract import format_time

    pod = world.pod(name)
    assert pod is not None
    pod["metadata"]["deletionTimestamp"] = format_time(at + grace * S)
    pod["metadata"]["deletionGracePeriodSeconds"] = grace


def test_a_chief_stopping_gracefully_stays_chief_until_its_sigterm_checkpoint_is_done() -> None:
    world = started(trainSteps=100000)
    first = chief(world)
    renew(world, T0 + 5 * S, {"globalStep": 100, "epoch": 1})
    stop_gracefully(world, first, T0 + 10 * S)
    plan = world.reconcile(T0 + 11 * S)
    assert chief(world) == first, "no new chief while the old one writes its SIGTERM checkpoint"
    assert world.job["status"]["chief"]["epoch"] == 1
    assert plan.requeue_after is not None
    assert plan.requeue_after <= 29
    # It wrote the checkpoint (as chief of epoch 1) and exited 143: now the next chief is named.
    renew(world, T0 + 12 * S, {"globalStep": 130, "checkpointStep": 130, "epoch": 1})
    terminate(world, first, 143, now=T0 + 12 * S)
    world.reconcile(T0 + 13 * S)
    assert chief(world) != first
    assert world.job["status"]["chief"]["epoch"] == 2


def test_a_chief_that_hangs_while_stopping_is_replaced_when_its_grace_period_ends() -> None:
    from tests.unit.planner.builders import job, node
    from ttj.api.models import ChiefStatus
    from ttj.planner.classify import PodState, PodVerdict
    from ttj.planner.config import PlannerConfig
    from ttj.planner.stages.chief import ChiefInputs, keep_chief
    from ttj_contract import format_micro_time, format_time

    def pod(slot: int, **metadata: Any) -> dict[str, Any]:
        return {
            "metadata": {
                "name": f"mnist-worker-{slot}-1",
                "labels": {"transient.training/slot": str(slot)},
                **metadata,
            },
            "spec": {"nodeName": f"gpu-{slot}"},
            "status": {"phase": "Running", "startTime": format_time(T0)},
        }

    holder, other = pod(0, deletionTimestamp=format_time(T0 + 30 * S)), pod(1)
    verdicts = {
        "mnist-worker-0-1": PodVerdict(PodState.PREEMPTED, since=T0, message="pod deleted"),
        "mnist-worker-1-1": PodVerdict(PodState.RUNNING),
    }
    stamp = format_micro_time(T0 + 20 * S)
    lease = {
        "metadata": {"name": "mnist-chief", "resourceVersion": "7", "annotations": {}},
        "spec": {
            "holderIdentity": "mnist-worker-0-1",
            "leaseTransitions": 1,
            "leaseDurationSeconds": 30,
            "acquireTime": format_micro_time(T0 - 600 * S),
            "renewTime": stamp,
        },
    }
    recorded = ChiefStatus(
        pod="mnist-worker-0-1", epoch=1, renew_time=stamp, renew_observed_at=format_time(T0 + 20 * S)
    )
    nodes = {f"gpu-{i}": node(f"gpu-{i}") for i in range(2)}

    def at(seconds: int) -> Any:
        return keep_chief(
            ChiefInputs(
                JobRef.of(job()),
                (holder, other),
                verdicts,
                nodes,
                lease=lease,
                holder="mnist-worker-0-1",
                recorded=recorded,
                ps_replaced=False,
                active=1,
                desired=2,
                now=T0 + seconds * S,
                config=PlannerConfig(),
            )
        )

    waiting = at(25)
    assert (waiting.elections, waiting.chief.pod, waiting.wake) == (0, "mnist-worker-0-1", T0 + 30 * S)
    replaced = at(30)
    assert (replaced.elections, replaced.chief.pod) == (1, "mnist-worker-1-1")


# -- liveness is not progress ------------------------------------------------------------------------
def keep_renewing(world: World, start: datetime, seconds: int, progress: dict[str, Any], skew: timedelta) -> None:
    """The chief renews every 10 s with its clock ``skew`` off the operator's, the operator passes after each."""
    for t in range(0, seconds + 1, 10):
        now = start + t * S
        renew(world, now + skew, progress)
        world.reconcile(now + S)


def test_a_chief_renewing_without_advancing_is_marked_stalled_and_replaced_without_a_preemption() -> None:
    world = started(trainSteps=1000, progress={"stallTimeoutSeconds": 120})
    first = chief(world)
    stuck = {"globalStep": 0, "epoch": 1, "lastError": "checkpoint storage: PermissionDenied on /ckpt/ttj-epoch"}
    keep_renewing(world, T0 + 5 * S, 100, stuck, timedelta(0))
    assert condition(world, "Stalled")["status"] == "False"
    assert chief(world) == first
    keep_renewing(world, T0 + 115 * S, 20, stuck, timedelta(0))
    stalled = condition(world, "Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "ProgressStalled")
    assert "PermissionDenied on /ckpt/ttj-epoch" in stalled["message"]
    warnings = [e for e in world.events if e.reason == "ProgressStalled"]
    assert warnings
    assert warnings[0].type == "Warning"
    assert "PermissionDenied" in warnings[0].message
    assert chief(world) != first, "a stalled chief is replaced"
    status = world.job["status"]
    assert (status["preemptions"], status["failures"]) == (0, 0), "a stall is neither a preemption nor a failure"
    # The new chief gets the whole timeout; once the step moves the condition clears.
    keep_renewing(world, T0 + 140 * S, 30, {"globalStep": 40, "epoch": status["chief"]["epoch"]}, timedelta(0))
    assert condition(world, "Stalled")["status"] == "False"


def test_stall_detection_can_be_turned_off() -> None:
    world = started(trainSteps=1000, progress={"stallTimeoutSeconds": 0})
    first = chief(world)
    keep_renewing(world, T0 + 5 * S, 1200, {"globalStep": 0, "epoch": 1}, timedelta(0))
    assert chief(world) == first


# -- clock skew -------------------------------------------------------------------------------------
def test_a_trainer_clock_40s_behind_does_not_cost_its_chief_the_lease() -> None:
    world = started(trainSteps=100000)
    first = chief(world)
    elections = world.job["status"]["chiefElections"]
    for t in range(5, 125, 10):  # two minutes of renewals every 10 s, stamped 40 s in the past
        renew(world, T0 + (t - 40) * S, {"globalStep": 10 * t, "epoch": 1})
        world.reconcile(T0 + (t + 1) * S)
    assert chief(world) == first
    assert world.job["status"]["chiefElections"] == elections


def test_a_chief_whose_renewals_stop_is_still_replaced_a_lease_after_the_operator_last_saw_one() -> None:
    world = started(trainSteps=100000)
    first = chief(world)
    renew(world, T0 + 5 * S - 40 * S, {"globalStep": 10, "epoch": 1})  # skewed clock, seen at +6 s
    world.reconcile(T0 + 6 * S)
    world.reconcile(T0 + 35 * S)
    assert chief(world) == first
    world.reconcile(T0 + 37 * S)
    assert chief(world) != first


# -- errors no retry can mend ---------------------------------------------------------------------------
def test_a_missing_dataset_fails_the_job_at_once_with_the_trainers_message() -> None:
    world = started(trainSteps=1000, backoffLimit=3)
    message = "dataset error: spec.data.uri '/data/none' holds no CIFAR-10 files"
    terminate(world, "mnist-worker-0-1", 3, message=message, now=T0 + 5 * S)
    world.reconcile(T0 + 6 * S)
    status = world.job["status"]
    assert status["phase"] == "Failed"
    failed = condition(world, "Failed")
    assert failed["reason"] == "DataUnavailable"
    assert message in failed["message"]


def test_a_corrupt_checkpoint_index_fails_the_job_with_a_clear_reason() -> None:
    world = started(trainSteps=1000, backoffLimit=3)
    terminate(world, "mnist-worker-1-1", 5, message="checkpoint index /ckpt/ttj-checkpoint.json is corrupt")
    world.reconcile(T0 + 6 * S)
    assert world.job["status"]["phase"] == "Failed"
    assert condition(world, "Failed")["reason"] == "CheckpointIndexCorrupt"


def test_a_program_that_cannot_be_trained_fails_the_job_at_once_naming_its_entrypoint() -> None:
    world = started(trainSteps=1000, backoffLimit=3)
    message = (
        "program error: spec.program.entrypoint 'my_pkg.train:program': cannot import 'my_pkg': "
        "ModuleNotFoundError: No module named 'my_pkg'"
    )
    terminate(world, "mnist-worker-0-1", 7, message=message, now=T0 + 5 * S)
    world.reconcile(T0 + 6 * S)
    assert world.job["status"]["phase"] == "Failed"
    failed = condition(world, "Failed")
    assert failed["reason"] == "ProgramInvalid"
    assert message in failed["message"]


def test_a_loss_that_is_not_finite_fails_the_job_with_its_own_reason() -> None:
    world = started(trainSteps=1000, backoffLimit=3)
    terminate(world, "mnist-worker-1-1", 8, message="loss not finite: the loss is nan at global step 412")
    world.reconcile(T0 + 6 * S)
    assert world.job["status"]["phase"] == "Failed"
    assert condition(world, "Failed")["reason"] == "LossNotFinite"


# -- the data a worker gets ----------------------------------------------------------------------------
def worker_of(**spec: Any) -> dict[str, Any]:
    from tests.unit.planner.builders import job
    from ttj.api.models import TransientTrainingJobSpec
    from ttj.planner.children import worker_pod

    manifest = job(**spec)
    manifest["metadata"].setdefault("uid", "u")
    return worker_pod(JobRef.of(manifest), TransientTrainingJobSpec.model_validate(manifest["spec"]), 0, 1)


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


def test_cifar10_without_data_gets_a_cache_volume_to_download_into() -> None:
    pod = worker_of(dataset="cifar10")
    assert env_of(pod)["TTJ_DATA_CACHE"] == "/var/cache/ttj-data"
    assert "TTJ_DATA_URI" not in env_of(pod)
    assert {"name": "dataset-cache", "emptyDir": {}} in pod["spec"]["volumes"]
    assert {"name": "dataset-cache", "mountPath": "/var/cache/ttj-data"} in pod["spec"]["containers"][0]["volumeMounts"]


def test_data_on_a_claim_is_mounted_read_only_where_data_uri_says() -> None:
    pod = worker_of(dataset="cifar10", data={"uri": "/data/cifar10", "volumeClaimName": "cifar"})
    assert env_of(pod)["TTJ_DATA_URI"] == "/data/cifar10"
    assert "TTJ_DATA_CACHE" not in env_of(pod)
    claim = {"name": "dataset", "persistentVolumeClaim": {"claimName": "cifar", "readOnly": True}}
    assert claim in pod["spec"]["volumes"]
    mount = {"name": "dataset", "mountPath": "/data/cifar10", "readOnly": True}
    assert mount in pod["spec"]["containers"][0]["volumeMounts"]


def test_data_in_a_bucket_needs_no_volume_and_synthetic_needs_nothing() -> None:
    def data_volumes(pod: dict[str, Any]) -> list[str]:
        """Volumes beyond the scratch emptyDirs every pod has (a read-only root filesystem needs them)."""
        return [v["name"] for v in pod["spec"].get("volumes", []) if not v["name"].startswith("ttj-")]

    bucket = worker_of(dataset="cifar10", data={"uri": "gs://bucket/cifar10"})
    assert env_of(bucket)["TTJ_DATA_URI"] == "gs://bucket/cifar10"
    assert data_volumes(bucket) == []
    synthetic = worker_of(dataset="synthetic")
    assert not {"TTJ_DATA_URI", "TTJ_DATA_CACHE"} & set(env_of(synthetic))
    assert data_volumes(synthetic) == []


def test_a_program_reaches_the_trainer_in_place_of_model_and_dataset() -> None:
    from tests.unit.planner.builders import job
    from ttj.api.models import TransientTrainingJobSpec
    from ttj.planner.children import worker_pod

    manifest = job(program={"entrypoint": "my_pkg.train:program", "args": {"units": "64", "lr": "0.1"}})
    del manifest["spec"]["model"], manifest["spec"]["dataset"]
    env = env_of(worker_pod(JobRef.of(manifest), TransientTrainingJobSpec.model_validate(manifest["spec"]), 0, 1))
    assert env["TTJ_PROGRAM"] == "my_pkg.train:program"
    assert env["TTJ_PROGRAM_ARGS"] == '{"lr":"0.1","units":"64"}'
    assert not {"TTJ_MODEL", "TTJ_DATASET", "TTJ_DATA_CACHE"} & set(env)


def test_a_data_claim_needs_a_path() -> None:
    import pytest
    from pydantic import ValidationError

    from ttj.api.models import DataSpec

    with pytest.raises(ValidationError, match=r"data\.volumeClaimName needs data\.uri"):
        DataSpec(uri="gs://bucket/cifar10", volume_claim_name="cifar")
