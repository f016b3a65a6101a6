"""The planner's writes mean the same in memory and on an API server.

The unit tests and the simulator apply writes with the in-memory interpreter; the operator sends them
with the Applier. Here the same writes, from the same observation, go both ways: into the interpreter,
and through the Applier's port into the local cluster's API server (its own code for creates, merge
patches, preconditions, finalizers and graceful deletion). Both must refuse the same writes and leave
the cluster looking the same to the next pass.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.unit.controller.in_process_api import NAMESPACE, InProcessApi
from tests.unit.planner.builders import T0, job, node
from ttj.api.models import JobRef
from ttj.controller.apply import Applier
from ttj.kubeapi import path
from ttj.mergepatch import merge_patch_between
from ttj.planner import (
    CreateChild,
    DeleteChild,
    LabelPod,
    Observed,
    Plan,
    Refusal,
    RemoveFinalizer,
    ReplaceChild,
    UpdateLease,
    Write,
    plan,
)
from ttj.planner.children import lease as lease_manifest
from ttj.planner.interpreter import Conflict, Interpreter
from ttj.planner.observed import Obj, labels_of, meta, name_of
from ttj_contract import (
    ANNOTATION_DELETED,
    ANNOTATION_PROGRESS,
    FINALIZER,
    KIND,
    LABEL_CHIEF,
    LABEL_JOB,
    LABEL_PS_INDEX,
    LABEL_ROLE,
    LeaseProgress,
    Role,
    format_micro_time,
    format_time,
    lease_name,
    ps_name,
)

NAME = "mnist"
LEASE = lease_name(NAME)
S = timedelta(seconds=1)
#: Another writer acting between a pass's observation and its writes, on (the API server, the in-memory copy).
Meanwhile = Callable[[InProcessApi, Interpreter], None]


def picture(observed: Observed) -> dict[str, Any]:
    """What the next pass can tell of the cluster: every part a write may change."""
    pods = {}
    for pod in observed.pods:
        metadata = meta(pod)
        if metadata.get("deletionTimestamp") and not metadata.get("finalizers"):
            continue  # its kubelet ends it; the interpreter runs no kubelet and drops it at once
        pods[name_of(pod)] = {
            "labels": labels_of(pod),
            "annotations": metadata.get("annotations") or {},
            "finalizers": metadata.get("finalizers") or [],
            "deletion": (metadata.get("deletionTimestamp"), metadata.get("deletionGracePeriodSeconds")),
            "phase": (pod.get("status") or {}).get("phase"),
        }
    children = {
        f"{kind}/{name}": (labels_of(child), meta(child).get("annotations"), (child.get("spec") or {}).get("template"))
        for (kind, name), child in observed.children.items()
    }
    lease = observed.lease
    return {
        "pods": pods,
        "children": children,
        "lease": None if lease is None else (lease["spec"], meta(lease).get("annotations")),
    }


class Scenario:
    """A job on the API server, planned pass by pass; every pass's writes also go into the interpreter."""

    def __init__(self) -> None:
        self.cluster = InProcessApi(T0)
        self.cluster.create(job(NAME))
        self.nodes = {f"gpu-{i}": node(f"gpu-{i}") for i in range(3)} | {"cpu-0": node("cpu-0", "on-demand")}
        self.writes: list[Write] = []
        self.conflicts = 0
        #: the writes the server refused in the last pass (recorded for the status and Events)
        self.refusals: list[Refusal] = []

    def observe(self) -> Observed:
        return self.cluster.observe(NAME, self.nodes)

    def apply_both(self, writes: list[Write], meanwhile: Meanwhile | None = None) -> bool:
        """The writes both ways from what is observed now; whether they were refused (alike on both sides)."""
        observed = self.observe()
        memory = Interpreter(copy.deepcopy(observed))
        if meanwhile is not None:
            meanwhile(self.cluster, memory)
        refused_in_memory = refused_on_server = False
        try:
            for write in writes:
                memory.apply(write, self.cluster.now)
        except Conflict:
            refused_in_memory = True
        self.refusals = []
        try:
            self.refusals = Applier(self.cluster).apply(NAMESPACE, writes).refused
        except Conflict:
            refused_on_server = True
        assert refused_in_memory == refused_on_server, writes
        assert picture(memory.observed) == picture(self.observe()), writes
        self.writes.extend(writes)
        return refused_on_server

    def step(self, now: datetime, meanwhile: Meanwhile | None = None) -> Plan:
        """One operator pass at ``now``: plan, write (both ways), write the status unless refused."""
        self.cluster.now = now
        self.cluster.finish_deletions()
        the_job = self.cluster.job(NAME)
        result = plan(the_job, self.observe(), now)
        if self.apply_both(result.writes, meanwhile):
            self.conflicts += 1
            return result
        old = the_job.get("status") or {}
        if result.status != old:
            version = the_job["metadata"]["resourceVersion"]
            Applier(self.cluster).write_status(NAMESPACE, NAME, version, merge_patch_between(old, result.status))
        return result

    def settle(self, now: datetime) -> None:
        for _ in range(6):
            if not self.step(now).writes:
                return
        raise AssertionError("no fixed point")

    def workers(self) -> list[Obj]:
        return [
            p
            for p in self.observe().pods
            if labels_of(p).get(LABEL_ROLE) == Role.WORKER and not meta(p).get("deletionTimestamp")
        ]

    def run_pending(self) -> None:
        """The scheduler and kubelets: every unbound worker runs on a free GPU node."""
        busy = {p["spec"].get("nodeName") for p in self.observe().pods}
        free = [n for n in self.nodes if n.startswith("gpu") and n not in busy]
        for pod in self.workers():
            if not pod["spec"].get("nodeName"):
                self.cluster.run(name_of(pod), free.pop(0))

    def chief(self) -> str:
        lease = self.observe().lease
        assert lease is not None
        return str(lease["spec"]["holderIdentity"])

    def start(self) -> None:
        """Children, workers running, a chief elected."""
        self.settle(T0)
        ps_pod = f"{ps_name(NAME, 0)}-abc"
        self.cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": ps_pod, "labels": {LABEL_JOB: NAME, LABEL_ROLE: Role.PS, LABEL_PS_INDEX: "0"}},
                "spec": {"containers": [{"name": "ps", "image": "ps"}]},
            }
        )
        self.cluster.run(ps_pod, "cpu-0")
        self.run_pending()
        self.settle(T0 + S)


