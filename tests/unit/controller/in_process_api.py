"""The local cluster's API server behind the Applier's port, in process: Kubernetes' own rules for writes.

The server is built, never started: no sockets, no controllers, no kubelets, and its clock is the test's.
Requests go straight to its core (creates, merge patches with resourceVersion preconditions, graceful
deletion held by finalizers, the job's status subresource), and its errors come back as
:class:`~ttj.kubeapi.KubeError`, as :class:`~ttj.kubeapi.KubeClient` raises them. The helpers below play
the other writers: the kubelet, the trainer.
"""

from __future__ import annotations

import asyncio
import copy
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry

from tests.unit.planner.builders import T0
from ttj.api.crd import crd
from ttj.controller.context import OperatorContext
from ttj.controller.handlers import CHILD_RESOURCES
from ttj.controller.metrics import Metrics
from ttj.controller.observe import JobIndexes
from ttj.controller.reconciler import JobReconciler
from ttj.kubeapi import MERGE_PATCH, RESOURCES, KubeError, path
from ttj.planner import Observed
from ttj.planner.observed import Obj, labels_of, name_of
from ttj_contract import KIND, LABEL_JOB, LABEL_PS_INDEX, LABEL_ROLE, Role, format_time, lease_name
from ttj_localcluster.apiserver.errors import ApiError
from ttj_localcluster.apiserver.resources import ResourceType
from ttj_localcluster.apiserver.server import ApiServer

NAMESPACE = "ns"
#: The children the controller watches besides pods and the Lease.
CHILD_KINDS = ("Service", "Deployment", "ServiceAccount", "Role", "RoleBinding", "NetworkPolicy")


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: Any
    content_type: str


class InProcessApi:
    """A :class:`~ttj.controller.apply.KubeApi` over an in-process API server holding one namespace."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.server = ApiServer(clock=lambda: self.now)
        self.requests: list[Request] = []
        self.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=crd())
        self.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NAMESPACE}})

    def _target(self, url: str) -> tuple[ResourceType, str, str | None, str | None]:
        parts = url.strip("/").split("/")
        group, version, rest = ("", parts[1], parts[2:]) if parts[0] == "api" else (parts[1], parts[2], parts[3:])
        namespace = ""
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        rtype = self.server.registry.get(group, version, rest[0])
        if rtype is None:
            raise KubeError(404, json.dumps({"message": f"no resource {url}"}))
        return rtype, namespace, (rest[1] if len(rest) > 1 else None), (rest[2] if len(rest) > 2 else None)

    def request(
        self, method: str, path: str, *, body: Any = None, content_type: str = "application/json"
    ) -> dict[str, Any]:
        self.requests.append(Request(method, path, copy.deepcopy(body), content_type))
        rtype, namespace, name, subresource = self._target(path)
        server = self.server.core
        try:
            if method == "POST" and name is None:
                answer = server.create(rtype, namespace, body)
            elif method == "POST" and subresource == "binding":
                answer = self.server.subresources.bind(namespace, name, body)
            elif method == "GET" and name is not None:
                answer = server.get(rtype, namespace, name)
            elif method == "PATCH" and name is not None:
                answer = server.patch(rtype, namespace, name, content_type, body, subresource=subresource)
            elif method == "DELETE" and name is not None:
                answer = server.delete(rtype, namespace, name, dict(body or {}))
            else:
                raise AssertionError(f"unexpected {method} {path}")
        except ApiError as exc:
            raise KubeError(exc.code, json.dumps(exc.status())) from None
        return copy.deepcopy(answer)

    def writes(self, method: str, kind: str) -> list[Request]:
        """The requests made so far with this method to objects of this kind."""
        prefix = RESOURCES[kind].path(NAMESPACE)
        return [r for r in self.requests if r.method == method and r.path.startswith(prefix)]

    # -- what the controller's watches would show ---------------------------------------------------
    def job(self, name: str) -> Obj:
        return self.request("GET", path(KIND, NAMESPACE, name))

    def objects(self, kind: str) -> list[Obj]:
        key = self.server.registry.get(RESOURCES[kind].group, RESOURCES[kind].version, RESOURCES[kind].plural)
        assert key is not None
        return [copy.deepcopy(o) for o in self.server.store.items(key.storage_key, NAMESPACE)]

    def observe(self, job: str, nodes: dict[str, Obj]) -> Observed:
        observed = Observed(nodes=copy.deepcopy(nodes))
        observed.pods = [p for p in self.objects("Pod") if labels_of(p).get(LABEL_JOB) == job]
        observed.lease = next((lease for lease in self.objects("Lease") if name_of(lease) == lease_name(job)), None)
        for kind in CHILD_KINDS:
            for child in self.objects(kind):
                if labels_of(child).get(LABEL_JOB) == job:
                    observed.children[(kind, name_of(child))] = child
        return observed

    # -- the other writers --------------------------------------------------------------------------
    def create(self, obj: Obj) -> Obj:
        return self.request("POST", path(obj["kind"], NAMESPACE), body=obj)

    def patch(self, kind: str, name: str, patch: Obj, subresource: str | None = None) -> Obj:
        return self.request("PATCH", path(kind, NAMESPACE, name, subresource), body=patch, content_type=MERGE_PATCH)

    def run(self, pod: str, node: str) -> None:
        """The scheduler binds the pod and its kubelet starts it."""
        self.request("POST", path("Pod", NAMESPACE, pod, "binding"), body={"target": {"name": node}})
        self.patch("Pod", pod, {"status": {"phase": "Running", "startTime": format_time(self.now)}}, "status")

    def run_parameter_server(self, job: str, node: str) -> str:
        """The PS Deployment's pod of ``job``, created and running on ``node`` (no Deployment controller here)."""
        name = f"{job}-ps-0-abc"
        labels = {LABEL_JOB: job, LABEL_ROLE: Role.PS, LABEL_PS_INDEX: "0"}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}}
        self.create({**pod, "spec": {"containers": [{"name": "ps", "image": "ps"}]}})
        self.run(name, node)
        return name

    def end(self, pod: str, exit_code: int, reason: str) -> None:
        """The pod's container ends (143: SIGTERM, as a preempted node's kubelet ends it)."""
        terminated = {"exitCode": exit_code, "reason": "Error", "finishedAt": format_time(self.now)}
        status = {
            "phase": "Failed" if exit_code else "Succeeded",
            "reason": reason,
            "containerStatuses": [{"name": "trainer", "state": {"terminated": terminated}}],
        }
        self.patch("Pod", pod, {"status": status}, "status")

    def finish_deletions(self) -> None:
        """Kubelets end the pods being deleted that no finalizer holds any more."""
        for pod in self.objects("Pod"):
            metadata = pod["metadata"]
            if metadata.get("deletionTimestamp") and not metadata.get("finalizers"):
                self.request("DELETE", path("Pod", NAMESPACE, metadata["name"]), body={"gracePeriodSeconds": 0})


