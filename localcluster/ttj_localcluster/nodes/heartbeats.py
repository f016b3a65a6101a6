"""Node heartbeats: each live node's Lease in ``kube-node-lease``, renewed as the kubelet does."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime

from ttj.kubeapi import KubeClient
from ttj_contract import format_micro_time

from .registry import NodeRegistry

log = logging.getLogger(__name__)

NODE_LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_S = 40
LEASE_RENEW_S = 10.0
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASE_NAMESPACE}/leases"


class NodeLeases:
    """Writes node Leases; ``start()`` renews those of the live nodes every ``renew_s`` seconds."""

    def __init__(self, client: KubeClient, registry: NodeRegistry, stop: threading.Event, renew_s: float) -> None:
        self.client = client
        self.registry = registry
        self.stop = stop
        self.renew_s = renew_s
        self._thread = threading.Thread(target=self._loop, name="node-heartbeats", daemon=True)

    def ensure_namespace(self) -> None:
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NODE_LEASE_NAMESPACE}}
        self.client.create("/api/v1/namespaces", namespace)

    def renew(self, node: str) -> None:
        """Renew the node's Lease, creating it (owned by the Node) the first time."""
        now = format_micro_time(datetime.now(UTC))
        if self.client.merge_patch(f"{LEASES}/{node}", {"spec": {"renewTime": now}}) is not None:
            return
        node_obj = self.client.get(f"/api/v1/nodes/{node}")
        owner = []
        if node_obj is not None:
            owner = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_obj["metadata"]["uid"]}]
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": node, "namespace": NODE_LEASE_NAMESPACE, "ownerReferences": owner},
            "spec": {"holderIdentity": node, "leaseDurationSeconds": LEASE_DURATION_S, "renewTime": now},
        }
        self.client.create(LEASES, lease)

    def delete(self, node: str) -> None:
        self.client.delete(f"{LEASES}/{node}")

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self.stop.wait(self.renew_s):
            for node in self.registry.live_nodes():
                try:
                    self.renew(node)
                except Exception as exc:
                    log.debug("lease renewal for %s failed: %s", node, exc)
