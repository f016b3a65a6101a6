"""The VMs of the node pools as Node objects: registered, shut down, lost, deleted.

What the API sees of a node's life (the kubelet's registration, GKE's shutdown taint and NotReady, the
node lifecycle controller's ``Ready=Unknown`` and unreachable taints); :mod:`.registry` keeps the state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ttj.kubeapi import JSON, KubeClient

from .fleet_ownership import FLEET_LABEL
from .heartbeats import NodeLeases
from .kube import retrying
from .pools import IMPENDING_TERMINATION_TAINT, NODE_INTERNAL_IP, NodePool, node_object, now_rfc3339, ready_condition
from .registry import NodeRegistry
from .scheduler import replace_condition

log = logging.getLogger(__name__)

UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"

#: called with (pool, node name) once a new node is registered
NodeListener = Callable[[NodePool, str], None]


class NodeLifecycle:
    """Writes the Node objects of the fleet's VMs; ``kubelet_port`` is where every node's kubelet answers,
    ``fleet`` the fleet's id (the Nodes' ``ttj.local/fleet`` label)."""

    def __init__(
        self, client: KubeClient, registry: NodeRegistry, leases: NodeLeases, kubelet_port: int, fleet: str
    ) -> None:
        self.client = client
        self.registry = registry
        self.leases = leases
        self.kubelet_port = kubelet_port
        self.fleet = fleet
        self.listeners: list[NodeListener] = []

    def create(self, pool_name: str) -> str:
        """A new VM in the pool: its Node (labelled and tainted as GKE does), status and first Lease."""
        pool = self.registry.pool(pool_name)
        name = self.registry.reserve(pool_name)
        node = node_object(pool, name, NODE_INTERNAL_IP)
        node["metadata"]["labels"][FLEET_LABEL] = self.fleet
        status = node.pop("status")
        status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": self.kubelet_port}}
        client = self.client
        retrying(lambda: client.create("/api/v1/nodes", node))
        retrying(lambda: client.merge_patch(f"/api/v1/nodes/{name}/status", {"status": status}))
        self.leases.renew(name)
        self.registry.mark_ready(name)
        for listener in self.listeners:
            listener(pool, name)
        return name

    def restore(self, pool: str, count: int | None = None) -> list[str]:
        """``count`` new VMs, or as many as the pool lacks to be at its size; their names."""
        wanted = count if count is not None else self.registry.missing(pool)
        return [self.create(pool) for _ in range(wanted)]

    def _current(self, node: str) -> JSON:
        client = self.client
        return retrying(lambda: client.get(f"/api/v1/nodes/{node}")) or {}

    def _patch(self, node: str, patch: JSON, subresource: str = "") -> None:
        client = self.client
        path = f"/api/v1/nodes/{node}{subresource}"
        retrying(lambda: client.merge_patch(path, patch))

    def mark_shutting_down(self, node: str) -> None:
        """GKE's termination notice: the impending-termination taint, and NotReady."""
        current = self._current(node)
        taints = [t for t in _taints(current) if t.get("key") != IMPENDING_TERMINATION_TAINT["key"]]
        self._patch(node, {"spec": {"taints": [*taints, dict(IMPENDING_TERMINATION_TAINT)]}})
        not_ready = ready_condition(False, "KubeletNotReady", "node is shutting down", now_rfc3339())
        self._patch(node, {"status": {"conditions": replace_condition(_conditions(current), not_ready)}}, "/status")

    def add_taint(self, node: str, taint: JSON) -> None:
        """One taint more (in place of one of the same key): e.g. the cluster autoscaler's before a drain."""
        current = self._current(node)
        taints = [t for t in _taints(current) if t.get("key") != taint.get("key")]
        self._patch(node, {"spec": {"taints": [*taints, taint]}})

    def mark_unreachable(self, node: str) -> None:
        """What the node lifecycle controller writes once heartbeats are overdue."""
        current = self._current(node)
        now = now_rfc3339()
        unknown = {
            "type": "Ready",
            "status": "Unknown",
            "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status.",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        self._patch(node, {"status": {"conditions": replace_condition(_conditions(current), unknown)}}, "/status")
        taints = [t for t in _taints(current) if t.get("key") != UNREACHABLE_TAINT]
        taints += [
            {"key": UNREACHABLE_TAINT, "effect": "NoSchedule"},
            {"key": UNREACHABLE_TAINT, "effect": "NoExecute", "timeAdded": now},
        ]
        self._patch(node, {"spec": {"taints": taints}})

    def delete(self, node: str) -> None:
        """The VM is gone: its Node and its Lease."""
        client = self.client
        retrying(lambda: client.delete(f"/api/v1/nodes/{node}"))
        retrying(lambda: self.leases.delete(node))


def _taints(node: JSON) -> list[JSON]:
    return list((node.get("spec") or {}).get("taints") or [])


def _conditions(node: JSON) -> list[JSON]:
    return list((node.get("status") or {}).get("conditions") or [])
