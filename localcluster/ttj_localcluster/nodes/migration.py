"""Active migration of a GKE custom compute class, as the cluster autoscaler carries it out: a drain, then no node.

A compute class with ``activeMigration.optimizeRulePriority`` moves its workloads to nodes of a more preferred
priority rule once such nodes can be had; the node they leave is removed as in any scale-down. The autoscaler
taints it ``ToBeDeletedByClusterAutoscaler=<Unix time>:NoSchedule`` (nothing new lands on it), evicts each of
its pods through the Eviction API (which honours disruption budgets; a refused eviction is retried), waits for
them to terminate within their grace periods, and deletes the Node. Unlike a spot preemption the node stays
Ready throughout (its kubelet runs each pod's SIGTERM and grace period) and its pool does not replace it: the
class wants its workloads elsewhere. Here a drain is asked for (Python, the HTTP control, the CLI); which node
GKE would pick is the caller's business.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from ttj.kubeapi import JSON, KubeClient, KubeError
from ttj_contract import AUTOSCALER_DELETION_TAINT

from .autoscaler import COMPONENT
from .kube import obj_key, pod_event
from .kubelet import Kubelet
from .lifecycle import NodeLifecycle
from .pools import now_rfc3339
from .registry import NodeRegistry

log = logging.getLogger(__name__)

#: how long evictions a disruption budget refuses are retried, and how often (the autoscaler's own retry)
EVICTION_RETRY_S = 120.0
EVICTION_RETRY_EVERY_S = 2.0
#: how long a pod's termination may overrun its grace period before the node goes anyway
OVERRUN_S = 30.0
#: how long ``migrate_node(wait=True)`` waits for the node to be gone
WAIT_S = 240.0


@dataclass
class MigrationRecord:
    node: str
    pool: str
    cause: str
    started_at: float
    pods: list[str] = field(default_factory=list)
    #: pods whose eviction their disruption budget still refused when the autoscaler gave up
    refused: list[str] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)

    def to_json(self) -> JSON:
        return {
            "node": self.node,
            "pool": self.pool,
            "cause": self.cause,
            "pods": self.pods,
            "refused": self.refused,
            "done": self.done.is_set(),
        }


def deletion_taint(now: float) -> JSON:
    return {"key": AUTOSCALER_DELETION_TAINT, "value": str(int(now)), "effect": "NoSchedule"}


def eviction(pod: JSON) -> JSON:
    meta = pod["metadata"]
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
    }


class Migrations:
    """Drains nodes as the cluster autoscaler does for a compute class's active migration, one thread each."""

    def __init__(
        self,
        client: KubeClient,
        registry: NodeRegistry,
        lifecycle: NodeLifecycle,
        kubelet: Kubelet,
        *,
        stop: threading.Event,
        records: list[MigrationRecord],
    ) -> None:
        self.client = client
        self.registry = registry
        self.lifecycle = lifecycle
        self.kubelet = kubelet
        self.stop = stop
        self.records = records
        self._lock = threading.Lock()

    def migrate_node(self, node: str, *, cause: str = "injected", wait: bool = False) -> MigrationRecord:
        """Drain and remove one live node; returns at once (``wait=True``: when the node is gone). KeyError: no
        such live node. A node already draining is not drained twice: its record is returned."""
        with self._lock:
            if self.registry.begin_drain(node):
                victims = self.kubelet.pods_on_node(node)
                record = MigrationRecord(node, self.registry.pool_of(node), cause, time.monotonic())
                record.pods = [obj_key(p) for p in victims]
                self.records.append(record)
                threading.Thread(
                    target=self._drain, args=(record, victims), name=f"migrate-{node}", daemon=True
                ).start()
            else:
                record = next(r for r in self.records if r.node == node)
        if wait:
            record.done.wait(WAIT_S)
        return record

    def _drain(self, record: MigrationRecord, victims: list[JSON]) -> None:
        node = record.node
        log.info("draining node %s for its compute class's active migration (%s)", node, record.cause)
        try:
            self.lifecycle.add_taint(node, deletion_taint(time.time()))
            record.refused = [obj_key(p) for p in self._evict_all(victims)]
            grace = max((_grace_seconds(p) for p in victims), default=0)
            deadline = time.monotonic() + grace + OVERRUN_S
            while self.kubelet.pods_on_node(node) and time.monotonic() < deadline and not self.stop.is_set():
                time.sleep(0.2)
            self.lifecycle.delete(node)
        except Exception:
            log.exception("drain of node %s failed half-way", node)
        finally:
            self.registry.mark_gone(node, preempted=False)
            record.done.set()

    def _evict_all(self, pods: list[JSON]) -> list[JSON]:
        """Evict every pod, retrying those a disruption budget refuses; the ones still refused at the end."""
        waiting = list(pods)
        deadline = time.monotonic() + EVICTION_RETRY_S
        while waiting and not self.stop.is_set():
            refused = [pod for pod in waiting if not self._evict(pod)]
            if not refused or time.monotonic() >= deadline:
                return refused
            waiting = refused
            time.sleep(EVICTION_RETRY_EVERY_S)
        return waiting

    def _evict(self, pod: JSON) -> bool:
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/eviction"
        try:
            self.client.create(path, eviction(pod))
        except KubeError as exc:
            if exc.status == 404:
                return True  # gone already
            if exc.status == 429:
                return False
            raise
        self._event(pod)
        return True

    def _event(self, pod: JSON) -> None:
        meta = pod["metadata"]
        try:
            self.client.create(
                f"/api/v1/namespaces/{meta['namespace']}/events",
                pod_event(
                    pod,
                    f"{meta['name']}.{time.time_ns():x}",
                    "Normal",
                    "ScaleDown",
                    message="deleting pod for node scale down",
                    component=COMPONENT,
                    now=now_rfc3339(),
                ),
            )
        except Exception as exc:  # an Event is best effort, as in kube
            log.debug("could not record the ScaleDown event of %s: %s", obj_key(pod), exc)


def _grace_seconds(pod: JSON) -> float:
    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return float(30 if grace is None else grace)
