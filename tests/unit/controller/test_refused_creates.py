"""A create the API refuses (a ResourceQuota, Pod Security admission, a 422) must not freeze the job.

The refusal becomes a condition and a Warning Event carrying the API's message, the other writes of the
pass (the chief election included) still apply, and the job recovers by itself once the quota frees.
"""

from __future__ import annotations

import json
from typing import Any

from tests.unit.controller import in_process_api
from tests.unit.controller.in_process_api import NAMESPACE, InProcessApi, reconciler_for
from tests.unit.planner.builders import T0, job, node
from ttj.controller.backoff import REFUSED_WRITES_BACKOFF
from ttj.controller.reconciler import JobReconciler
from ttj.kubeapi import KubeError, path
from ttj_contract import KIND, LABEL_ROLE, Role

NAME = "mnist"
NODES = {n["metadata"]["name"]: n for n in [node(f"gpu-{i}") for i in range(3)] + [node("cpu-0", "on-demand")]}


class QuotaApi(InProcessApi):
    """The in-process API server behind a ResourceQuota on the pod count, as kube-apiserver's admission
    answers when it is used up."""

    def __init__(self, pods: int) -> None:
        super().__init__(T0)
        self.pods = pods

    def request(
        self, method: str, path_: str, *, body: Any = None, content_type: str = "application/json"
    ) -> dict[str, Any]:
        if method == "POST" and path_ == path("Pod", NAMESPACE) and len(self.objects("Pod")) >= self.pods:
            message = (
                f'pods "{body["metadata"]["name"]}" is forbidden: exceeded quota: team-quota, requested: pods=1, '
                f"used: pods={self.pods}, limited: pods={self.pods}"
            )
            raise KubeError(403, json.dumps({"kind": "Status", "code": 403, "reason": "Forbidden", "message": message}))
        return super().request(method, path_, body=body, content_type=content_type)


def run_pass(reconciler: JobReconciler, cluster: InProcessApi) -> float | None:
    return in_process_api.run_pass(reconciler, cluster, NAME, NODES)


def conditions(cluster: InProcessApi) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (cluster.job(NAME).get("status") or {}).get("conditions") or []}


def events(cluster: InProcessApi) -> list[dict[str, Any]]:
    return [r.body for r in cluster.writes("POST", "Event")]


def test_a_quota_refusal_is_reported_the_election_happens_and_the_job_recovers() -> None:
    cluster = QuotaApi(pods=3)  # the PS pod and two workers: the third worker is refused
    cluster.create(job(NAME))
    reconciler = reconciler_for(cluster, NAME)
    cluster.run_parameter_server(NAME, "cpu-0")

    delay = run_pass(reconciler, cluster)
    workers = [p for p in cluster.objects("Pod") if p["metadata"]["labels"][LABEL_ROLE] == Role.WORKER]
    assert len(workers) == 2
    refused = conditions(cluster)["ReplicaFailure"]
    assert (refused["status"], refused["reason"]) == ("True", "FailedCreate")
    assert "exceeded quota: team-quota" in refused["message"]
    [warning] = [e for e in events(cluster) if e["reason"] == "FailedCreate"]
    assert warning["type"] == "Warning"
    assert "exceeded quota: team-quota" in warning["message"]
    assert delay is not None
    assert 0 < delay <= REFUSED_WRITES_BACKOFF.cap

    # Two workers run: the chief is elected although the third create is refused again.
    for i, pod in enumerate(workers):
        cluster.run(pod["metadata"]["name"], f"gpu-{i}")
    run_pass(reconciler, cluster)
    lease = cluster.observe(NAME, NODES).lease
    assert lease is not None
    assert lease["spec"]["holderIdentity"] in {p["metadata"]["name"] for p in workers}
    status = cluster.job(NAME)["status"]
    assert status["chief"]["pod"] == lease["spec"]["holderIdentity"]
    assert conditions(cluster)["ReplicaFailure"]["status"] == "True"

    # The quota frees: the next pass creates the missing worker and the condition goes.
    cluster.pods = 10
    run_pass(reconciler, cluster)
    workers = [p for p in cluster.objects("Pod") if p["metadata"]["labels"][LABEL_ROLE] == Role.WORKER]
    assert len(workers) == 3
    assert "ReplicaFailure" not in conditions(cluster)
    assert cluster.writes("PATCH", KIND)  # status written every step
