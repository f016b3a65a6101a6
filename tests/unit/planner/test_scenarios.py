"""The planner over a job's life, with an in-memory API (ttj.planner.world) and no cluster."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from typing import Any

import pytest

from tests.unit.planner.builders import T0, job, node, pods, renew, run_pod, run_ps, start, terminate
from ttj.planner import (
    CreateChild,
    DeleteChild,
    LabelPod,
    Plan,
    PlannerConfig,
    RemoveFinalizer,
    UpdateLease,
    plan,
)
from ttj.planner.world import World
from ttj_contract import format_time

S = timedelta(seconds=1)


def settle(world: World, now: Any, limit: int = 10) -> Plan:
    """Reconcile until a pass changes nothing: the planner's own outputs fed back reach a fixed point."""
    for _ in range(limit):
        before = copy.deepcopy((world.job.get("status"), world.observed))
        result = world.reconcile(now)
        if not result.writes and before == (
            world.job.get("status"),
            world.observed,
        ):
            return result
    raise AssertionError(f"no fixed point after {limit} passes: {result.writes}")


def chief_labelled(world: World) -> list[str]:
    return [
        p["metadata"]["name"]
        for p in world.observed.pods
        if p["metadata"]["labels"].get("transient.training/chief") == "true"
    ]


def started(**spec: Any) -> World:
    world = World(job(**spec))
    start(world, [node(f"gpu-{i}", age=timedelta(hours=2 + 5 * i)) for i in range(3)])
    settle(world, T0)
    return world


def test_children_of_a_new_job() -> None:
    result = plan(job(), World(job()).observed, T0)
    created = {(a.kind, a.name): a.manifest for a in result.of_type(CreateChild)}
    assert set(created) == {
        ("Service", "mnist"),
        ("NetworkPolicy", "mnist"),
        ("ServiceAccount", "mnist-trainer"),
        ("Role", "mnist-trainer"),
        ("RoleBinding", "mnist-trainer"),
        ("Deployment", "mnist-ps-0"),
        ("Lease", "mnist-chief"),
        ("Pod", "mnist-worker-0-1"),
        ("Pod", "mnist-worker-1-1"),
        ("Pod", "mnist-worker-2-1"),
    }
    for manifest in created.values():
        assert manifest["metadata"]["labels"]["transient.training/job-name"] == "mnist"
        assert manifest["metadata"]["ownerReferences"][0]["uid"] == "job-uid"
    service = created[("Service", "mnist")]["spec"]
    assert service["clusterIP"] == "None"
    assert service["publishNotReadyAddresses"] is True
    role = created[("Role", "mnist-trainer")]["rules"]
    assert role == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["mnist-chief"],
            "verbs": ["get", "watch", "patch"],
        }
    ]
    worker = created[("Pod", "mnist-worker-1-1")]
    spec = worker["spec"]
    assert spec["hostname"] == "mnist-worker-1"
    assert spec["subdomain"] == "mnist"
    assert spec["serviceAccountName"] == "mnist-trainer"
    assert spec["restartPolicy"] == "Never"
    assert spec["nodeSelector"] == {
        "cloud.google.com/gke-spot": "true",
        "cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
    }
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    container = spec["containers"][0]
    assert container["command"] == ["python", "-m", "ttj_trainer"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    env = {e["name"]: e for e in container["env"]}
    tf_config = json.loads(env["TF_CONFIG"]["value"])
    assert tf_config["task"] == {"type": "worker", "index": 1}
    assert tf_config["cluster"]["worker"] == [f"mnist-worker-{i}.mnist.ns.svc:2222" for i in range(4)]
    assert tf_config["cluster"]["ps"] == ["mnist-ps-0.mnist.ns.svc:2222"]
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    for key, value in {
        "TTJ_JOB_NAME": "mnist",
        "TTJ_MODEL": "small-cnn",
        "TTJ_DATASET": "synthetic",
        "TTJ_TRAIN_STEPS": "1000",
        "TTJ_DESIRED_WORKERS": "3",
        "TTJ_CHECKPOINT_URI": "/ckpt",
        "TTJ_LEARNING_RATE_SCALING": "activeWorkers",
        "TTJ_CHECKPOINT_INTERVAL_STEPS": "500",
        "TTJ_CHECKPOINT_INTERVAL_SECONDS": "300",
        "TTJ_BATCH_SIZE": "128",
        "TTJ_LEARNING_RATE": "0.1",
    }.items():
        assert env[key]["value"] == value, key
    ps = created[("Deployment", "mnist-ps-0")]["spec"]
    assert ps["strategy"] == {"type": "Recreate"}
    assert ps["replicas"] == 1
    terms = ps["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    keys = {(e["key"], e["operator"]) for e in terms["nodeSelectorTerms"][0]["matchExpressions"]}
    assert keys == {("cloud.google.com/gke-spot", "NotIn"), ("cloud.google.com/gke-preemptible", "NotIn")}
    assert result.status["phase"] == "Pending"


@pytest.mark.parametrize(
    ("provisioning", "selector"),
    [("preemptible", {"cloud.google.com/gke-preemptible": "true"}), ("on-demand", {})],
)
def test_provisioning_places_workers(provisioning: str, selector: dict[str, str]) -> None:
    result = plan(job(workers={"provisioning": provisioning, "gpusPerWorker": 0}), World(job()).observed, T0)
    worker = next(a.manifest for a in result.of_type(CreateChild) if a.kind == "Pod")
    assert worker["spec"]["nodeSelector"] == selector
    assert ("affinity" in worker["spec"]) == (provisioning == "on-demand")


def test_checkpoint_volume_is_mounted() -> None:
    result = plan(job(checkpoint={"uri": "/ckpt", "volumeClaimName": "shared"}), World(job()).observed, T0)
    worker = next(a.manifest for a in result.of_type(CreateChild) if a.kind == "Pod")
    assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "shared"}} in worker["spec"]["volumes"]
    assert {"name": "checkpoints", "mountPath": "/ckpt"} in worker["spec"]["containers"][0]["volumeMounts"]