def renew(cluster: InProcessApi, memory: Interpreter) -> None:
    """The chief renews its Lease, on both sides."""
    renewal = UpdateLease(LEASE, renew_time=format_micro_time(cluster.now))
    cluster.patch("Lease", LEASE, {"spec": renewal.spec_fields()})
    memory.apply(renewal, cluster.now)


def test_a_jobs_life_leaves_the_same_cluster() -> None:
    s = Scenario()
    s.start()
    chief = s.chief()
    assert [name_of(p) for p in s.workers() if labels_of(p).get(LABEL_CHIEF)] == [chief]

    # A worker is preempted: counted, deleted (without grace: it has ended), released, replaced.
    lost = next(name_of(p) for p in s.workers() if name_of(p) != chief)
    s.cluster.now = T0 + 10 * S
    s.cluster.end(lost, 143, "Terminated")
    s.settle(T0 + 10 * S)
    assert lost not in {name_of(p) for p in s.observe().pods}
    s.run_pending()
    s.settle(T0 + 11 * S)

    # The chief's node stops answering: a new chief is elected, but the old one renews the Lease between
    # the pass's look and its writes, so the election is refused both ways; the next pass elects anew.
    chief_node = next(p["spec"]["nodeName"] for p in s.workers() if name_of(p) == chief)
    s.nodes[chief_node] = node(chief_node, ready=False, now=T0 + 20 * S, ready_since=T0 + 20 * S)
    s.step(T0 + 60 * S, meanwhile=renew)
    assert s.conflicts == 1
    s.settle(T0 + 61 * S)
    assert s.chief() != chief
    assert chief not in {name_of(p) for p in s.observe().pods}  # force-deleted, then released

    # The node is back; its replacement runs. Scaled down: a running worker deleted on purpose, with its
    # grace period, held by the finalizer until released.
    s.nodes[chief_node] = node(chief_node)
    s.run_pending()
    s.settle(T0 + 62 * S)
    s.cluster.patch(KIND, NAME, {"spec": {"workers": {"replicas": 2}}})
    s.settle(T0 + 70 * S)
    assert len(s.workers()) == 2

    # The parameter servers' resources change: their Deployment is patched.
    s.cluster.patch(KIND, NAME, {"spec": {"parameterServers": {"resources": {"requests": {"cpu": "2"}}}}})
    s.settle(T0 + 80 * S)

    deletes = [w for w in s.writes if isinstance(w, DeleteChild)]
    assert any(d.force for d in deletes)
    assert any(d.mark_deliberate for d in deletes)
    assert any(isinstance(w, UpdateLease) and w.resource_version for w in s.writes)
    assert {type(w) for w in s.writes} == {
        CreateChild,
        ReplaceChild,
        DeleteChild,
        RemoveFinalizer,
        LabelPod,
        UpdateLease,
    }


