"""A kube-scheduler for the local cluster, as an API client: watches pods and nodes, binds via pods/binding.

Filters with the predicates in scheduling.py, scores least-allocated (ties broken at random, which
spreads pods like the default scheduler does), and leaves a pod that fits nowhere Pending with
``PodScheduled=False``, reason ``Unschedulable`` and kube-scheduler's message, plus a
``FailedScheduling`` Event. Unschedulable pods are retried when nodes or pods change, and every 10 s.
"""

from __future__ import annotations

import logging
import random
import threading
from typing import Any

from ttj import kubeapi
from ttj.kubeapi import JSON, KubeClient, KubeError

from .kube import Informer, WorkQueue, obj_key, wait_synced
from .pools import now_rfc3339
from .scheduling import filter_node, pod_is_terminal, score_node, unschedulable_message

log = logging.getLogger(__name__)

SCHEDULER_NAME = "default-scheduler"
RETRY_UNSCHEDULABLE_S = 10.0


def node_is_ready(node: JSON) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def with_not_ready_taint(node: JSON) -> JSON:
    """The node lifecycle controller taints a NotReady node; the filters then see that taint."""
    if node_is_ready(node):
        return node
    spec = dict(node.get("spec") or {})
    spec["taints"] = [*(spec.get("taints") or []), {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
    return {**node, "spec": spec}


def replace_condition(conditions: list[JSON], condition: JSON) -> list[JSON]:
    """Conditions with ``condition`` set by type, keeping lastTransitionTime when the status is unchanged."""
    result: list[JSON] = []
    replaced = False
    for existing in conditions:
        if existing.get("type") == condition.get("type"):
            if existing.get("status") == condition.get("status") and existing.get("lastTransitionTime"):
                condition = {**condition, "lastTransitionTime": existing["lastTransitionTime"]}
            result.append(condition)
            replaced = True
        else:
            result.append(existing)
    if not replaced:
        result.append(condition)
    return result


class Scheduler:
    """The addon ``ttj_localcluster.nodes.scheduler.Scheduler`` (also usable against any apiserver)."""

    name = "scheduler"

    def __init__(self, seed: int | None = None) -> None:
        self._stop = threading.Event()
        self._rng = random.Random(seed)
        self._assumed: dict[str, str] = {}  # pod key → node, until the informer shows the binding
        self._lock = threading.Lock()
        self.client: KubeClient | None = None
        self.pods: Informer | None = None
        self.nodes: Informer | None = None
        self.queue: WorkQueue | None = None

    def start(self, kubeconfig_path: str) -> None:
        self.client = KubeClient.from_kubeconfig(kubeconfig_path)
        self.pods = Informer(self.client, "/api/v1/pods", "scheduler-pods", self._stop)
        self.nodes = Informer(self.client, "/api/v1/nodes", "scheduler-nodes", self._stop)
        self.queue = WorkQueue("scheduler", self._schedule, self._stop)
        self.pods.add_handler(self._on_pod)
        self.nodes.add_handler(self._on_node)
        self.queue.start()
        self.pods.start()
        self.nodes.start()
        wait_synced([self.pods, self.nodes])
        threading.Thread(target=self._periodic_retry, name="scheduler-retry", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        if self.client is not None:
            self.client.close()  # ends the watches
        for part in (self.pods, self.nodes, self.queue):
            if part is not None:
                part.join(2)

    # events ------------------------------------------------------------------------------------
    @staticmethod
    def _wants_scheduling(pod: JSON) -> bool:
        spec = pod.get("spec") or {}
        return (
            not spec.get("nodeName")
            and (spec.get("schedulerName") or SCHEDULER_NAME) == SCHEDULER_NAME
            and not (pod.get("metadata") or {}).get("deletionTimestamp")
            and not pod_is_terminal(pod)
        )

    def _on_pod(self, kind: str, pod: JSON, old: JSON | None) -> None:
        assert self.queue is not None
        key = obj_key(pod)
        if kind != "DELETED" and self._wants_scheduling(pod):
            self.queue.add(key)
            return
        if (pod.get("spec") or {}).get("nodeName"):
            with self._lock:
                self._assumed.pop(key, None)
        # A pod leaving a node frees room: give waiting pods another chance.
        if kind == "DELETED" or (pod_is_terminal(pod) and (old is None or not pod_is_terminal(old))):
            self._requeue_waiting()

    def _on_node(self, kind: str, node: JSON, old: JSON | None) -> None:
        if kind == "DELETED":
            return
        if old is None or node_is_ready(node) != node_is_ready(old) or node.get("spec") != old.get("spec"):
            self._requeue_waiting()

    def _requeue_waiting(self) -> None:
        assert self.pods is not None
        assert self.queue is not None
        for pod in self.pods.items():
            if self._wants_scheduling(pod):
                self.queue.add(obj_key(pod))

    def _periodic_retry(self) -> None:
        while not self._stop.wait(RETRY_UNSCHEDULABLE_S):
            self._requeue_waiting()

    # scheduling --------------------------------------------------------------------------------
    def _pods_by_node(self) -> dict[str, list[JSON]]:
        assert self.pods is not None
        by_node: dict[str, list[JSON]] = {}
        with self._lock:
            assumed = dict(self._assumed)
        for pod in self.pods.items():
            node = (pod.get("spec") or {}).get("nodeName") or assumed.get(obj_key(pod))
            if node and not pod_is_terminal(pod):
                by_node.setdefault(node, []).append(pod)
        return by_node

    def _schedule(self, key: str) -> float | None:
        assert self.pods is not None
        assert self.nodes is not None
        assert self.client is not None
        pod = self.pods.get(key)
        if pod is None or not self._wants_scheduling(pod):
            return None
        with self._lock:
            if key in self._assumed:
                return None
        nodes = [with_not_ready_taint(n) for n in self.nodes.items()]
        by_node = self._pods_by_node()
        feasible: list[tuple[float, float, JSON]] = []
        reasons: list[list[str]] = []
        for node in nodes:
            name = (node.get("metadata") or {}).get("name", "")
            on_node = by_node.get(name, [])
            failed = filter_node(pod, node, on_node)
            if failed:
                reasons.append(failed)
            else:
                feasible.append((score_node(pod, node, on_node), self._rng.random(), node))
        if not feasible:
            self._report_unschedulable(pod, unschedulable_message(len(nodes), reasons))
            return None
        feasible.sort(key=lambda item: (item[0], item[1]), reverse=True)
        target = feasible[0][2]["metadata"]["name"]
        self._bind(pod, target)
        return None

    def _bind(self, pod: JSON, node: str) -> None:
        assert self.client is not None
        meta = pod["metadata"]
        key = obj_key(pod)
        with self._lock:
            self._assumed[key] = node
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid")},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            self.client.request("POST", kubeapi.path("Pod", meta["namespace"], meta["name"], "binding"), body=binding)
        except Exception as exc:
            # Forget the assumption on every failure, a broken connection or a timeout included: an
            # assumed pod is never scheduled again, so it would stay Pending for good. A retry of a bind
            # that did land answers 409.
            with self._lock:
                self._assumed.pop(key, None)
            if isinstance(exc, KubeError) and exc.status in (404, 409):
                return  # gone, or someone bound it first
            raise
        self._event(pod, "Normal", "Scheduled", f"Successfully assigned {meta['namespace']}/{meta['name']} to {node}")

    def _report_unschedulable(self, pod: JSON, message: str) -> None:
        assert self.client is not None
        meta = pod["metadata"]
        status = pod.get("status") or {}
        conditions: list[JSON] = list(status.get("conditions") or [])
        current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        if current and current.get("status") == "False" and current.get("message") == message:
            return
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": now_rfc3339(),
        }
        patch = {"status": {"phase": "Pending", "conditions": replace_condition(conditions, condition)}}
        self.client.merge_patch(kubeapi.path("Pod", meta["namespace"], meta["name"], "status"), patch)
        self._event(pod, "Warning", "FailedScheduling", message)

    def _event(self, pod: JSON, event_type: str, reason: str, message: str) -> None:
        assert self.client is not None
        meta = pod["metadata"]
        now = now_rfc3339()
        suffix = f"{self._rng.getrandbits(48):012x}"
        event: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{suffix}", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "type": event_type,
            "reason": reason,
            "message": message,
            "source": {"component": SCHEDULER_NAME},
            "reportingComponent": SCHEDULER_NAME,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.client.create(f"/api/v1/namespaces/{meta['namespace']}/events", event)
        except KubeError as exc:
            log.debug("could not record event %s for %s: %s", reason, meta["name"], exc)