def test_first_chief_and_running() -> None:
    world = started()
    status = world.job["status"]
    assert status["phase"] == "Running"
    assert status["chief"]["epoch"] == 1
    assert status["chiefElections"] == 1
    # gpu-2 is the oldest spot node: least likely to be preempted next.
    assert status["chief"]["pod"] == "mnist-worker-2-1"
    assert chief_labelled(world) == ["mnist-worker-2-1"]
    lease = world.observed.lease
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == "mnist-worker-2-1"
    assert lease["spec"]["leaseTransitions"] == 1
    assert lease["metadata"]["annotations"]["transient.training/active-workers"] == "3"
    assert lease["metadata"]["annotations"]["transient.training/desired-workers"] == "3"
    assert status["workers"]["summary"] == "3/3"


@pytest.mark.parametrize(
    ("case", "end", "preemptions", "failures"),
    [
        ("spot reclaim", {"exit_code": 143, "pod_reason": "Terminated"}, 1, 0),
        ("node shutdown, trainer crashed on it", {"exit_code": 1, "pod_reason": "NodeShutdown"}, 1, 0),
        ("code failure", {"exit_code": 1, "message": "boom"}, 0, 1),
    ],
)
def test_lost_worker_is_counted_once_and_replaced_in_its_slot(
    case: str, end: dict[str, Any], preemptions: int, failures: int
) -> None:
    world = started()
    terminate(world, "mnist-worker-0-1", **end)
    first = world.reconcile(T0 + S)
    created = [a for a in first.of_type(CreateChild) if a.kind == "Pod"]
    assert [a.name for a in created] == ["mnist-worker-0-2"], case
    assert created[0].recovery_since is not None
    assert not first.of_type(DeleteChild), "a lost pod is deleted only after its count was written"
    status = world.job["status"]
    assert (status["preemptions"], status["failures"], status["replacements"]) == (preemptions, failures, 1)
    assert status["accountedPods"] == ["mnist-worker-0-1"]
    second = world.reconcile(T0 + 2 * S)
    assert [a.name for a in second.of_type(DeleteChild)] == ["mnist-worker-0-1"]
    assert [a.pod for a in second.of_type(RemoveFinalizer)] == ["mnist-worker-0-1"]
    settle(world, T0 + 3 * S)
    status = world.job["status"]
    assert (status["preemptions"], status["failures"], status["replacements"]) == (preemptions, failures, 1)
    assert "accountedPods" not in status
    assert world.pod("mnist-worker-0-1") is None
    assert status["phase"] == "Recovering"  # the replacement is still pending
    run_pod(world, "mnist-worker-0-2", "gpu-0", T0 + 4 * S)
    assert settle(world, T0 + 5 * S).status["phase"] == "Running"


