"""A job's children as a pass observes them: from kopf's indexes (fed by the watches), less the objects the index
audit found deleted while a watch was away."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import kopf

from ttj.controller.memory import JobKey
from ttj.planner import Observed
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
