"""Simulated GKE node pools: the add-on that puts the VMs, their kubelets and their preemptions together.

The parts, each with one job:

- :mod:`.registry`: which nodes there are, in which pool and :class:`~.registry.NodeState`;
- :mod:`.lifecycle` and :mod:`.heartbeats`: their Node objects and Leases;
- :mod:`.kubelet` (with :mod:`.containers`, :mod:`.restarts`, :mod:`.pod_networking`, :mod:`.podstate`):
  the pods bound to them, run as processes or simulated;
- :mod:`.preemption`: GKE's graceful node shutdown, asked for on demand (Python, the HTTP control, the
  CLI) or by :mod:`.preemption_sources` (lifetimes drawn from the ICAC'19 measurements, scripted times);
- :mod:`.autoscaler`: what GKE's cluster autoscaler says on pods pending for a stocked-out pool
  (:meth:`NodeFleet.stock_out`, :meth:`NodeFleet.restock`, a pool's ``stock-out-window``, or the spot
  availability trace it follows, :mod:`.trace_stock`);
- :mod:`.migration`: the autoscaler's drain of a node a compute class's active migration leaves
  (:meth:`NodeFleet.migrate_node`);
- :mod:`.control`: the HTTP endpoint of the preemption control and of every node's kubelet (logs);
- :mod:`.ownership`: the fleet's claim on the cluster (the control ConfigMap, its Nodes' label), and its
  leaving: a fleet that stops deletes its Nodes and the ConfigMap.
"""

from __future__ import annotations

import functools
import logging
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ttj.kubeapi import JSON, KubeClient
from ttj.preemption.traces import load_trace

from .autoscaler import BACKOFF_S, SCAN_S, ClusterAutoscaler, PoolView
from .control import ControlServer
from .fleet_ownership import FleetIdentity, PreviousOwner, claim_control, delete_fleet_nodes, release_control
from .heartbeats import LEASE_RENEW_S, NodeLeases
from .kubelet import Kubelet
from .lifecycle import NodeLifecycle
from .loopback_network import PodNetwork
from .migration import MigrationRecord, Migrations
from .netns import PodNetworkNamespaces
from .pod_networking import PodNetworking
from .pools import NodePool
from .preemption import PreemptionRecord, Preemptions
from .preemption_sources import LifetimePreemptions, ScriptedPreemptions
from .registry import NodeRegistry, StockOut
from .timers import Timers
from .trace_stock import TraceStock

log = logging.getLogger(__name__)


@dataclass
class _Started:
    """The parts that talk to the API, made by ``start()``."""

    client: KubeClient
    leases: NodeLeases
    lifecycle: NodeLifecycle
    kubelet: Kubelet
    preemptions: Preemptions
    migrations: Migrations
    control: ControlServer
    autoscaler: ClusterAutoscaler


