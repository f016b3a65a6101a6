"""The operator end to end: real kopf and HTTP against the embedded API server, with a stand-in
kubelet (tests/e2e/operator_support.py) injecting preemptions, node loss and PS loss."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from tests.e2e.operator_support import FakeKubelet, OperatorProcess, install_crd, wait_for

pytestmark = [pytest.mark.e2e]

_names = itertools.count()


@pytest.fixture
def env(kubeconfig: str, k8s_api: Any, local_cluster: Any, tmp_path: Path) -> Iterator[dict[str, Any]]:
    if local_cluster is None:
        pytest.skip("needs the embedded cluster: the stand-in kubelet writes pod and node status")
    install_crd(k8s_api)
    namespace = f"op-e2e-{next(_names)}"
    core = client.CoreV1Api(k8s_api)
    core.create_namespace({"metadata": {"name": namespace}})
    kubelet = FakeKubelet(k8s_api, namespace)
    for i in range(6):
        kubelet.add_node(f"{namespace}-gpu-{i}", "spot")
    kubelet.add_node(f"{namespace}-cpu-0", "on-demand")
    operator = OperatorProcess(kubeconfig, namespace, tmp_path)
    operator.start()
    with kubelet:
        try:
            yield {"api": k8s_api, "ns": namespace, "kubelet": kubelet, "operator": operator, "core": core}
        finally:
            operator.kill()
            for log in sorted(tmp_path.glob("operator-*.log")):
                print(log.name, log.read_text()[-3000:])


def create_job(env: dict[str, Any], name: str = "train", replicas: int = 3) -> None:
    body = {
        "apiVersion": "transient.training/v1alpha1",
        "kind": "TransientTrainingJob",
        "metadata": {"name": name, "namespace": env["ns"]},
        "spec": {
            "trainSteps": 100,
            "model": "small-cnn",
            "dataset": "synthetic",
            "checkpoint": {"uri": "/tmp/ck"},
            "workers": {"replicas": replicas, "minReplicas": 1},
            "backoffLimit": 1,
        },
    }
    client.CustomObjectsApi(env["api"]).create_namespaced_custom_object(
        "transient.training", "v1alpha1", env["ns"], "transienttrainingjobs", body
    )


def job_status(env: dict[str, Any], name: str = "train") -> dict[str, Any]:
    job = client.CustomObjectsApi(env["api"]).get_namespaced_custom_object(
        "transient.training", "v1alpha1", env["ns"], "transienttrainingjobs", name
    )
    return dict(job.get("status") or {})


def workers(env: dict[str, Any], name: str = "train") -> list[Any]:
    pods = (
        env["core"]
        .list_namespaced_pod(
            env["ns"], label_selector=f"transient.training/job-name={name},transient.training/role=worker"
        )
        .items
    )
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

    return dict(wait_for(f"job Running with {replicas} workers (epoch {epoch})", check, timeout=90))


def slot_of(pod: Any) -> str:
    return str(pod.metadata.labels["transient.training/slot"])


def test_worker_preempted_is_replaced_in_its_slot(env: dict[str, Any]) -> None:
    create_job(env)
    status = running(env, epoch=1)
    chief = status["chief"]["pod"]
    victim = next(p for p in workers(env) if p.metadata.name != chief)
    env["kubelet"].preempt_pod(victim.metadata.name)
    wait_for("the preemption counted", lambda: job_status(env).get("preemptions") == 1)
    status = running(env, epoch=1)
    assert status["failures"] == 0
    assert status["replacements"] == 1
    slots = sorted(slot_of(p) for p in workers(env))
    assert slots == ["0", "1", "2"]
    replacement = next(p for p in workers(env) if slot_of(p) == slot_of(victim))
    assert replacement.metadata.name != victim.metadata.name
    wait_for(
        "the lost pod deleted",
        lambda: all(p.metadata.name != victim.metadata.name for p in env["core"].list_namespaced_pod(env["ns"]).items),
    )
    metrics = env["operator"].metrics()
    assert f'ttj_preemptions_total{{job="train",namespace="{env["ns"]}"}} 1.0' in metrics
    assert "ttj_recovery_seconds_count" in metrics


def test_chief_preempted_elects_a_new_chief(env: dict[str, Any]) -> None:
    create_job(env)
    old = running(env, epoch=1)["chief"]["pod"]
    env["kubelet"].preempt_pod(old)
    status = running(env, epoch=2)
    assert status["chief"]["pod"] != old
    assert chiefs(env) == [status["chief"]["pod"]]
    assert status["chiefElections"] == 2
    assert status["preemptions"] == 1
    assert status["failures"] == 0
    lease = client.CoordinationV1Api(env["api"]).read_namespaced_lease("train-chief", env["ns"])
    assert lease.spec.holder_identity == status["chief"]["pod"]
    assert lease.spec.lease_transitions == 2
    wait_for(
        "handover measured",
        lambda: (
            "ttj_chief_handover_seconds_count" in env["operator"].metrics()
            and "lostAt" not in (job_status(env).get("chief") or {})
        ),
    )


def test_two_workers_at_once_and_a_node_going_not_ready(env: dict[str, Any]) -> None:
    create_job(env, replicas=4)
    chief = running(env, replicas=4, epoch=1)["chief"]["pod"]
    others = [p for p in workers(env) if p.metadata.name != chief]
    env["kubelet"].preempt_pod(others[0].metadata.name)
    env["kubelet"].preempt_pod(others[1].metadata.name)
    wait_for("two preemptions", lambda: job_status(env).get("preemptions") == 2)
    running(env, replicas=4, epoch=1)
    third = next(p for p in workers(env) if p.metadata.name != chief and p.status.phase == "Running")
    env["kubelet"].node_not_ready(third.spec.node_name)
    wait_for("the NotReady node's pod replaced", lambda: job_status(env).get("preemptions") == 3, timeout=60)
    status = running(env, replicas=4, epoch=1)
    assert status["failures"] == 0
    wait_for(
        "the stuck pod force-deleted",
        lambda: all(p.metadata.name != third.metadata.name for p in env["core"].list_namespaced_pod(env["ns"]).items),
    )


def test_parameter_server_replaced_bumps_the_epoch(env: dict[str, Any]) -> None:
    create_job(env)
    status = running(env, epoch=1)
    ps = status["parameterServerPods"][0]
    env["core"].delete_namespaced_pod(ps, env["ns"])
    status = running(env, epoch=2)
    assert status["parameterServerPods"][0] != ps
    assert status["chiefElections"] == 1
    assert status["preemptions"] == 1


def test_operator_killed_mid_recovery_converges_after_restart(env: dict[str, Any]) -> None:
    create_job(env)
    old = running(env, epoch=1)["chief"]["pod"]
    env["operator"].kill()
    env["kubelet"].preempt_pod(old)
    other = next(p for p in workers(env) if p.metadata.name != old)
    env["kubelet"].preempt_pod(other.metadata.name)
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
    assert status["chief"]["pod"] not in (old, other.metadata.name)


def test_code_failures_past_backoff_limit_fail_the_job(env: dict[str, Any]) -> None:
    create_job(env)
    running(env, epoch=1)
    for attempt in (1, 2):
        victim = workers(env)[0].metadata.name
        env["kubelet"].crash(victim)
        wait_for(f"failure {attempt} counted", lambda a=attempt: job_status(env).get("failures") == a)
        if attempt == 1:
            running(env)
    status = wait_for("Failed", lambda: job_status(env) if job_status(env).get("phase") == "Failed" else None)
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert status["preemptions"] == 0