def test_failures_past_backoff_limit_fail_the_job_with_the_pods_message() -> None:
    world = started(backoffLimit=1)
    terminate(world, "mnist-worker-0-1", 1, message="ValueError: shapes differ")
    settle(world, T0 + S)
    terminate(world, "mnist-worker-1-1", 1, message="ValueError: shapes differ")
    world.reconcile(T0 + 2 * S)
    status = world.job["status"]
    assert status["phase"] == "Failed"
    assert status["failures"] == 2
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert "ValueError: shapes differ" in failed["message"]
    assert "mnist-worker-1-1" in failed["message"]
    settle(world, T0 + 3 * S)
    assert not pods(world), "cleanPodPolicy Running deletes the running workers"
    assert ("Deployment", "mnist-ps-0") not in world.observed.children


def test_many_preemptions_never_fail_the_job() -> None:
    world = started(backoffLimit=0)
    now = T0
    for round_ in range(5):
        now += 10 * S
        victim = pods(world)[0]["metadata"]["name"]
        terminate(world, victim, 143, pod_reason="Terminated", now=now)
        settle(world, now)
        for p in pods(world):
            if p["status"]["phase"] == "Pending":
                run_pod(world, p["metadata"]["name"], "gpu-0", now)
        settle(world, now)
        assert world.job["status"]["preemptions"] == round_ + 1
    assert world.job["status"]["phase"] == "Running"
    assert world.job["status"]["failures"] == 0


def test_two_workers_at_once_and_node_notready() -> None:
    world = started()
    world.observed.nodes["gpu-0"] = node("gpu-0", ready=False, ready_since=T0)
    del world.observed.nodes["gpu-1"]
    within = world.reconcile(T0 + 5 * S)
    assert not within.of_type(CreateChild), "NotReady/missing for less than the grace is not a loss yet"
    assert within.requeue_after is not None
    assert within.requeue_after <= 30
    result = world.reconcile(T0 + 40 * S)
    assert sorted(a.name for a in result.of_type(CreateChild)) == ["mnist-worker-0-2", "mnist-worker-1-2"]
    second = world.reconcile(T0 + 41 * S)
    forced = [a for a in second.of_type(DeleteChild) if a.kind == "Pod"]
    assert sorted((a.name, a.force) for a in forced) == [("mnist-worker-0-1", True), ("mnist-worker-1-1", True)]
    settle(world, T0 + 42 * S)
    assert world.job["status"]["preemptions"] == 2
    assert world.job["status"]["failures"] == 0


def test_chief_preempted_elects_a_new_chief_and_measures_the_handover() -> None:
    world = started()
    renew(world, T0 + 5 * S)
    terminate(world, "mnist-worker-2-1", 143, pod_reason="Terminated", now=T0 + 10 * S)
    result = world.reconcile(T0 + 11 * S)
    status = world.job["status"]
    assert status["chief"]["pod"] == "mnist-worker-1-1"
    assert status["chief"]["epoch"] == 2
    assert status["chief"]["lostAt"] == format_time(T0 + 10 * S)
    assert status["chiefElections"] == 2
    update = result.of_type(UpdateLease)[0]
    assert update.resource_version is not None
    assert update.holder == "mnist-worker-1-1"
    assert update.epoch == 2
    assert chief_labelled(world) == ["mnist-worker-1-1"]
    assert any(e.reason == "ChiefElected" for e in world.events)
    settle(world, T0 + 12 * S)
    renew(world, T0 + 20 * S)
    done = world.reconcile(T0 + 21 * S)
    # Measured on the operator's clock: it saw the new chief's renewal at +21 s.
    assert [(o.metric, o.seconds) for o in done.observations] == [("chief_handover_seconds", 11.0)]
    assert "lostAt" not in world.job["status"]["chief"]


