"""A job's children as a pass observes them: from kopf's indexes (fed by the watches), less the objects the index
audit found deleted while a watch was away, plus those our own passes created that the watches have not shown
yet."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import kopf

from ttj.controller.memory import JobKey
from ttj.planner import Observed
from ttj.planner.observed import name_of
from ttj_contract import lease_name


@dataclass(frozen=True)
class JobIndexes:
    """kopf's indexes a pass observes a job through."""

    pods: kopf.Index[JobKey, Any]
    leases: kopf.Index[JobKey, Any]
    #: One index per kind of :data:`CHILD_RESOURCES`.
    children: Sequence[kopf.Index[JobKey, Any]]
    nodes: kopf.Index[str, Any]

    def all_nodes(self) -> list[dict[str, Any]]:
        return [node for _name, store in self.nodes.items() for node in store]


def observe(key: JobKey, indexes: JobIndexes, *, gone: frozenset[str] = frozenset()) -> Observed:
    """The job's children from the indexes, without those the index audit found deleted."""

    def present(obj: dict[str, Any]) -> bool:
        return not gone or (obj.get("metadata") or {}).get("uid") not in gone

    observed = Observed()
    for _kind, _name, pod in indexes.pods.get(key, []):
        if not present(pod):
            continue
        observed.pods.append(pod)
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name and node_name not in observed.nodes:
            for node in indexes.nodes.get(node_name, []):
                if present(node):
                    observed.nodes[node_name] = node
    chief_lease = lease_name(key[1])
    for _kind, name, lease in indexes.leases.get(key, []):
        if name == chief_lease and present(lease):
            observed.lease = lease
    for index in indexes.children:
        for kind, name, child in index.get(key, []):
            if present(child):
                observed.children[(kind, name)] = child
    return observed


def add_created(observed: Observed, created: dict[tuple[str, str], dict[str, Any]]) -> None:
    """Add to ``observed`` the children in ``created`` (kind, name → the API's answer to our create) that the
    indexes do not show yet, and drop from ``created`` those they show. A pod is dropped too once the index holds
    a newer version of another of the job's pods: the watch has passed its creation, so a pod not shown was
    deleted meanwhile (at worst, one create answered 409)."""
    shown_pods = {name_of(pod) for pod in observed.pods}
    newest_pod = max((_version(pod) for pod in observed.pods), default=0)
    for (kind, name), obj in list(created.items()):
        if kind == "Pod":
            seen = name in shown_pods or newest_pod > _version(obj)
        elif kind == "Lease":
            seen = observed.lease is not None
        else:
            seen = (kind, name) in observed.children
        if seen:
            del created[(kind, name)]
        elif kind == "Pod":
            observed.pods.append(obj)
        elif kind == "Lease":
            observed.lease = obj
        else:
            observed.children[(kind, name)] = obj


def _version(obj: dict[str, Any]) -> int:
    """The object's resourceVersion as a number (etcd's revision; 0 when it is not one)."""
    version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    return int(version) if version.isdigit() else 0