def _lease_create(s: Scenario, holder: str | None) -> list[Write]:
    manifest = lease_manifest(JobRef.of(s.cluster.job(NAME)), 30, 3, 3)
    if holder:
        manifest["spec"]["holderIdentity"] = holder
    return [CreateChild(manifest)]


def _lease_update(s: Scenario, resource_version: str | None) -> list[Write]:
    lease = s.observe().lease
    assert lease is not None
    progress = LeaseProgress(global_step=7).to_annotation()
    version = meta(lease)["resourceVersion"] if resource_version == "current" else resource_version
    return [
        UpdateLease(
            LEASE, resource_version=version, holder="someone", epoch=9, annotations={ANNOTATION_PROGRESS: progress}
        )
    ]


def _ps_deployment(s: Scenario, name: str) -> Obj:
    deployment = copy.deepcopy(s.observe().children[("Deployment", ps_name(NAME, 0))])
    deployment["metadata"] = {"name": name, "labels": labels_of(deployment), "annotations": {"a": "b"}}
    deployment["spec"]["template"]["spec"]["containers"][0]["image"] = "other"
    return deployment


def _worker(s: Scenario, chief: bool = False) -> str:
    return next(name_of(p) for p in s.workers() if bool(labels_of(p).get(LABEL_CHIEF)) == chief)


def _hold(s: Scenario, pod: str) -> str:
    """Another controller's finalizer on the pod too."""
    s.cluster.patch("Pod", pod, {"metadata": {"finalizers": [FINALIZER, "example.com/keep"]}})
    return pod


def _election_on_a_gone_lease(s: Scenario) -> list[Write]:
    writes = _lease_update(s, "current")
    s.cluster.request("DELETE", path("Lease", NAMESPACE, LEASE))
    return writes


def _unbound_worker(s: Scenario) -> Obj:
    pod = copy.deepcopy(s.workers()[0])
    pod["metadata"] = {"name": "mnist-worker-2-9", "labels": labels_of(pod), "finalizers": [FINALIZER]}
    pod["spec"].pop("nodeName")
    pod.pop("status")
    return pod


@dataclass(frozen=True)
class Case:
    writes: Callable[[Scenario], list[Write]]
    refused: bool = False
    #: What the writes did, on the picture both sides agree on (the request bodies are shared, so their
    #: meaning is checked here, not only their agreement).
    then: Callable[[dict[str, Any]], bool] = lambda picture: True


def _pod(picture: dict[str, Any], name: str = "mnist-worker-1-1") -> dict[str, Any]:
    pod: dict[str, Any] = picture["pods"][name]
    return pod