def test_chief_that_stops_renewing_is_replaced() -> None:
    world = started()
    renew(world, T0 + 5 * S)
    assert world.reconcile(T0 + 6 * S).status["chief"]["epoch"] == 1  # the operator sees the renewal at +6 s
    assert world.reconcile(T0 + 35 * S).status["chief"]["epoch"] == 1
    result = world.reconcile(T0 + 36 * S)  # seen renewed at +6 s, lease 30 s
    assert result.status["chief"]["pod"] != "mnist-worker-2-1"
    assert result.status["chief"]["epoch"] == 2
    assert len(chief_labelled(world)) == 1


def test_a_new_chief_gets_time_to_start() -> None:
    world = started()
    assert world.reconcile(T0 + 170 * S).status["chief"]["epoch"] == 1
    assert world.reconcile(T0 + 181 * S).status["chief"]["epoch"] == 2


def test_on_demand_worker_wins_the_election() -> None:
    world = World(job())
    start(
        world,
        [
            node("gpu-0", age=timedelta(hours=12)),
            node("od-1", "on-demand", timedelta(minutes=5)),
            node("gpu-2", age=timedelta(hours=20)),
        ],
    )
    assert world.job["status"]["chief"]["pod"] == "mnist-worker-1-1"


def test_lease_conflict_drops_the_pass_and_the_next_one_converges() -> None:
    world = started()
    terminate(world, "mnist-worker-2-1", 143, pod_reason="Terminated")
    stale = plan(world.job, world.observed, T0 + S)
    renew(world, T0 + S)  # the trainer patched the lease in between
    update = stale.of_type(UpdateLease)[0]
    with pytest.raises(Exception, match="lease changed"):
        world.apply(update, T0 + S)
    settle(world, T0 + 2 * S)
    assert world.job["status"]["chief"]["epoch"] == 2
    assert world.job["status"]["chiefElections"] == 2


@pytest.mark.parametrize(("replicas", "active"), [(4, 4), (2, 2)])
def test_scale(replicas: int, active: int) -> None:
    world = started()
    world.job["spec"]["workers"]["replicas"] = replicas
    settle(world, T0 + S)
    for p in pods(world):
        if p["status"]["phase"] == "Pending":
            run_pod(world, p["metadata"]["name"], "gpu-0", T0 + S)
    status = settle(world, T0 + 2 * S).status
    assert status["workers"]["active"] == active
    assert status["workers"]["desired"] == replicas
    assert status["phase"] == "Running"
    assert world.observed.lease is not None
    annotations = world.observed.lease["metadata"]["annotations"]
    assert annotations["transient.training/active-workers"] == str(active)
    # Pods keep the TTJ_DESIRED_WORKERS they were made with; the Lease says what is desired now.
    assert annotations["transient.training/desired-workers"] == str(replicas)
    assert status["chief"]["pod"] == "mnist-worker-2-1", "scaling down never removes the chief"
    assert status["preemptions"] == 0
    assert status["failures"] == 0
    slots = sorted(int(p["metadata"]["labels"]["transient.training/slot"]) for p in pods(world))
    assert len(slots) == active
    assert slots == sorted(set(slots))


def test_below_min_replicas_stops_training_but_not_the_job() -> None:
    world = started()
    for name in ("mnist-worker-0-1", "mnist-worker-1-1"):
        terminate(world, name, 143, pod_reason="Terminated")
    status = settle(world, T0 + S).status
    running = next(c for c in status["conditions"] if c["type"] == "Running")
    assert status["phase"] == "Recovering"
    assert running["status"] == "False"
    assert running["reason"] == "BelowMinReplicas"


def test_unschedulable_workers_are_reported_not_fatal() -> None:
    world = started()
    terminate(world, "mnist-worker-0-1", 143, pod_reason="Terminated")
    settle(world, T0 + S)
    pending = world.pod("mnist-worker-0-2")
    assert pending is not None
    pending["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available"}
    ]
    status = settle(world, T0 + 2 * S).status
    recovering = next(c for c in status["conditions"] if c["type"] == "Recovering")
    assert recovering["reason"] == "WorkersUnschedulable"
    assert "0/3 nodes" in recovering["message"]
    assert any(e.reason == "WorkersUnschedulable" for e in world.events)
    assert status["phase"] == "Recovering"