def reconciler_for(cluster: Any, job: str) -> JobReconciler:
    """A reconciler of ``job`` writing to ``cluster`` (an :class:`InProcessApi`, or what stands in front of one),
    its clock stopped at T0."""
    ctx = OperatorContext(api=None, kube=cluster, metrics=Metrics(CollectorRegistry()), clock=lambda: T0)  # type: ignore[arg-type]
    return JobReconciler(ctx, (NAMESPACE, job))


def indexes_showing(key: tuple[str, str], shown: Observed, nodes: dict[str, Obj], lease: Obj | None) -> JobIndexes:
    """The operator's indexes as its watches would show the job's children ``shown``, ``lease`` and ``nodes``."""
    pods = {key: [("Pod", name_of(p), p) for p in shown.pods]}
    leases = {key: [("Lease", name_of(lease), lease)]} if lease is not None else {}
    children = [
        {key: [(kind, name, child) for (kind, name), child in shown.children.items() if kind == wanted]}
        for wanted in CHILD_RESOURCES
    ]
    return JobIndexes(pods, leases, children, {name: [n] for name, n in nodes.items()})  # type: ignore[arg-type]


def pass_over(reconciler: JobReconciler, job_seen: Obj, shown: Observed, nodes: dict[str, Obj]) -> float | None:
    """One pass over watches that show the job as ``job_seen`` and its children as ``shown``."""
    indexes = indexes_showing(reconciler.key, shown, nodes, shown.lease)
    return asyncio.run(reconciler.run_pass(job_seen, indexes))  # type: ignore[arg-type]


def run_pass(
    reconciler: JobReconciler,
    cluster: InProcessApi,
    job: str,
    nodes: dict[str, Obj],
    *,
    lease_seen: bool = True,
    lease: Obj | None = None,
) -> float | None:
    """One pass of ``reconciler`` over what its watches would show of ``cluster`` (without the Lease when
    ``lease_seen`` is false, or with ``lease`` instead of the Lease there: a lagging Lease watch)."""
    observed = cluster.observe(job, nodes)
    shown = lease if lease is not None else observed.lease
    indexes = indexes_showing((NAMESPACE, job), observed, nodes, shown if lease_seen else None)

    async def one_pass() -> float | None:
        delay = await reconciler.run_pass(cluster.job(job), indexes)  # type: ignore[arg-type]
        await reconciler.ctx.events.drain()  # the Events it handed over, before the test reads them
        return delay

    return asyncio.run(one_pass())
