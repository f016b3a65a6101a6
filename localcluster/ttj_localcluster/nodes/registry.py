"""Which VMs the fleet has, in which pool, and in which state: the one place that knows.

A node's name is reserved before its Node object exists and never reused, so a pod bound to a node
that has since gone is still recognised as one of ours (and failed, as the real kubelet's pods are).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from ttj.kubeapi import JSON

from .pools import NodePool, new_node_name


class NodeState(StrEnum):
    """The life of one simulated VM."""

    #: the name is reserved; the Node object and its Lease are being written
    REGISTERING = "Registering"
    #: heartbeating, running pods
    READY = "Ready"
    #: preempted: tainted and NotReady while its pods get their grace period, then deleted
    SHUTTING_DOWN = "ShuttingDown"
    #: drained by the cluster autoscaler (a compute class's active migration): tainted, still Ready and
    #: heartbeating while its pods are evicted, then deleted
    DRAINING = "Draining"
    #: lost without a shutdown (``lose_node``): its kubelet is silent, its Node left to others
    UNREACHABLE = "Unreachable"
    #: its Node is deleted; the name stays taken
    GONE = "Gone"

    @property
    def live(self) -> bool:
        """Counted in its pool, heartbeating, and may be given new pods (a draining node's taint keeps them off)."""
        return self in (NodeState.REGISTERING, NodeState.READY, NodeState.DRAINING)


class StockOut(RuntimeError):
    """No node of a stocked-out pool can be created (what GCE answers: ZONE_RESOURCE_POOL_EXHAUSTED)."""

    def __init__(self, pool: str, zone: str) -> None:
        super().__init__(f"pool {pool} is stocked out: GCE out of resources in zone {zone}")
        self.pool = pool
        self.zone = zone


@dataclass
class _PoolCounts:
    pool: NodePool
    preempted: int = 0
    #: nodes drained away by a compute class's active migration
    migrated: int = 0
    #: no capacity: no node of the pool can be created (GCE's ZONE_RESOURCE_POOL_EXHAUSTED)
    stocked_out: bool = False


class NodeRegistry:
    """Node → (pool, state), in creation order, under one lock; thread-safe."""

    def __init__(self, pools: Sequence[NodePool]) -> None:
        self._lock = threading.Lock()
        self._pools = {p.name: _PoolCounts(p, stocked_out=p.stocked_out) for p in pools}
        self._pool_of: dict[str, str] = {}
        self._state: dict[str, NodeState] = {}

    # pools ---------------------------------------------------------------------------------------
    def pool(self, name: str) -> NodePool:
        counts = self._pools.get(name)
        if counts is None:
            raise KeyError(f"no pool named {name!r}; pools: {', '.join(self._pools)}")
        return counts.pool

    def pools(self) -> list[NodePool]:
        return [c.pool for c in self._pools.values()]

    def missing(self, pool: str) -> int:
        """How many nodes the pool lacks to be at its size."""
        return max(0, self.pool(pool).nodes - len(self.live_nodes(pool)))

    def set_stocked_out(self, pool: str, out: bool) -> bool:
        """Whether it changed."""
        self.pool(pool)
        with self._lock:
            counts = self._pools[pool]
            changed = counts.stocked_out != out
            counts.stocked_out = out
            return changed

    def stocked_out(self, pool: str) -> bool:
        self.pool(pool)
        with self._lock:
            return self._pools[pool].stocked_out

    # nodes ---------------------------------------------------------------------------------------
    def reserve(self, pool: str) -> str:
        """A new, never used node name in ``pool``, registered as :attr:`NodeState.REGISTERING`;
        :class:`StockOut` while the pool has no capacity."""
        with self._lock:
            counts = self._pools[pool]
            if counts.stocked_out:
                raise StockOut(pool, counts.pool.zone)
            name = new_node_name(counts.pool)
            while name in self._state:
                name = new_node_name(counts.pool)
            self._pool_of[name] = pool
            self._state[name] = NodeState.REGISTERING
            return name

    def state_of(self, node: str | None) -> NodeState | None:
        """None: not a node of this fleet."""
        with self._lock:
            return self._state.get(node) if node else None

    def pool_of(self, node: str) -> str:
        with self._lock:
            return self._pool_of[node]

    def mark_ready(self, node: str) -> None:
        with self._lock:
            if self._state.get(node) is NodeState.REGISTERING:
                self._state[node] = NodeState.READY

    def begin_shutdown(self, node: str) -> bool:
        """Live → shutting down: True; already shutting down: False; else KeyError."""
        with self._lock:
            state = self._state.get(node)
            if state is NodeState.SHUTTING_DOWN:
                return False
            if state is None or not state.live:
                raise KeyError(self._no_live_node(node))
            self._state[node] = NodeState.SHUTTING_DOWN
            return True

    def begin_drain(self, node: str) -> bool:
        """Ready → draining: True; already draining: False; else KeyError."""
        with self._lock:
            state = self._state.get(node)
            if state is NodeState.DRAINING:
                return False
            if state is not NodeState.READY:
                raise KeyError(self._no_live_node(node))
            self._state[node] = NodeState.DRAINING
            return True

    def mark_unreachable(self, node: str) -> None:
        """Live → unreachable; else KeyError."""
        with self._lock:
            state = self._state.get(node)
            if state is None or not state.live:
                raise KeyError(self._no_live_node(node))
            self._state[node] = NodeState.UNREACHABLE

    def mark_gone(self, node: str, *, preempted: bool = True) -> None:
        """A preempted (else drained) node's end: its pool counts one preemption (else migration) more."""
        with self._lock:
            self._state[node] = NodeState.GONE
            counts = self._pools[self._pool_of[node]]
            if preempted:
                counts.preempted += 1
            else:
                counts.migrated += 1

    def live_nodes(self, pool: str | None = None) -> list[str]:
        """Live nodes (of one pool), oldest first."""
        with self._lock:
            return [
                node
                for node, state in self._state.items()
                if state.live and (pool is None or self._pool_of[node] == pool)
            ]

    def _no_live_node(self, node: str) -> str:
        live = sorted(n for n, s in self._state.items() if s.live)
        return f"no live node named {node!r}; nodes: {', '.join(live) or 'none'}"

    def describe(self) -> JSON:
        """The pools as ``GET /ttj-local/status`` shows them."""
        with self._lock:
            live = [n for n, s in self._state.items() if s.live]
            return {
                name: {
                    "nodes": [n for n in live if self._pool_of[n] == name],
                    "size": c.pool.nodes,
                    "provisioning": c.pool.provisioning,
                    "accelerator": c.pool.accelerator,
                    "preemption": c.pool.preemption,
                    "preempted": c.preempted,
                    "migrated": c.migrated,
                    "computeClass": c.pool.compute_class,
                    "zone": c.pool.zone,
                    "speed": c.pool.speed,
                    "stockedOut": c.stocked_out,
                    "trace": c.pool.trace,
                }
                for name, c in self._pools.items()
            }