def test_parameter_server_replaced_bumps_the_epoch() -> None:
    world = started()
    world.observed.pods = [p for p in world.observed.pods if p["metadata"]["name"] != "mnist-ps-0-abc"]
    status = settle(world, T0 + S).status
    assert status["phase"] == "Recovering"
    assert status["chief"]["epoch"] == 1
    run_ps(world, "mnist-ps-0-xyz", now=T0 + 2 * S)
    status = world.reconcile(T0 + 3 * S).status
    assert status["chief"]["epoch"] == 2
    assert status["chief"]["pod"] == "mnist-worker-2-1"
    assert status["preemptions"] == 1
    assert status["parameterServerPods"] == ["mnist-ps-0-xyz"]
    assert world.observed.lease is not None
    assert world.observed.lease["spec"]["leaseTransitions"] == 2
    assert any(e.reason == "ParameterServerReplaced" for e in world.events)
    assert settle(world, T0 + 4 * S).status["phase"] == "Running"


def test_success_then_clean_pod_policy_and_ttl() -> None:
    world = started(ttlSecondsAfterFinished=60, cleanPodPolicy="All")
    renew(
        world,
        T0 + 5 * S,
        {
            "globalStep": 1000,
            "checkpointStep": 1000,
            "checkpointPath": "/ckpt/model-1000",
            "checkpointTime": format_time(T0 + 5 * S),
            "epoch": 1,
        },
    )
    for name in ("mnist-worker-0-1", "mnist-worker-1-1", "mnist-worker-2-1"):
        terminate(world, name, 0, reason="Completed")
    world.reconcile(T0 + 6 * S)
    status = world.job["status"]
    assert status["phase"] == "Succeeded"
    assert status["completionTime"] == format_time(T0 + 6 * S)
    assert status["progress"] == {
        "globalStep": 1000,
        "checkpointStep": 1000,
        "checkpointPath": "/ckpt/model-1000",
        "checkpointTime": format_time(T0 + 5 * S),
        "epoch": 1,
        "lastProgressTime": format_time(T0 + 6 * S),
    }
    assert status["failures"] == 0
    settle(world, T0 + 7 * S)
    assert not pods(world), "cleanPodPolicy All deletes the workers"
    assert not [k for k in world.observed.children if k[0] == "Deployment"]
    assert not world.reconcile(T0 + 30 * S).delete_job
    assert world.reconcile(T0 + 67 * S).delete_job


def test_active_deadline_fails_the_job() -> None:
    world = started(activeDeadlineSeconds=600)
    assert world.reconcile(T0 + 599 * S).status["phase"] == "Running"
    status = world.reconcile(T0 + 600 * S).status
    assert status["phase"] == "Failed"
    assert next(c for c in status["conditions"] if c["type"] == "Failed")["reason"] == "DeadlineExceeded"


@pytest.mark.parametrize(
    ("case", "the_job", "words"),
    [
        ("name too long for hostnames", job(name="a" * 60), "too long"),
        ("name not DNS-1035", job(name="9lives"), "DNS-1035"),
        ("minReplicas over replicas", job(workers={"minReplicas": 5}), "minReplicas"),
        ("unknown field", job(colour="blue"), "colour"),
    ],
)
def test_invalid_spec_creates_nothing(case: str, the_job: dict[str, Any], words: str) -> None:
    result = plan(the_job, World(the_job).observed, T0)
    assert not result.of_type(CreateChild), case
    assert result.status["phase"] == "Failed"
    invalid = next(c for c in result.status["conditions"] if c["type"] == "Invalid")
    assert invalid["status"] == "True"
    assert words in invalid["message"]


def test_operator_restart_mid_recovery_converges_to_the_same_state() -> None:
    """Crash after any prefix of a recovery plan's actions (status unwritten): the end state is the same."""
    reference = started()
    terminate(reference, "mnist-worker-2-1", 143, pod_reason="Terminated")
    full = plan(reference.job, reference.observed, T0 + S)
    settle(reference, T0 + S)
    expected = reference.job["status"]
    for cut in range(len(full.writes) + 1):
        world = started()
        terminate(world, "mnist-worker-2-1", 143, pod_reason="Terminated")
        for action in plan(world.job, world.observed, T0 + S).writes[:cut]:
            world.apply(action, T0 + S)
        settle(world, T0 + S)
        status = world.job["status"]
        for key in ("preemptions", "replacements", "failures", "chiefElections", "chief", "phase"):
            assert status.get(key) == expected.get(key), (cut, key)
        assert len(chief_labelled(world)) == 1, cut
        assert {p["metadata"]["name"] for p in world.observed.pods} == {
            p["metadata"]["name"] for p in reference.observed.pods
        }, cut


