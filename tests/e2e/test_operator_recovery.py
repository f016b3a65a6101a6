"""The operator end to end: ``ttj operator`` as a process (real kopf, real HTTP) on the local cluster with
its real node add-ons — the node fleet (kubelets, simulated pods, GKE-like preemption), the scheduler
and the Deployment controller. Faults come through the fleet's control endpoint: a worker's or the
chief's node preempted, two at once, a node whose kubelet goes silent (NotReady), the PS pod deleted,
and the operator killed half-way through a recovery. Only the chief's Lease renewal is a stand-in
(:class:`ChiefHeartbeat`), as simulated pods run no trainer.

Against another cluster (``KUBECONFIG``): the tests that need node preemption or node loss skip unless
it is a ``ttj local-cluster`` (whose control endpoint they use); the others run as they are.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config
from tests.conformance.identities import client_with_token, status_of
from tests.e2e.operator_identity import install_operator_identity
from tests.e2e.operator_support import ChiefHeartbeat, OperatorProcess, cluster_with_nodes, install_crd, wait_for

from ttj_contract import lease_name

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

PREFIX = "op-e2e"
_names = itertools.count()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One cluster, one operator (watching ``op-e2e-*``, as the ServiceAccount and RBAC of manifests/base) and
    one chief heartbeat for the module."""
    logs = tmp_path_factory.mktemp("operator")
    with cluster_with_nodes() as (kubeconfig, control, access):
        api = config.new_client_from_config(config_file=kubeconfig)
        install_crd(api)
        operator_kubeconfig, operator_user = install_operator_identity(api, kubeconfig, logs)
        operator = OperatorProcess(operator_kubeconfig, f"{PREFIX}-*", logs)
        operator.start()
        try:
            with ChiefHeartbeat(api):
                yield {
                    "api": api,
                    "kubeconfig": kubeconfig,
                    "control": control,
                    "operator": operator,
                    "logs": logs,
                    "access": access,
                    "operator_user": operator_user,
                }
        finally:
            operator.kill()
            for log in sorted(logs.glob("operator-*.log")):
                print(log.name, log.read_text()[-3000:])
            api.close()