class NodeFleet:
    """The add-on ``ttj_localcluster.nodes.fleet.NodeFleet``: node pools, kubelets, pod runtime and preemptions.

    ``announce`` gets what a person starting the fleet should read (a takeover from a dead fleet); by default
    it is logged as a warning.
    """

    name = "node-fleet"

    def __init__(
        self,
        pools: Sequence[NodePool],
        *,
        run_pods: bool = True,
        state_dir: str | Path | None = None,
        lease_renew_s: float = LEASE_RENEW_S,
        pod_network: bool = True,
        announce: Callable[[str], None] | None = None,
        autoscaler_scan_s: float = SCAN_S,
        autoscaler_backoff_s: float = BACKOFF_S,
        program_path: Sequence[str | Path] = (),
    ) -> None:
        self.pools = {p.name: p for p in pools}
        #: directories of the user's code, first on every container's PYTHONPATH (as an image's ENV would be)
        self.program_path = tuple(str(Path(d).resolve()) for d in program_path)
        self.autoscaler_scan_s = autoscaler_scan_s
        self.autoscaler_backoff_s = autoscaler_backoff_s
        self.identity = FleetIdentity.new()
        self.announce = announce or log.warning
        self.run_pods = run_pods
        self.state_dir = Path(state_dir) if state_dir else Path(tempfile.mkdtemp(prefix="ttj-local-"))
        self.lease_renew_s = lease_renew_s
        self.registry = NodeRegistry(pools)
        #: the traces pools follow, read now so that a bad file fails here; a pool starts as its trace says
        self.traces = {p.name: load_trace(p.trace) for p in pools if p.trace is not None}
        for name, trace in self.traces.items():
            self.registry.set_stocked_out(name, not trace.in_stock_at(self.pools[name].trace_start))
        #: per-pod network namespaces when ``pod_network`` and possible, else the host's network
        self.networking = PodNetworking(self.state_dir, run_pods=run_pods, namespaces=pod_network)
        self.preemptions: list[PreemptionRecord] = []
        self.migrations: list[MigrationRecord] = []
        self.kubeconfig: str | None = None
        self._stop = threading.Event()
        self._timers = Timers(self._stop)
        self._started: _Started | None = None
        self._trace_stocks: dict[str, TraceStock] = {}

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
        """Registers every pool's nodes and serves them; raises :class:`~.ownership.FleetConflict` (having
        registered nothing) when another running fleet owns the cluster."""
        try:
            self._start(kubeconfig_path)
        except BaseException:
            self.stop()
            raise

    def _start(self, kubeconfig_path: str) -> None:
        self.kubeconfig = kubeconfig_path
        client = KubeClient.from_kubeconfig(kubeconfig_path)
        control, previous = self._serve_and_claim(client)
        parts = self._parts_of(client, control, pod_kubeconfig=self.networking.setup(kubeconfig_path))
        self._started = parts
        parts.leases.ensure_namespace()
        if previous is not None:
            gone = delete_fleet_nodes(client, previous.fleet) if previous.fleet else []
            self.announce(
                f"took over kube-system/ttj-local-control from the node fleet of {previous.owner}, whose control "
                f"server {previous.url} no longer answers; deleted its {len(gone)} Nodes"
            )
        self._register_pools(parts.lifecycle)
        ScriptedPreemptions(self.registry, self._timers, self._stop, self._preempt).start()
        parts.kubelet.start()
        parts.leases.start()
        parts.autoscaler.start()

    def _serve_and_claim(self, client: KubeClient) -> tuple[ControlServer, PreviousOwner | None]:
        """The served control server, claimed in the cluster; the fleet it took over from, if any."""
        # The kubelet endpoint of every node (logs) and the preemption control: nodes publish its port. It
        # serves first, so that the claim on the cluster comes before anything else is set up.
        control = ControlServer(self)
        try:
            control.start()
            return control, claim_control(client, self.identity, control.url)
        except BaseException:
            control.stop()
            client.close()
            raise

    def _parts_of(self, client: KubeClient, control: ControlServer, *, pod_kubeconfig: str) -> _Started:
        """The fleet's parts that talk to the API, made but not started."""
        leases = NodeLeases(client, self.registry, self._stop, self.lease_renew_s)
        kubelet = Kubelet(
            client,
            self.registry,
            self.networking,
            self._timers,
            self._stop,
            run_pods=self.run_pods,
            state_dir=self.state_dir,
            pod_kubeconfig=pod_kubeconfig,
            program_path=self.program_path,
        )
        lifecycle = NodeLifecycle(client, self.registry, leases, control.port, self.identity.id)
        preemptions = Preemptions(
            client, self.registry, lifecycle, kubelet, timers=self._timers, stop=self._stop, records=self.preemptions
        )
        migrations = Migrations(client, self.registry, lifecycle, kubelet, stop=self._stop, records=self.migrations)
        autoscaler = ClusterAutoscaler(
            client,
            kubelet.pods.items,
            self._pool_views,
            self._live_node_pools,
            self._stop,
            scan_s=self.autoscaler_scan_s,
            backoff_s=self.autoscaler_backoff_s,
        )
        return _Started(client, leases, lifecycle, kubelet, preemptions, migrations, control, autoscaler)

    def _register_pools(self, lifecycle: NodeLifecycle) -> None:
        """Registers each pool's nodes (but a stocked-out pool's), with their lifetimes and stock-out windows timed."""
        lifetimes = LifetimePreemptions(list(self.pools.values()), self._timers, self._stop, self._preempt)
        lifecycle.listeners.append(lifetimes.node_created)
        for pool in self.pools.values():
            if not self.registry.stocked_out(pool.name):
                lifecycle.restore(pool.name, pool.nodes)
            if pool.stock_out_window is not None:
                start, end = pool.stock_out_window
                self._timers.later(start, self._scheduled_stock_out, pool.name)
                if end is not None:
                    self._timers.later(end, self.restock, pool.name)
        for name, trace in self.traces.items():
            stock = TraceStock(
                self.pools[name],
                trace,
                timers=self._timers,
                stop=self._stop,
                stock_out=self._traced_stock_out,
                restock=self.restock,
                stocked_out=functools.partial(self.registry.stocked_out, name),
            )
            self._trace_stocks[name] = stock
            stock.start()

    def stop(self) -> None:
        """Withdraws the control ConfigMap, stops every pod process (SIGTERM, then SIGKILL after 5 s), deletes
        the fleet's Nodes (as a node pool scaled to zero) and stops the fleet's threads."""
        self._stop.set()
        started = self._started
        if started is not None:
            self._leave(lambda: release_control(started.client, self.identity), "withdraw the control ConfigMap")
            started.control.stop()
        self._timers.cancel_all()
        if started is not None:
            started.kubelet.stop_pods()
            self._leave(lambda: delete_fleet_nodes(started.client, self.identity.id), "delete the fleet's Nodes")
            started.client.close()  # ends the watches
            started.kubelet.join(2)
            started.autoscaler.join(2)
        self.networking.teardown()

    @staticmethod
    def _leave(action: Callable[[], object], what: str) -> None:
        """Cleaning up on the way out is not worth a hang: one try, and a warning when the API refuses."""
        try:
            action()
        except Exception as exc:  # an error answer, or the API server is gone (urllib3's errors)
            log.warning("node fleet: could not %s on stopping: %s", what, exc)

    # nodes -------------------------------------------------------------------------------------
    def nodes_of(self, pool: str) -> list[str]:
        """The pool's live nodes, oldest first."""
        self.registry.pool(pool)
        return self.registry.live_nodes(pool)

    def restore_pool(self, pool: str, nodes: int | None = None) -> list[str]:
        """Bring a pool back to its size (or add ``nodes`` VMs) now; returns the new node names."""
        self.registry.pool(pool)
        try:
            return self._parts().lifecycle.restore(pool, nodes)
        except StockOut as exc:
            raise ValueError(f"{exc}; restock it first") from exc

    # stock-outs ----------------------------------------------------------------------------------
    def stock_out(self, pool: str, *, keep_nodes: bool = False, cause: str | None = None) -> JSON:
        """The pool has no capacity any more: no node of it can be created (replacements, restores and the
        autoscaler's scale-ups fail) and, unless ``keep_nodes``, its live nodes are preempted as GCE reclaims
        spot VMs. Pods that need it stay Pending."""
        self.registry.pool(pool)
        parts = self._parts()
        self.registry.set_stocked_out(pool, True)
        preempted: list[str] = []
        if not keep_nodes:
            for node in self.registry.live_nodes(pool):
                try:
                    parts.preemptions.preempt_node(node, cause=cause or f"stock-out of pool {pool}")
                    preempted.append(node)
                except KeyError:
                    pass  # gone meanwhile
        log.info("pool %s stocked out (%d nodes preempted)", pool, len(preempted))
        return {"pool": pool, "stockedOut": True, "preempted": preempted}

    def restock(self, pool: str) -> JSON:
        """Capacity is back: the pool returns to its size now and pending pods that need it are scheduled."""
        self.registry.pool(pool)
        parts = self._parts()
        self.registry.set_stocked_out(pool, False)
        parts.autoscaler.forget_backoff(pool)
        created = parts.lifecycle.restore(pool)
        log.info("pool %s restocked (%d new nodes)", pool, len(created))
        return {"pool": pool, "stockedOut": False, "nodes": created}

    def replay_trace(self, pool: str, from_seconds: float | None = None) -> JSON:
        """Replays the pool's trace over from now, from ``from_seconds`` trace seconds (default: its
        ``trace-start``): its stock becomes what the trace says there, and follows the trace from then on."""
        self.registry.pool(pool)
        stock = self._trace_stocks.get(pool)
        if stock is None:
            raise ValueError(f"pool {pool} follows no trace (give it trace=FILE)")
        return stock.replay(self.pools[pool].trace_start if from_seconds is None else from_seconds)

    def _scheduled_stock_out(self, pool: str) -> None:
        if not self._stop.is_set():
            self.stock_out(pool)

    def _traced_stock_out(self, pool: str, cause: str) -> None:
        self.stock_out(pool, cause=cause)

    def _pool_views(self) -> list[PoolView]:
        parts = self._parts()
        return [
            PoolView(
                pool=pool,
                live=len(self.registry.live_nodes(pool.name)),
                stocked_out=self.registry.stocked_out(pool.name),
                in_backoff=parts.autoscaler.in_backoff(pool.name),
            )
            for pool in self.registry.pools()
        ]

    def _live_node_pools(self) -> dict[str, NodePool]:
        return {node: self.registry.pool(self.registry.pool_of(node)) for node in self.registry.live_nodes()}

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

    def migrate_node(self, node: str, *, cause: str = "injected", wait: bool = False) -> MigrationRecord:
        """The cluster autoscaler drains the node, as for a compute class's active migration (the
        ToBeDeletedByClusterAutoscaler taint, each pod evicted through the Eviction API), then deletes it; the
        pool does not replace it. Returns at once (``wait=True``: when the node is gone)."""
        return self._parts().migrations.migrate_node(node, cause=cause, wait=wait)

    def _preempt(self, node: str, cause: str) -> PreemptionRecord:
        return self.preempt_node(node, cause=cause)

    def describe(self) -> JSON:
        return {
            "fleet": self.identity.id,
            "pools": self.registry.describe(),
            "preemptions": [r.to_json() for r in list(self.preemptions)],
            "migrations": [r.to_json() for r in list(self.migrations)],
            "runPods": self.run_pods,
            "stateDir": str(self.state_dir),
            "programPath": list(self.program_path),
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