def test_fixed_point_from_scratch() -> None:
    """A planner that sees only its own outputs stops acting: every status field is stable."""
    world = started()
    once = copy.deepcopy(world.job["status"])
    result = world.reconcile(T0 + S)
    assert not [a for a in result.writes if not isinstance(a, LabelPod)]
    assert not result.of_type(LabelPod)
    assert world.job["status"] == once
    assert PlannerConfig().lease_duration_seconds == world.observed.lease["spec"]["leaseDurationSeconds"]  # type: ignore[index]


def test_cost_accrues_and_the_budget_stops_the_job() -> None:
    from ttj.cost.prices import load_price_table

    config = PlannerConfig(prices=load_price_table())
    world = World(job(budget={"maxCostUSD": 5}))
    start(world, [node(f"gpu-{i}", age=timedelta(hours=2 + 5 * i)) for i in range(3)])
    hour = timedelta(hours=1)
    running = world.reconcile(T0 + hour, config).status
    assert running["phase"] == "Running"
    assert 0 < running["cost"]["usd"] < running["cost"]["onDemandEquivalentUSD"]
    now = T0 + 30 * hour
    stopping = world.reconcile(now, config)
    assert {a.name for a in stopping.of_type(DeleteChild) if a.kind == "Pod"} == {
        "mnist-worker-0-1",
        "mnist-worker-1-1",
        "mnist-worker-2-1",
    }
    budget = next(c for c in stopping.status["conditions"] if c["type"] == "BudgetExceeded")
    assert budget["status"] == "True"
    assert not stopping.of_type(CreateChild)
    for name in ("mnist-worker-0-1", "mnist-worker-1-1", "mnist-worker-2-1"):
        world.observed.pods.remove(world.pod(name))  # type: ignore[arg-type]
    final = world.reconcile(now + hour, config).status
    assert final["phase"] == "Failed"
    assert next(c for c in final["conditions"] if c["type"] == "Failed")["reason"] == "BudgetExceeded"


def test_a_lease_not_yet_seen_is_recreated_as_the_status_says_without_a_new_election() -> None:
    """The watch has not delivered the Lease we just made (or someone deleted it): no second election."""
    world = started()
    status = copy.deepcopy(world.job["status"])
    assert status["chief"]["epoch"] == 1
    world.observed.lease = None
    result = world.reconcile(T0 + S)
    leases = [a.manifest for a in result.of_type(CreateChild) if a.kind == "Lease"]
    assert len(leases) == 1
    assert leases[0]["spec"]["holderIdentity"] == status["chief"]["pod"]
    assert leases[0]["spec"]["leaseTransitions"] == 1
    assert world.job["status"]["chief"]["epoch"] == 1
    assert world.job["status"]["chiefElections"] == status["chiefElections"]
    assert chief_labelled(world) == [status["chief"]["pod"]]


def test_start_up_is_starting_not_losing_and_one_election_is_one_event() -> None:
    """Two of three workers run before the parameter server does: nothing was lost, so nothing says so."""
    world = World(job())
    gpus = [node(f"gpu-{i}", age=timedelta(hours=2)) for i in range(2)]
    for n in [*gpus, node("cpu-0", "on-demand", now=T0)]:
        world.observed.nodes[n["metadata"]["name"]] = n
    world.reconcile(T0)
    for pod, n in zip(pods(world), gpus, strict=False):
        run_pod(world, pod["metadata"]["name"], n["metadata"]["name"], T0)
    settle(world, T0 + S)
    settle(world, T0 + 2 * S)
    status = world.job["status"]
    assert status["chiefElections"] == 1
    assert status["phase"] == "Pending"
    recovering = {c["type"]: c for c in status["conditions"]}["Recovering"]
    assert (recovering["status"], recovering["reason"]) == ("False", "Starting")
    reasons = [e.reason for e in world.events]
    assert not [r for r in reasons if "Lost" in r], reasons
    assert reasons.count("ChiefElected") + reasons.count("Elected") == 1, reasons
    assert "Starting" in reasons
