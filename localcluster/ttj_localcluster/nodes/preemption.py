"""Preemption as GKE does it on spot and preemptible VMs: graceful node shutdown, then a new VM.

The node gets the ``cloud.google.com/impending-node-termination`` taint and turns NotReady; every pod on it
gets a ``DisruptionTarget`` condition and SIGTERM, has the pool's ``grace`` seconds (15 by default), is
SIGKILLed after that, and is left ``Failed`` with reason ``Terminated`` and message "Pod was terminated in
response to imminent node shutdown."; then the Node is deleted. The pool replaces the VM after
``restore_after`` seconds under a new name. What asks for a preemption is :mod:`.preemption_sources`'s or
the caller's business.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from ttj import kubeapi
from ttj.kubeapi import JSON, KubeClient

from .kube import obj_key
from .kubelet import Kubelet
from .lifecycle import NodeLifecycle
from .registry import NodeRegistry, StockOut
from .timers import Timers

log = logging.getLogger(__name__)

#: how long ``preempt_node(wait=True)`` waits for the node to be gone
WAIT_S = 120.0
#: how long a pod's shutdown may overrun its grace period before the node goes anyway
OVERRUN_S = 30.0


@dataclass
class PreemptionRecord:
    node: str
    pool: str
    cause: str
    started_at: float
    pods: list[str] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)

    def to_json(self) -> JSON:
        return {
            "node": self.node,
            "pool": self.pool,
            "cause": self.cause,
            "pods": self.pods,
            "done": self.done.is_set(),
        }


class Preemptions:
    """Shuts preempted nodes down, one thread each, and keeps the record of every preemption."""

    def __init__(
        self,
        client: KubeClient,
        registry: NodeRegistry,
        lifecycle: NodeLifecycle,
        kubelet: Kubelet,
        *,
        timers: Timers,
        stop: threading.Event,
        records: list[PreemptionRecord],
    ) -> None:
        self.client = client
        self.registry = registry
        self.lifecycle = lifecycle
        self.kubelet = kubelet
        self.timers = timers
        self.stop = stop
        self.records = records
        self._lock = threading.Lock()

    def preempt_node(self, node: str, *, cause: str = "injected", wait: bool = False) -> PreemptionRecord:
        """Preempt one live node; returns at once (``wait=True``: when the node is gone). KeyError: no such node.

        A node already shutting down is not preempted twice: its record is returned.
        """
        with self._lock:
            if self.registry.begin_shutdown(node):
                record = PreemptionRecord(node, self.registry.pool_of(node), cause, time.monotonic())
                self.records.append(record)
                threading.Thread(target=self._shut_down, args=(record,), name=f"preempt-{node}", daemon=True).start()
            else:
                record = next(r for r in self.records if r.node == node)
        if wait:
            record.done.wait(WAIT_S)
        return record

    def preempt_pod(self, namespace: str, name: str, *, wait: bool = False) -> PreemptionRecord:
        """Preempt the node that runs this pod."""
        pod = self.client.get(kubeapi.path("Pod", namespace, name))
        node = ((pod or {}).get("spec") or {}).get("nodeName")
        if not node:
            raise KeyError(f"pod {namespace}/{name} does not exist or is not on a node yet")
        return self.preempt_node(node, cause=f"injected via pod {namespace}/{name}", wait=wait)

    def _shut_down(self, record: PreemptionRecord) -> None:
        node = record.node
        pool = self.registry.pool(record.pool)
        log.info("preempting node %s (%s)", node, record.cause)
        try:
            self.lifecycle.mark_shutting_down(node)
            victims = self.kubelet.pods_on_node(node)
            record.pods = [obj_key(p) for p in victims]
            threads = [
                threading.Thread(target=self.kubelet.terminate_for_shutdown, args=(p, pool.grace), daemon=True)
                for p in victims
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(pool.grace + OVERRUN_S)
            # Pods bound while the notice was out fail the same way.
            for pod in self.kubelet.pods_on_node(node):
                if obj_key(pod) not in record.pods:
                    self.kubelet.terminate_for_shutdown(pod, 0)
            self.lifecycle.delete(node)
        except Exception:
            log.exception("preemption of node %s failed half-way", node)
        finally:
            self.registry.mark_gone(node)
            record.done.set()
        if pool.restore_after is not None and not self.stop.is_set():
            self.timers.later(pool.restore_after, self._restore_one, record.pool)

    def _restore_one(self, pool: str) -> None:
        if not self.stop.is_set() and self.registry.missing(pool) > 0:
            try:
                self.lifecycle.create(pool)
            except StockOut as exc:
                log.info("no replacement for a node of pool %s: %s", pool, exc)
