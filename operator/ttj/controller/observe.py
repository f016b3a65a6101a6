"""A job's children as a pass observes them: from the indexes the watches feed (:mod:`ttj.controller.watches`),
plus those our own passes created that the watches have not shown yet."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ttj.controller.memory import JobKey
from ttj.planner import Observed, PlannerConfig
from ttj.planner.observed import name_of
from ttj_contract import lease_name

#: A job's children of one kind: the job's key → each as (kind, name, what the planner reads of it).
ChildIndex = Mapping[JobKey, Iterable[tuple[str, str, dict[str, Any]]]]


@dataclass(frozen=True)
class JobIndexes:
    """The indexes a pass observes a job through."""

    pods: ChildIndex
    leases: ChildIndex
    #: One index per kind of :data:`ttj.controller.handlers.CHILD_RESOURCES`.
    children: Sequence[ChildIndex]
    #: node name → [what the planner reads of it]
    nodes: Mapping[str, Iterable[dict[str, Any]]]

    def all_nodes(self) -> list[dict[str, Any]]:
        return [node for _name, store in self.nodes.items() for node in store]


def observe(key: JobKey, indexes: JobIndexes) -> Observed:
    """The job's children from the indexes, and the nodes its pods run on."""
    observed = Observed()
    for _kind, _name, pod in indexes.pods.get(key, []):
        observed.pods.append(pod)
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name and node_name not in observed.nodes:
            for node in indexes.nodes.get(node_name, []):
                observed.nodes[node_name] = node
    chief_lease = lease_name(key[1])
    for _kind, name, lease in indexes.leases.get(key, []):
        if name == chief_lease:
            observed.lease = lease
    for index in indexes.children:
        for kind, name, child in index.get(key, []):
            observed.children[(kind, name)] = child
    return observed


def add_own_writes(observed: Observed, written: dict[tuple[str, str], dict[str, Any]]) -> None:
    """Show in ``observed`` the children as our own writes left them (``written``: kind, name → the API's answer)
    where the indexes show them older or not at all, and drop from ``written`` what the indexes have caught up
    with. A pod the index does not show is dropped too once it holds a newer version of another of the job's
    pods: the watch has passed our write, so that pod was deleted meanwhile (at worst, one create answered 409)."""
    pods = {name_of(pod): at for at, pod in enumerate(observed.pods)}
    newest_pod = max((_version(pod) for pod in observed.pods), default=0)
    for (kind, name), obj in list(written.items()):
        ours = _version(obj)
        if kind == "Pod":
            at = pods.get(name)
            if at is None and newest_pod <= ours:
                observed.pods.append(obj)
            elif at is not None and _version(observed.pods[at]) < ours:
                observed.pods[at] = obj
            else:
                del written[(kind, name)]
        elif kind == "Lease":
            if observed.lease is None:
                observed.lease = obj
            else:
                del written[(kind, name)]
        elif (kind, name) not in observed.children:
            observed.children[(kind, name)] = obj
        else:
            del written[(kind, name)]


def _version(obj: dict[str, Any]) -> int:
    """The object's resourceVersion as a number (etcd's revision; 0 when it is not one)."""
    version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    return int(version) if version.isdigit() else 0


@dataclass(frozen=True)
class PassInputs:
    """What a pass plans on, by version: the job's resourceVersion, each observed child's and node's (kind,
    name, resourceVersion), the placement verdict, and the planner's configuration (the same object while
    unchanged: the operator's, the price table re-read only when its file changes). Two passes with equal
    inputs plan the same but for the clock."""

    job: str
    objects: frozenset[tuple[str, str, str]]
    placement: Any
    config: PlannerConfig
    prices: Any

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, PassInputs)
            and self.job == other.job
            and self.objects == other.objects
            and self.placement == other.placement
            and self.config is other.config
            and self.prices is other.prices
        )

    def __hash__(self) -> int:
        return hash((self.job, self.objects))


def inputs_of(job: Mapping[str, Any], observed: Observed, config: PlannerConfig, prices: Any) -> PassInputs | None:
    """The inputs of a pass on ``job`` and ``observed`` under ``config`` (the operator's, before the price
    table in force, ``prices``, replaces its own); None when an object has no resourceVersion to tell it by."""
    objects = [("Pod", name_of(pod), _rv(pod)) for pod in observed.pods]
    objects += [("Node", name, _rv(node)) for name, node in observed.nodes.items()]
    objects += [(kind, name, _rv(child)) for (kind, name), child in observed.children.items()]
    if observed.lease is not None:
        objects.append(("Lease", name_of(observed.lease), _rv(observed.lease)))
    version = _rv(job)
    if not version or any(not rv for _kind, _name, rv in objects):
        return None
    return PassInputs(version, frozenset(objects), observed.placement, config, prices)


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")
