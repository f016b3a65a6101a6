"""Simulated GKE node pools: the add-on that puts the VMs, their kubelets and their preemptions together.

The parts, each with one job:

- :mod:`.registry`: which nodes there are, in which pool and :class:`~.registry.NodeState`;
- :mod:`.lifecycle` and :mod:`.heartbeats`: their Node objects and Leases;
- :mod:`.kubelet` (with :mod:`.containers`, :mod:`.restarts`, :mod:`.pod_networking`, :mod:`.podstate`):
  the pods bound to them, run as processes or simulated;
- :mod:`.preemption`: GKE's graceful node shutdown, asked for on demand (Python, the HTTP control, the
  CLI) or by :mod:`.preemption_sources` (lifetimes drawn from the ICAC'19 measurements, scripted times);
- :mod:`.control`: the HTTP endpoint of the preemption control and of every node's kubelet (logs).
"""

from __future__ import annotations

import logging
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ttj.kubeapi import JSON, KubeClient

from .control import ControlServer
from .heartbeats import LEASE_RENEW_S, NodeLeases
from .kubelet import Kubelet
from .lifecycle import NodeLifecycle
from .network import PodNetwork
from .pod_networking import PodNetworking
from .podnet import PodNetworkNamespaces
from .pools import NodePool
from .preemption import PreemptionRecord, Preemptions
from .preemption_sources import LifetimePreemptions, ScriptedPreemptions
from .registry import NodeRegistry
from .timers import Timers

log = logging.getLogger(__name__)


@dataclass
class _Started:
    """The parts that talk to the API, made by ``start()``."""

    client: KubeClient
    leases: NodeLeases
    lifecycle: NodeLifecycle
    kubelet: Kubelet
    preemptions: Preemptions
    control: ControlServer