@pytest.fixture
def env(stack: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A fresh namespace per test (deleted after it, with its jobs and pods), enforcing the restricted Pod
    Security profile: every pod ttj makes must pass it."""
    namespace = f"{PREFIX}-{next(_names)}"
    core = client.CoreV1Api(stack["api"])
    restricted = {"pod-security.kubernetes.io/enforce": "restricted"}
    core.create_namespace({"metadata": {"name": namespace, "labels": restricted}})
    if stack["operator"].process is None:
        stack["operator"].start()
    try:
        yield {**stack, "ns": namespace, "core": core}
    finally:
        custom = client.CustomObjectsApi(stack["api"])
        for job in custom.list_namespaced_custom_object(
            "transient.training", "v1alpha1", namespace, "transienttrainingjobs"
        )["items"]:
            custom.delete_namespaced_custom_object(
                "transient.training", "v1alpha1", namespace, "transienttrainingjobs", job["metadata"]["name"]
            )
        # The garbage collector deletes a deleted job's pods and the operator lets their finalizers go:
        # no pod of this test may hold a node for the next one.
        try:
            wait_for(f"the pods of {namespace} gone", lambda: not core.list_namespaced_pod(namespace).items, timeout=30)
        except AssertionError as exc:
            left = [
                (p.metadata.name, p.status.phase, p.metadata.finalizers, bool(p.metadata.deletion_timestamp))
                for p in core.list_namespaced_pod(namespace).items
            ]
            jobs = client.CustomObjectsApi(stack["api"]).list_namespaced_custom_object(
                "transient.training", "v1alpha1", namespace, "transienttrainingjobs"
            )["items"]
            raise AssertionError(f"{exc}: {left}; jobs: {[j['metadata'] for j in jobs]}") from None
        core.delete_namespace(namespace)


def needs_control(env: dict[str, Any]) -> Any:
    if env["control"] is None:
        pytest.skip(
            "needs node preemption or node loss: only a ttj local cluster offers it (kube-system/ttj-local-control)"
        )
    return env["control"]


def create_job(env: dict[str, Any], name: str = "train", replicas: int = 3, **spec: Any) -> dict[str, Any]:
    workers = {"replicas": replicas, "minReplicas": 1, **spec.pop("workers", {})}
    body = {
        "apiVersion": "transient.training/v1alpha1",
        "kind": "TransientTrainingJob",
        "metadata": {"name": name, "namespace": env["ns"]},
        "spec": {
            "trainSteps": 100,
            "model": "small-cnn",
            "dataset": "synthetic",
            "checkpoint": {"uri": "/tmp/ck"},
            "workers": workers,
            "backoffLimit": 1,
            **spec,
        },
    }
    created: dict[str, Any] = client.CustomObjectsApi(env["api"]).create_namespaced_custom_object(
        "transient.training", "v1alpha1", env["ns"], "transienttrainingjobs", body
    )
    return created


def job_status(env: dict[str, Any], name: str = "train") -> dict[str, Any]:
    job = client.CustomObjectsApi(env["api"]).get_namespaced_custom_object(
        "transient.training", "v1alpha1", env["ns"], "transienttrainingjobs", name
    )
    return dict(job.get("status") or {})


def workers(env: dict[str, Any], name: str = "train") -> list[Any]:
    selector = f"transient.training/job-name={name},transient.training/role=worker"
    pods = env["core"].list_namespaced_pod(env["ns"], label_selector=selector).items
    return [p for p in pods if not p.metadata.deletion_timestamp and p.status.phase in ("Pending", "Running")]


def chiefs(env: dict[str, Any]) -> list[str]:
    pods = env["core"].list_namespaced_pod(env["ns"], label_selector="transient.training/chief=true").items
    return [p.metadata.name for p in pods]


def running(env: dict[str, Any], replicas: int = 3, epoch: int | None = None) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        status = job_status(env)
        ok = status.get("phase") == "Running" and (status.get("workers") or {}).get("active") == replicas
        if epoch is not None:
            ok = ok and (status.get("chief") or {}).get("epoch") == epoch
        return status if ok and len(chiefs(env)) == 1 else None

    try:
        return dict(wait_for(f"job Running with {replicas} workers (epoch {epoch})", check, timeout=60))
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{diagnosis(env)}") from None


def diagnosis(env: dict[str, Any], name: str = "train") -> str:
    """What a failed wait needs to be understood from a CI log alone: the job's status, its events, the
    pods, the chief Lease and the tail of the operator's log."""
    lines = []
    try:
        status = job_status(env, name)
        brief = {k: status.get(k) for k in ("phase", "chief", "workers", "preemptions", "chiefElections")}
        lines.append(f"status: {brief}")
        lines += [
            f"  condition {c['type']}={c['status']} {c['reason']}: {c.get('message')}"
            for c in status.get("conditions") or []
        ]
        lines.append("events:")
        events = sorted(job_events(env, name), key=lambda e: str(e.last_timestamp or e.event_time or ""))
        lines += [f"  {e.last_timestamp} {e.type} {e.reason}: {e.message}" for e in events]
        lines.append("pods:")
        for p in env["core"].list_namespaced_pod(env["ns"]).items:
            scheduled = next((c for c in p.status.conditions or [] if c.type == "PodScheduled"), None)
            lines.append(
                f"  {p.metadata.name} {p.status.phase} node={p.spec.node_name}"
                f" deleting={bool(p.metadata.deletion_timestamp)}"
                f" chief={(p.metadata.labels or {}).get('transient.training/chief')}"
                + (f" scheduled={scheduled.status} {scheduled.reason}: {scheduled.message}" if scheduled else "")
            )
        lease = client.CoordinationV1Api(env["api"]).read_namespaced_lease(f"{name}-chief", env["ns"])
        lines.append(
            f"lease: holder={lease.spec.holder_identity} transitions={lease.spec.lease_transitions}"
            f" acquired={lease.spec.acquire_time} renewed={lease.spec.renew_time}"
            f" duration={lease.spec.lease_duration_seconds}"
        )
    except Exception as exc:  # the diagnosis must not hide the failure it explains
        lines.append(f"(diagnosis incomplete: {exc!r})")
    logs = sorted(env["logs"].glob("operator-*.log"))
    if logs:
        lines.append(f"operator log {logs[-1].name} (tail):")
        lines.append(logs[-1].read_text(errors="replace")[-6000:])
    return "\n".join(lines)


def slot_of(pod: Any) -> str:
    return str(pod.metadata.labels["transient.training/slot"])


def gone(env: dict[str, Any], name: str) -> bool:
    return all(p.metadata.name != name for p in env["core"].list_namespaced_pod(env["ns"]).items)


def job_events(env: dict[str, Any], name: str = "train") -> list[Any]:
    """core/v1 Events about the job (involvedObject = the TransientTrainingJob)."""
    return [
        e
        for e in env["core"].list_namespaced_event(env["ns"]).items
        if e.involved_object.kind == "TransientTrainingJob" and e.involved_object.name == name
    ]


def test_worker_preempted_is_replaced_in_its_slot(env: dict[str, Any]) -> None:
    control = needs_control(env)
    job = create_job(env)
    status = running(env, epoch=1)
    chief = status["chief"]["pod"]
    victim = next(p for p in workers(env) if p.metadata.name != chief)
    control.preempt_pod(env["ns"], victim.metadata.name)
    wait_for("the preemption counted", lambda: job_status(env).get("preemptions") == 1)
    status = running(env, epoch=1)
    assert status["failures"] == 0
    assert status["replacements"] == 1
    assert status["chiefElections"] == 1
    assert sorted(slot_of(p) for p in workers(env)) == ["0", "1", "2"]
    replacement = next(p for p in workers(env) if slot_of(p) == slot_of(victim))
    assert replacement.metadata.name != victim.metadata.name
    assert replacement.spec.node_name != victim.spec.node_name  # the old node is gone
    wait_for("the lost pod deleted", lambda: gone(env, victim.metadata.name))
    metrics = env["operator"].metrics()
    assert f'ttj_preemptions_total{{job="train",namespace="{env["ns"]}"}} 1.0' in metrics
    assert f'ttj_worker_replacements_total{{job="train",namespace="{env["ns"]}"}} 1.0' in metrics
    assert "ttj_recovery_seconds_count" in metrics

    # Our Events reach the API server, about the job (kopf's own event posting is off).
    def both_events() -> list[Any] | None:
        found = job_events(env)
        return found if {"WorkerPreempted", "ChiefElected"} <= {e.reason for e in found} else None

    events = wait_for("WorkerPreempted and ChiefElected events", both_events)
    preempted = next(e for e in events if e.reason == "WorkerPreempted")
    assert preempted.type == "Warning"
    assert victim.metadata.name in preempted.message
    assert preempted.involved_object.uid == job["metadata"]["uid"]
    assert preempted.involved_object.api_version == "transient.training/v1alpha1"
    assert preempted.source.component == "ttj-operator"
    if shutil.which("kubectl"):
        listed = subprocess.run(
            ["kubectl", "--kubeconfig", env["kubeconfig"], "get", "events", "-n", env["ns"], "-o", "json"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        reasons = {
            item["reason"]
            for item in json.loads(listed.stdout)["items"]
            if item["involvedObject"]["kind"] == "TransientTrainingJob"
        }
        assert {"WorkerPreempted", "ChiefElected"} <= reasons


def test_chief_preempted_elects_a_new_chief(env: dict[str, Any]) -> None:
    control = needs_control(env)
    create_job(env)
    old = running(env, epoch=1)["chief"]["pod"]
    control.preempt_pod(env["ns"], old)
    status = running(env, epoch=2)
    assert status["chief"]["pod"] != old
    assert chiefs(env) == [status["chief"]["pod"]]
    assert status["chiefElections"] == 2
    assert status["preemptions"] == 1
    assert status["replacements"] == 1
    assert status["failures"] == 0
    lease = client.CoordinationV1Api(env["api"]).read_namespaced_lease("train-chief", env["ns"])
    assert lease.spec.holder_identity == status["chief"]["pod"]
    assert lease.spec.lease_transitions == 2
    wait_for(
        "handover measured once the new chief renewed",
        lambda: (
            "ttj_chief_handover_seconds_count" in env["operator"].metrics()
            and "lostAt" not in (job_status(env).get("chief") or {})
        ),
    )
    # Events are posted after the status write that running() saw: wait for them, do not race them.
    wait_for(
        "a ChiefElected Event naming the new chief and epoch 2",
        lambda: any(
            e.reason == "ChiefElected" and status["chief"]["pod"] in e.message and "epoch 2" in e.message
            for e in job_events(env)
        ),
    )


#: Rounds of the repeated preemptions below: a recovery that fails one time in ten escapes 24 rounds with odds
#: 0.9**24, under 8 %.
REPEATED_ROUNDS = 24


def preemption_cost_events(env: dict[str, Any]) -> int:
    """PreemptionCost Events about the job, each occurrence counted (an aggregated Event carries a count)."""
    return sum(e.count or 1 for e in job_events(env) if e.reason == "PreemptionCost")


@pytest.mark.timeout(60 + REPEATED_ROUNDS * 110)
def test_chief_and_worker_preempted_again_and_again_every_slot_runs_again_and_every_loss_is_priced(
    env: dict[str, Any],
) -> None:
    """Both things seen once on a real control plane, repeated: after a chief's preemption, with spare nodes, all
    3 slots run again within 60 s; a worker's preemption gets its PreemptionCost Event within 45 s of its
    replacement running. Chief and plain worker in turn."""
    control = needs_control(env)
    create_job(env)
    status = running(env, epoch=1)
    epoch = 1
    for round_ in range(REPEATED_ROUNDS):
        chief = status["chief"]["pod"]
        victim = chief if round_ % 2 == 0 else next(p.metadata.name for p in workers(env) if p.metadata.name != chief)
        control.preempt_pod(env["ns"], victim)
        epoch += victim == chief
        counted = round_ + 1
        wait_for(
            f"round {round_}: the preemption counted",
            lambda counted=counted: job_status(env).get("preemptions") == counted,
        )
        status = running(env, epoch=epoch)
        assert victim not in {p.metadata.name for p in workers(env)}
        try:
            wait_for(
                f"round {round_}: {counted} PreemptionCost Events",
                lambda counted=counted: preemption_cost_events(env) == counted,
                timeout=45,
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{diagnosis(env)}") from None
    assert status["failures"] == 0
    assert status["chiefElections"] == 1 + REPEATED_ROUNDS // 2
    assert status["replacements"] == REPEATED_ROUNDS


def test_two_workers_at_once_and_a_node_going_not_ready(env: dict[str, Any]) -> None:
    control = needs_control(env)
    create_job(env, replicas=4)
    chief = running(env, replicas=4, epoch=1)["chief"]["pod"]
    others = [p for p in workers(env) if p.metadata.name != chief]
    control.preempt_pod(env["ns"], others[0].metadata.name)
    control.preempt_pod(env["ns"], others[1].metadata.name)
    wait_for("two preemptions", lambda: job_status(env).get("preemptions") == 2)
    running(env, replicas=4, epoch=1)
    third = next(p for p in workers(env) if p.metadata.name != chief and p.status.phase == "Running")
    # The node's kubelet falls silent: the pod still reads Running, its node turns Ready=Unknown.
    control.lose_node(third.spec.node_name)
    wait_for("the NotReady node's pod counted", lambda: job_status(env).get("preemptions") == 3)
    status = running(env, replicas=4, epoch=1)
    assert status["failures"] == 0
    assert status["replacements"] == 3
    assert sorted(slot_of(p) for p in workers(env)) == ["0", "1", "2", "3"]
    wait_for("the stuck pod force-deleted", lambda: gone(env, third.metadata.name))
    assert all(p.spec.node_name != third.spec.node_name for p in workers(env))


def test_parameter_server_replaced_bumps_the_epoch(env: dict[str, Any]) -> None:
    create_job(env)
    status = running(env, epoch=1)
    ps = status["parameterServerPods"][0]
    env["core"].delete_namespaced_pod(ps, env["ns"])  # the Deployment controller makes another
    status = running(env, epoch=2)
    assert status["parameterServerPods"][0] != ps
    assert status["chiefElections"] == 1  # same chief, new epoch: it restores into the fresh PS
    assert status["preemptions"] == 1
    wait_for(
        "a ParameterServerReplaced Event",
        lambda: any(e.reason == "ParameterServerReplaced" for e in job_events(env)),
    )


def test_a_new_image_rolls_the_parameter_server_but_no_running_worker(env: dict[str, Any]) -> None:
    create_job(env)
    status = running(env, epoch=1)
    ps = status["parameterServerPods"][0]
    before = {p.metadata.name for p in workers(env)}
    client.CustomObjectsApi(env["api"]).patch_namespaced_custom_object(
        "transient.training", "v1alpha1", env["ns"], "transienttrainingjobs", "train", {"spec": {"image": "trainer:v2"}}
    )
    status = running(env, epoch=2)
    assert status["parameterServerPods"][0] != ps
    assert status["preemptions"] == 0  # a rollout, not a preemption
    images = {
        c.image
        for p in env["core"].list_namespaced_pod(env["ns"], label_selector="transient.training/role=ps").items
        if p.metadata.name == status["parameterServerPods"][0]
        for c in p.spec.containers
    }
    assert images == {"trainer:v2"}
    assert {p.metadata.name for p in workers(env)} == before


def test_operator_killed_mid_recovery_converges_after_restart(env: dict[str, Any]) -> None:
    create_job(env)
    old = running(env, epoch=1)["chief"]["pod"]
    other = next(p for p in workers(env) if p.metadata.name != old).metadata.name
    env["operator"].kill()
    if env["control"] is not None:  # preempted as GKE does; elsewhere deleted by someone else
        env["control"].preempt_pod(env["ns"], old, wait=True)
        env["control"].preempt_pod(env["ns"], other, wait=True)
    else:
        env["core"].delete_namespaced_pod(old, env["ns"])
        env["core"].delete_namespaced_pod(other, env["ns"])
    env["operator"].start()
    wait_for("some recovery started", lambda: job_status(env).get("preemptions", 0) >= 1)
    env["operator"].kill()  # in the middle of it
    env["operator"].start()
    status = running(env, epoch=2)
    assert status["preemptions"] == 2
    assert status["failures"] == 0
    assert status["chiefElections"] == 2
    assert status["replacements"] == 2
    assert len(chiefs(env)) == 1
    assert status["chief"]["pod"] not in (old, other)
    assert sorted(slot_of(p) for p in workers(env)) == ["0", "1", "2"]


def test_a_job_no_pool_can_run_says_why(env: dict[str, Any]) -> None:
    nodes = client.CoreV1Api(env["api"]).list_node().items
    if any((n.metadata.labels or {}).get("cloud.google.com/gke-accelerator") == "nvidia-tesla-v100" for n in nodes):
        pytest.skip("this cluster has V100 nodes")
    create_job(env, workers={"acceleratorType": "nvidia-tesla-v100"})

    def unschedulable() -> dict[str, Any] | None:
        status = job_status(env)
        running_condition = next((c for c in status.get("conditions") or [] if c["type"] == "Running"), None)
        return running_condition if (running_condition or {}).get("reason") == "WorkersUnschedulable" else None

    condition = wait_for("WorkersUnschedulable", unschedulable, timeout=30)
    assert condition["status"] == "False"
    assert "no node pool has spot nodes with 1 x nvidia-tesla-v100" in condition["message"]
    assert "nvidia-tesla-t4" in condition["message"]  # what the cluster has
    assert job_status(env)["phase"] == "Pending"
    warning = wait_for(
        "a WorkersUnschedulable event",
        lambda: [e for e in job_events(env) if e.reason == "WorkersUnschedulable"],
    )
    assert warning[0].type == "Warning"


def test_a_quota_that_refuses_a_worker_shows_on_the_job_and_the_job_recovers_when_it_frees(
    env: dict[str, Any],
) -> None:
    """The namespace's ResourceQuota grants two GPUs (only workers ask for one). The third worker's create is
    refused (403 from the quota admission), which the job says as `ReplicaFailure`; the chief is elected all the
    same; once the quota grows, the worker is created and the condition goes."""
    quota = {"metadata": {"name": "team"}, "spec": {"hard": {"requests.nvidia.com/gpu": "2"}}}
    env["core"].create_namespaced_resource_quota(env["ns"], quota)
    create_job(env, replicas=3)

    def refused() -> dict[str, Any] | None:
        status = job_status(env)
        condition = next((c for c in status.get("conditions") or [] if c["type"] == "ReplicaFailure"), None)
        return status if condition and condition["status"] == "True" and status.get("chief") else None

    status = wait_for("ReplicaFailure with a chief elected", refused, timeout=60)
    condition = next(c for c in status["conditions"] if c["type"] == "ReplicaFailure")
    assert condition["reason"] == "FailedCreate"
    assert (
        "exceeded quota: team, requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=2, "
        "limited: requests.nvidia.com/gpu=2" in condition["message"]
    )
    assert len(workers(env)) == 2
    # The operator posts a pass's Events after writing its status.
    wait_for(
        "a FailedCreate Event",
        lambda: any(e.reason == "FailedCreate" and e.type == "Warning" for e in job_events(env)),
        timeout=30,
    )

    env["core"].patch_namespaced_resource_quota("team", env["ns"], {"spec": {"hard": {"requests.nvidia.com/gpu": "3"}}})
    status = running(env, replicas=3)
    assert "ReplicaFailure" not in {c["type"] for c in status.get("conditions") or []}
    assert status.get("failures", 0) == 0


def test_a_parameter_server_its_deployment_cannot_create_shows_on_the_job(env: dict[str, Any]) -> None:
    """The PS template names a PriorityClass that does not exist yet: the API refuses the PS pods to the
    ReplicaSet controller, the Deployment says so (ReplicaFailure), and so does the job; once the class is
    made, the PS runs and the condition goes."""
    missing = f"ttj-e2e-{env['ns']}"
    create_job(env, parameterServers={"template": {"spec": {"priorityClassName": missing}}})

    def relayed() -> dict[str, Any] | None:
        status = job_status(env)
        condition = next((c for c in status.get("conditions") or [] if c["type"] == "ReplicaFailure"), None)
        return condition if condition and condition["status"] == "True" else None

    condition = wait_for("the PS pods' refusal on the job", relayed, timeout=60)
    assert condition["message"].startswith("create Pod for Deployment train-ps-0: ")
    assert f"no PriorityClass with name {missing} was found" in condition["message"]
    scheduling = client.SchedulingV1Api(env["api"])
    scheduling.create_priority_class({"metadata": {"name": missing}, "value": 100})
    try:
        status = running(env, replicas=3)
        assert "ReplicaFailure" not in {c["type"] for c in status.get("conditions") or []}
    finally:
        scheduling.delete_priority_class(missing)


def test_a_trainer_cannot_touch_another_jobs_lease_or_delete_pods(env: dict[str, Any]) -> None:
    """Each job's pods run as its own ServiceAccount, whose Role names that job's Lease only."""
    from ttj_contract import lease_name, trainer_account_name

    create_job(env, "job-a", replicas=1)
    create_job(env, "job-b", replicas=1)
    coordination = client.CoordinationV1Api(env["api"])
    for job in ("job-a", "job-b"):
        wait_for(f"{job}'s Lease", lambda job=job: coordination.read_namespaced_lease(lease_name(job), env["ns"]))
    victim = wait_for("a pod of job-b", lambda: workers(env, "job-b"))[0].metadata.name
    token = wait_for(
        "job-a's trainer ServiceAccount",
        lambda: (
            env["core"]
            .create_namespaced_service_account_token(trainer_account_name("job-a"), env["ns"], {"spec": {}})
            .status.token
        ),
    )
    trainer_api = client_with_token(env["api"], token)
    trainer = client.CoordinationV1Api(trainer_api)
    user = f"system:serviceaccount:{env['ns']}:{trainer_account_name('job-a')}"

    own = trainer.read_namespaced_lease(lease_name("job-a"), env["ns"])  # its own Lease: allowed
    assert own.metadata.name == lease_name("job-a")
    with pytest.raises(client.ApiException) as info:
        trainer.read_namespaced_lease(lease_name("job-b"), env["ns"])
    assert info.value.status == 403
    assert json.loads(info.value.body)["message"] == (
        f'leases.coordination.k8s.io "{lease_name("job-b")}" is forbidden: User "{user}" cannot get resource '
        f'"leases" in API group "coordination.k8s.io" in the namespace "{env["ns"]}"'
    )
    steal = {"spec": {"holderIdentity": "job-a-worker-0-0"}}
    assert status_of(lambda: trainer.patch_namespaced_lease(lease_name("job-b"), env["ns"], steal)) == 403
    pods = client.CoreV1Api(trainer_api)
    assert status_of(lambda: pods.delete_namespaced_pod(victim, env["ns"])) == 403
    assert status_of(lambda: pods.delete_collection_namespaced_pod(env["ns"])) == 403
    assert status_of(lambda: pods.list_namespaced_pod(env["ns"])) == 403
    assert not gone(env, victim)
    trainer_api.close()


def test_the_operator_never_met_a_403(stack: dict[str, Any]) -> None:
    """Last in the module: every request the operator made under its manifest's identity was allowed."""
    if stack["access"] is None:
        pytest.skip("counts the local API server's 403s")
    assert stack["access"].requests[stack["operator_user"]] > 0, "the operator never acted under its own identity"
    # A quota's refusal is the namespace's answer, not a permission the operator lacks (provoked above).
    refused = [
        d for d in stack["access"].denials if d.user == stack["operator_user"] and "exceeded quota" not in d.message
    ]
    print(
        f"operator requests: {stack['access'].requests[stack['operator_user']]}, 403s: {len(refused)}; "
        f"403s to anyone: {stack['access'].denied_total}"
    )
    assert refused == [], "\n".join(f"{d.method} {d.path}: {d.message}" for d in refused)


def test_a_group_without_capacity_falls_back_to_the_next(env: dict[str, Any]) -> None:
    nodes = client.CoreV1Api(env["api"]).list_node().items
    if any((n.metadata.labels or {}).get("cloud.google.com/gke-accelerator") == "nvidia-tesla-v100" for n in nodes):
        pytest.skip("this cluster has V100 nodes")
    groups = [{"name": "v100", "acceleratorType": "nvidia-tesla-v100"}, {"name": "t4"}]
    create_job(env, replicas=2, workers={"groups": groups, "fallbackAfterSeconds": 3})

    def in_t4() -> list[Any]:
        running = [p for p in workers(env) if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
        return (
            running
            if len(running) == 2 and all(p.metadata.labels["transient.training/worker-group"] == "t4" for p in running)
            else []
        )

    wait_for("both workers running in group t4", in_t4, timeout=60)
    status = wait_for(
        "the job running with v100 marked out of capacity",
        lambda: (s := job_status(env)).get("phase") == "Running" and (s.get("workers") or {}).get("active") == 2 and s,
        timeout=60,
    )
    fallback = next(c for c in status["conditions"] if c["type"] == "CapacityFallback")
    assert (fallback["status"], fallback["reason"]) == ("True", "GroupCapacityUnavailable")
    assert "group v100 skipped since" in fallback["message"]
    by_group = {g["name"]: g for g in status["workerGroups"]}
    assert (by_group["v100"]["desired"], by_group["t4"]["desired"], by_group["t4"]["active"]) == (0, 2, 2)
    assert by_group["v100"]["capacityUnavailableSince"]
    moved = [e for e in job_events(env) if e.reason == "CapacityFallback"]
    assert {e.type for e in moved} == {"Warning"}
    assert sorted(e.message.split(" left")[0] for e in moved) == ["worker slot 0", "worker slot 1"]
    for event in moved:
        assert "left group v100 (unschedulable for" in event.message, event.message
        assert event.message.endswith("for group t4"), event.message


def test_a_worker_moves_back_to_a_group_with_room_make_before_break(env: dict[str, Any]) -> None:
    """Group a holds one worker, so the second goes to b; once a may hold two, the b worker moves back: a third
    worker starts in a in the free slot and runs before the b worker is deleted; the chief stays."""
    groups: list[dict[str, Any]] = [{"name": "a", "maxReplicas": 1}, {"name": "b"}]
    create_job(env, replicas=1, workers={"groups": groups, "maxReplicas": 3})
    chief = running(env, replicas=1, epoch=1)["chief"]["pod"]
    custom = client.CustomObjectsApi(env["api"])

    def patch(workers_patch: dict[str, Any]) -> None:
        custom.patch_namespaced_custom_object(
            "transient.training",
            "v1alpha1",
            env["ns"],
            "transienttrainingjobs",
            "train",
            {"spec": {"workers": workers_patch}},
        )

    def group_of(pod: Any) -> str:
        return str(pod.metadata.labels["transient.training/worker-group"])

    def running_by_group() -> dict[str, str]:
        return {
            p.metadata.name: group_of(p)
            for p in workers(env)
            if p.status.phase == "Running" and not p.metadata.deletion_timestamp
        }

    patch({"replicas": 2})
    in_b = wait_for(
        "a second worker running in group b",
        lambda: [n for n, g in running_by_group().items() if g == "b" and len(running_by_group()) == 2],
        timeout=60,
    )[0]
    status = wait_for(
        "both workers counted",
        lambda: (s := job_status(env)) and (s.get("workers") or {}).get("active") == 2 and s,
        timeout=60,
    )
    # a is full: the b worker is no fallback
    fallback = next(c for c in status["conditions"] if c["type"] == "CapacityFallback")
    assert (fallback["status"], fallback["reason"]) == ("False", "PreferredGroups")
    assert status["chief"]["pod"] == chief

    # a may hold two now: make-before-break, watched pass by pass
    seen: list[tuple[bool, bool]] = []  # (the new a worker runs, the b worker is being deleted or gone)

    def moved() -> bool:
        pods = {p.metadata.name: p for p in workers(env)}
        new = [p for n, p in pods.items() if group_of(p) == "a" and n != chief]
        old = pods.get(in_b)
        new_runs = any(p.status.phase == "Running" and not p.metadata.deletion_timestamp for p in new)
        seen.append((new_runs, old is None or bool(old.metadata.deletion_timestamp)))
        return seen[-1] == (True, True)

    patch({"groups": [{"name": "a", "maxReplicas": 2}, {"name": "b"}]})
    wait_for("the b worker replaced by a running a worker", moved, timeout=60)
    first_break = next(i for i, (_, broken) in enumerate(seen) if broken)
    assert seen[first_break][0], f"the b worker went before the a worker ran: {seen}"
    assert sorted(running_by_group().values()) == ["a", "a"]
    events = wait_for(
        "the MovedBack event", lambda: [e for e in job_events(env) if e.reason == "MovedBack"], timeout=30
    )
    assert [(e.type, e.message) for e in events] == [
        (
            "Normal",
            f"worker slot 1 moved from group b back to group a (as slot 2: train-worker-2-1 runs, {in_b} released)",
        )
    ]
    final = wait_for(
        "CapacityFallback False",
        lambda: (
            (s := job_status(env))
            and any(c["type"] == "CapacityFallback" and c["status"] == "False" for c in s.get("conditions", []))
            and s
        ),
        timeout=30,
    )
    assert final["chief"]["pod"] == chief
    assert [(g["name"], g["active"]) for g in final["workerGroups"]] == [("a", 2), ("b", 0)]


def test_a_group_in_another_zone_than_the_parameter_server_pays_for_the_traffic(env: dict[str, Any]) -> None:
    """Two spot T4 nodes moved to zone b, a group pinned there, the PS in zone a: once the chief reports 1 GiB on
    its PS, each global step of the zone-b worker moves 2 GiB across zones, $0.02 at the default price."""
    needs_control(env)  # relabels nodes of the local cluster
    core = env["core"]
    zone_label = "topology.kubernetes.io/zone"
    idle = [
        n
        for n in core.list_node().items
        if (n.metadata.labels or {}).get("cloud.google.com/gke-accelerator") == "nvidia-tesla-t4"
    ][:2]
    home = {n.metadata.name: n.metadata.labels[zone_label] for n in idle}
    for name in home:
        core.patch_node(name, {"metadata": {"labels": {zone_label: "us-central1-b"}}})
    try:
        create_job(env, replicas=1, workers={"groups": [{"name": "b", "zone": "us-central1-b"}]})
        status = running(env, replicas=1, epoch=1)
        chief = status["chief"]["pod"]
        assert core.read_namespaced_pod(chief, env["ns"]).spec.node_name in home
        coordination = client.CoordinationV1Api(env["api"])
        lease = lease_name("train")

        def report(step: int) -> None:
            progress = {"globalStep": step, "epoch": 1, "parameterBytes": [1 << 30]}
            coordination.patch_namespaced_lease(
                lease,
                env["ns"],
                {"metadata": {"annotations": {"transient.training/progress": json.dumps(progress)}}},
            )

        report(10)
        wait_for(
            "the traffic marked from step 10",
            lambda: ((job_status(env).get("cost") or {}).get("crossZone") or {}).get("step") == 10,
            timeout=30,
        )
        report(60)
        cost = wait_for(
            "the traffic of 50 steps priced",
            lambda: (c := (job_status(env).get("cost") or {}).get("crossZone") or {}).get("step") == 60 and c,
            timeout=30,
        )
        assert (cost["usd"], cost["gib"]) == (pytest.approx(1.0), pytest.approx(100.0))
        final = job_status(env)
        assert final["cost"]["usd"] > 1.0
        [group] = final["workerGroups"]
        assert (group["name"], group["crossZoneUSD"]) == ("b", pytest.approx(1.0))
        worker_usd = sum(p["usd"] for p in final["cost"]["pods"] if p["role"] == "worker")
        assert group["usd"] == pytest.approx(1.0 + worker_usd, abs=1e-5)
    finally:
        for name, zone in home.items():
            core.patch_node(name, {"metadata": {"labels": {zone_label: zone}}})