NOW = format_time(T0 + 5 * S)
CASES: dict[str, Case] = {
    "an election in a create that finds the Lease": Case(lambda s: _lease_create(s, _worker(s)), refused=True),
    "a holderless Lease create that finds one": Case(
        lambda s: _lease_create(s, None), then=lambda p: p["lease"][0]["holderIdentity"] == "mnist-worker-0-1"
    ),
    "a Lease update under its current resourceVersion": Case(
        lambda s: _lease_update(s, "current"),
        then=lambda p: (
            p["lease"][0]["holderIdentity"] == "someone"
            and p["lease"][0]["leaseTransitions"] == 9
            and LeaseProgress.from_annotation(p["lease"][1][ANNOTATION_PROGRESS]) == LeaseProgress(7)
        ),
    ),
    "a Lease update under a stale resourceVersion": Case(lambda s: _lease_update(s, "1"), refused=True),
    "a Lease update without precondition": Case(
        lambda s: _lease_update(s, None), then=lambda p: p["lease"][0]["holderIdentity"] == "someone"
    ),
    "an election on a Lease that is gone": Case(_election_on_a_gone_lease, refused=True),
    "labels set and removed": Case(
        lambda s: [LabelPod(_worker(s, chief=True), {LABEL_CHIEF: None, "x": "y"})],
        then=lambda p: (
            LABEL_CHIEF not in _pod(p, "mnist-worker-0-1")["labels"]
            and _pod(p, "mnist-worker-0-1")["labels"]["x"] == "y"
        ),
    ),
    "a graceful delete, then a forced one": Case(
        lambda s: [DeleteChild("Pod", _worker(s)), DeleteChild("Pod", _worker(s), force=True)],
        then=lambda p: _pod(p)["deletion"] == (NOW, 0),
    ),
    "a forced delete, then a graceful one": Case(
        lambda s: [DeleteChild("Pod", _worker(s), force=True), DeleteChild("Pod", _worker(s))],
        then=lambda p: _pod(p)["deletion"] == (NOW, 0),
    ),
    "a graceful delete of a running pod": Case(
        lambda s: [DeleteChild("Pod", _worker(s), mark_deliberate=True)],
        then=lambda p: (
            _pod(p)["deletion"][1] > 0
            and _pod(p)["annotations"] == {ANNOTATION_DELETED: "true"}
            and _pod(p)["finalizers"] == [FINALIZER]
        ),
    ),
    "a delete on purpose, released": Case(
        lambda s: [DeleteChild("Pod", _worker(s), mark_deliberate=True), RemoveFinalizer(_worker(s))],
        then=lambda p: "mnist-worker-1-1" not in p["pods"],
    ),
    "only ttj's finalizer is removed": Case(
        lambda s: [DeleteChild("Pod", p := _hold(s, _worker(s))), RemoveFinalizer(p), RemoveFinalizer(p)],
        then=lambda p: _pod(p)["finalizers"] == ["example.com/keep"],
    ),
    "an unbound pod is deleted without grace": Case(
        lambda s: [CreateChild(_unbound_worker(s)), DeleteChild("Pod", "mnist-worker-2-9")],
        then=lambda p: _pod(p, "mnist-worker-2-9")["deletion"] == (NOW, 0),
    ),
    "a Deployment patched with a new template": Case(
        lambda s: [ReplaceChild(_ps_deployment(s, ps_name(NAME, 0)))],
        then=lambda p: p["children"][f"Deployment/{ps_name(NAME, 0)}"][2]["spec"]["containers"][0]["image"] == "other",
    ),
    "writes to objects that are not there": Case(
        lambda s: [
            DeleteChild("Pod", "nope"),
            LabelPod("nope", {"x": "y"}),
            RemoveFinalizer("nope"),
            ReplaceChild(_ps_deployment(s, ps_name(NAME, 9))),
            DeleteChild("Deployment", ps_name(NAME, 9)),
        ],
    ),
    "a delete on purpose of a name that now holds a successor": Case(
        lambda s: [DeleteChild("Pod", _worker(s), mark_deliberate=True, uid="the-uid-of-a-predecessor")],
        then=lambda p: _pod(p)["deletion"] == (None, None) and _pod(p)["annotations"] == {},
    ),
    "a create of a name that exists": Case(
        lambda s: [CreateChild(_ps_deployment(s, ps_name(NAME, 0)))],
        then=lambda p: p["children"][f"Deployment/{ps_name(NAME, 0)}"][2]["spec"]["containers"][0]["image"] != "other",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_each_write(case: str) -> None:
    s = Scenario()
    s.start()
    s.cluster.now = T0 + 5 * S
    writes = CASES[case].writes(s)
    assert s.apply_both(writes) == CASES[case].refused
    assert s.refusals == []  # each answer is one the writes expect, never a failure to report
    assert CASES[case].then(picture(s.observe()))