class NodeFleet:
    """The add-on ``ttj_localcluster.nodes.fleet.NodeFleet``: node pools, kubelets, pod runtime and preemptions."""

    name = "node-fleet"

    def __init__(
        self,
        pools: Sequence[NodePool],
        *,
        run_pods: bool = True,
        state_dir: str | Path | None = None,
        lease_renew_s: float = LEASE_RENEW_S,
        pod_network: bool = True,
    ) -> None:
        self.pools = {p.name: p for p in pools}
        self.run_pods = run_pods
        self.state_dir = Path(state_dir) if state_dir else Path(tempfile.mkdtemp(prefix="ttj-local-"))
        self.lease_renew_s = lease_renew_s
        self.registry = NodeRegistry(pools)
        #: per-pod network namespaces when ``pod_network`` and possible, else the host's network
        self.networking = PodNetworking(self.state_dir, run_pods=run_pods, namespaces=pod_network)
        self.preemptions: list[PreemptionRecord] = []
        self.kubeconfig: str | None = None
        self._stop = threading.Event()
        self._timers = Timers(self._stop)
        self._started: _Started | None = None

    @property
    def network(self) -> PodNetwork:
        return self.networking.network

    @property
    def podnet(self) -> PodNetworkNamespaces | None:
        return self.networking.podnet

    @property
    def client(self) -> KubeClient | None:
        return self._started.client if self._started is not None else None

    @property
    def control(self) -> ControlServer | None:
        return self._started.control if self._started is not None else None

    def _parts(self) -> _Started:
        if self._started is None:
            raise RuntimeError("the node fleet is not started")
        return self._started

    # lifecycle ---------------------------------------------------------------------------------
    def start(self, kubeconfig_path: str) -> None:
        self.kubeconfig = kubeconfig_path
        client = KubeClient.from_kubeconfig(kubeconfig_path)
        pod_kubeconfig = self.networking.setup(kubeconfig_path)
        leases = NodeLeases(client, self.registry, self._stop, self.lease_renew_s)
        leases.ensure_namespace()
        kubelet = Kubelet(
            client,
            self.registry,
            self.networking,
            self._timers,
            self._stop,
            run_pods=self.run_pods,
            state_dir=self.state_dir,
            pod_kubeconfig=pod_kubeconfig,
        )
        # The kubelet endpoint of every node (logs) and the preemption control: nodes publish its port.
        control = ControlServer(self)
        lifecycle = NodeLifecycle(client, self.registry, leases, control.port)
        preemptions = Preemptions(
            client, self.registry, lifecycle, kubelet, timers=self._timers, stop=self._stop, records=self.preemptions
        )
        self._started = _Started(client, leases, lifecycle, kubelet, preemptions, control)
        control.start(kubeconfig_path)
        lifetimes = LifetimePreemptions(list(self.pools.values()), self._timers, self._stop, self._preempt)
        lifecycle.listeners.append(lifetimes.node_created)
        for pool in self.pools.values():
            lifecycle.restore(pool.name, pool.nodes)
        ScriptedPreemptions(self.registry, self._timers, self._stop, self._preempt).start()
        kubelet.start()
        leases.start()

    def stop(self) -> None:
        """Stops every pod process (SIGTERM, then SIGKILL after 5 s) and the fleet's threads."""
        self._stop.set()
        started = self._started
        if started is not None:
            started.control.stop()
        self._timers.cancel_all()
        if started is not None:
            started.kubelet.stop_pods()
            started.client.close()  # ends the watches
            started.kubelet.join(2)
        self.networking.teardown()

    # nodes -------------------------------------------------------------------------------------
    def nodes_of(self, pool: str) -> list[str]:
        """The pool's live nodes, oldest first."""
        self.registry.pool(pool)
        return self.registry.live_nodes(pool)

    def restore_pool(self, pool: str, nodes: int | None = None) -> list[str]:
        """Bring a pool back to its size (or add ``nodes`` VMs) now; returns the new node names."""
        self.registry.pool(pool)
        return self._parts().lifecycle.restore(pool, nodes)

    def partition_api(self, pod_ips: list[str]) -> int:
        """Cuts these pods off the API server (empty: heal); the count of connections refused so far."""
        podnet = self.networking.podnet
        if podnet is None:
            raise RuntimeError("cutting pods off the API needs pod network namespaces (root)")
        return podnet.partition(pod_ips)

    def lose_node(self, node: str) -> None:
        """The node's VM vanishes without a shutdown (hardware failure, network partition).

        Its kubelet goes silent: no more heartbeats, pod statuses or finished deletions; its processes
        die with it. As the node lifecycle controller does once heartbeats are overdue, the Node turns
        ``Ready=Unknown`` (reason ``NodeStatusUnknown``) with the ``node.kubernetes.io/unreachable``
        taints. Its pods keep the status the API last had until someone force-deletes them; the Node
        stays until deleted (GKE's instance group would recreate the VM; here ``restore_pool`` adds one).
        """
        parts = self._parts()
        self.registry.mark_unreachable(node)
        parts.kubelet.drop_node(node)
        parts.lifecycle.mark_unreachable(node)
        log.info("node %s lost: its kubelet stopped", node)

    # preemption ----------------------------------------------------------------------------------
    def preempt_node(self, node: str, *, cause: str = "injected", wait: bool = False) -> PreemptionRecord:
        """Preempt one node as GKE does; returns at once (``wait=True``: when the node is gone)."""
        return self._parts().preemptions.preempt_node(node, cause=cause, wait=wait)

    def preempt_pod(self, namespace: str, name: str, *, wait: bool = False) -> PreemptionRecord:
        """Preempt the node that runs this pod."""
        return self._parts().preemptions.preempt_pod(namespace, name, wait=wait)

    def _preempt(self, node: str, cause: str) -> PreemptionRecord:
        return self.preempt_node(node, cause=cause)

    def describe(self) -> JSON:
        return {
            "pools": self.registry.describe(),
            "preemptions": [r.to_json() for r in list(self.preemptions)],
            "runPods": self.run_pods,
            "stateDir": str(self.state_dir),
        }

    # logs ----------------------------------------------------------------------------------------
    def log_file(self, namespace: str, name: str, container: str | None = None, previous: bool = False) -> Path | None:
        """Where a running pod's container log is (for a pods/log handler); None if unknown here."""
        if self._started is None:
            return None
        return self._started.kubelet.log_file(namespace, name, container, previous)

    def log_is_live(self, namespace: str, name: str, container: str | None) -> bool:
        """Whether the container may still write to its log (for ``follow``)."""
        return self._started is not None and self._started.kubelet.log_is_live(namespace, name, container)
