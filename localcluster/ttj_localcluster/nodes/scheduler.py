"""A kube-scheduler for the local cluster, as an API client: watches pods and nodes, binds via pods/binding.

Filters with the predicates in predicates.py, scores least-allocated (ties broken at random, which
spreads pods like the default scheduler does), and leaves a pod that fits nowhere Pending with
``PodScheduled=False``, reason ``Unschedulable`` and kube-scheduler's message, plus a
``FailedScheduling`` Event. Unschedulable pods are retried when nodes or pods change, and every 10 s.

Like kube-scheduler it keeps a cache of what each node holds (the requests of the pods bound or assumed
there), updated from the pod watch, so that one decision costs a pass over the nodes and not over every
pod of the cluster; Events are posted by their own thread, off the binding path.
"""

from __future__ import annotations

import json
import logging
import queue
import random
import threading
from concurrent.futures import ThreadPoolExecutor

from ttj import kubeapi
from ttj.kubeapi import JSON, KubeClient

from .kube import Informer, WorkQueue, obj_key, pod_event, wait_synced
from .pools import now_rfc3339
from .predicates import (
    NodeUsage,
    node_allocatable,
    placement_fields,
    pod_is_terminal,
    pod_requests,
    resource_failures,
    score_usage,
    static_failures,
    to_milli,
    unschedulable_message,
)

log = logging.getLogger(__name__)

SCHEDULER_NAME = "default-scheduler"
RETRY_UNSCHEDULABLE_S = 10.0
#: bindings in flight at once (kube-scheduler binds in goroutines of their own, off the scheduling loop)
BINDERS = 4
#: remembered static filter answers (placement fields × node version) before the memory is cleared
STATIC_ANSWERS = 200_000


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


def feasible_nodes_to_find(nodes: int) -> int:
    """How many feasible nodes a decision looks for before it scores them: kube-scheduler's adaptive
    percentageOfNodesToScore (50 % less 1 % per 125 nodes, at least 5 %, and never fewer than 100 nodes)."""
    if nodes < 100:
        return nodes
    percentage = max(5, 50 - nodes // 125)
    return max(100, nodes * percentage // 100)


class EventRecorder:
    """Posts Events from a queue in its own thread, as client-go's event broadcaster does; inline until started."""

    def __init__(self, stop: threading.Event) -> None:
        self.client: KubeClient | None = None
        self._stop = stop
        self._queue: queue.Queue[JSON | None] = queue.Queue()
        self._thread: threading.Thread | None = None

    def start(self, client: KubeClient) -> None:
        self.client = client
        self._thread = threading.Thread(target=self._run, name="scheduler-events", daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout)

    def record(self, client: KubeClient, event: JSON) -> None:
        if self._thread is None:
            self._post(client, event)
        else:
            self._queue.put(event)

    def _run(self) -> None:
        while not self._stop.is_set():
            event = self._queue.get()
            if event is None or self.client is None:
                continue
            self._post(self.client, event)

    @staticmethod
    def _post(client: KubeClient, event: JSON) -> None:
        try:
            client.create(f"/api/v1/namespaces/{event['metadata']['namespace']}/events", event)
        except Exception as exc:  # an Event is best effort, as in kube
            log.debug("could not record event %s: %s", event.get("reason"), exc)


class Scheduler:
    """The addon ``ttj_localcluster.nodes.scheduler.Scheduler`` (also usable against any apiserver)."""

    name = "scheduler"

    def __init__(self, seed: int | None = None) -> None:
        self._stop = threading.Event()
        self._rng = random.Random(seed)
        self._assumed: dict[str, str] = {}  # pod key → node, until the informer shows the binding
        self._lock = threading.Lock()
        #: pod key → (node, requests) of every pod counted on a node: bound and not finished, or assumed
        self._placed: dict[str, tuple[str, dict[str, int]]] = {}
        self._usage: dict[str, NodeUsage] = {}
        #: the views of all nodes, in the nodes informer's order; None when a node changed since
        self._all_views: list[tuple[str, str, JSON, dict[str, int]]] | None = None
        self._node_generation = 0
        #: pods that fit nowhere at their last try, retried when the cluster changes (kube's unschedulable queue)
        self._unschedulable: set[str] = set()
        #: (the pod's placement fields, node, node version) → static_failures' answer
        self._static: dict[tuple[str, str, str], list[str]] = {}
        self._binder: ThreadPoolExecutor | None = None
        #: where the next pass over the nodes starts, so that every node gets its turn
        self._next_start = 0
        self.events = EventRecorder(self._stop)
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
        self.events.start(self.client)
        self._binder = ThreadPoolExecutor(BINDERS, thread_name_prefix="scheduler-bind")
        self.queue.start()
        self.pods.start()
        self.nodes.start()
        wait_synced([self.pods, self.nodes])
        threading.Thread(target=self._periodic_retry, name="scheduler-retry", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        if self.client is not None:
            self.client.close()  # ends the watches
        for part in (self.pods, self.nodes, self.queue, self.events):
            if part is not None:
                part.join(2)
        if self._binder is not None:
            self._binder.shutdown(wait=False, cancel_futures=True)

    # the cache of what nodes hold ----------------------------------------------------------------
    def _place(self, key: str, node: str, pod: JSON, requests: dict[str, int] | None = None) -> None:
        """Count ``pod`` on ``node`` (again: a pod counted elsewhere moves)."""
        with self._lock:
            placed = self._placed.get(key)
            if placed is not None and placed[0] == node:
                return
        if requests is None:
            requests = placed[1] if placed is not None else to_milli(pod_requests(pod))
        with self._lock:
            placed = self._placed.get(key)
            if placed is not None and placed[0] == node:
                return
            if placed is not None:
                self._usage[placed[0]].remove(requests)
            self._placed[key] = (node, requests)
            self._usage.setdefault(node, NodeUsage()).add(requests)

    def _unplace(self, key: str, only_from: str | None = None) -> None:
        with self._lock:
            placed = self._placed.get(key)
            if placed is None or (only_from is not None and placed[0] != only_from):
                return
            del self._placed[key]
            self._usage[placed[0]].remove(placed[1])

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
        node = (pod.get("spec") or {}).get("nodeName")
        if kind == "DELETED" or pod_is_terminal(pod):
            with self._lock:
                self._assumed.pop(key, None)
                self._unschedulable.discard(key)
            self._unplace(key)
        elif node:
            with self._lock:
                self._assumed.pop(key, None)
                self._unschedulable.discard(key)
            self._place(key, node, pod)
        if kind != "DELETED" and self._wants_scheduling(pod):
            self.queue.add(key)
            return
        # A pod leaving a node frees room: give waiting pods another chance.
        if kind == "DELETED" or (pod_is_terminal(pod) and (old is None or not pod_is_terminal(old))):
            self._requeue_waiting()

    def _on_node(self, kind: str, node: JSON, old: JSON | None) -> None:
        with self._lock:
            self._all_views = None
            self._node_generation += 1
        if kind == "DELETED":
            return
        if old is None or node_is_ready(node) != node_is_ready(old) or node.get("spec") != old.get("spec"):
            self._requeue_waiting()

    def _requeue_waiting(self) -> None:
        """Give the pods found unschedulable another try (the others are in the queue already)."""
        assert self.queue is not None
        with self._lock:
            waiting = list(self._unschedulable)
        for key in waiting:
            self.queue.add(key)

    def _periodic_retry(self) -> None:
        while not self._stop.wait(RETRY_UNSCHEDULABLE_S):
            self._requeue_waiting()

    # scheduling --------------------------------------------------------------------------------
    def _views(self) -> list[tuple[str, str, JSON, dict[str, int]]]:
        """Every node as (name, version, the node with the not-ready taint where due, its allocatable in
        thousandths), rebuilt only after a node changed."""
        assert self.nodes is not None
        with self._lock:
            views, generation = self._all_views, self._node_generation
        if views is not None:
            return views
        views = []
        for node in self.nodes.items():
            meta = node.get("metadata") or {}
            views.append(
                (
                    meta.get("name", ""),
                    str(meta.get("resourceVersion", "")),
                    with_not_ready_taint(node),
                    to_milli(node_allocatable(node)),
                )
            )
        with self._lock:
            if generation == self._node_generation:  # else a node changed meanwhile: build again next time
                self._all_views = views
        return views

    def _static_failures(self, pod: JSON, placement: str, name: str, version: str, node: JSON) -> list[str]:
        key = (placement, name, version)
        answer = self._static.get(key)
        if answer is None:
            if len(self._static) >= STATIC_ANSWERS:
                self._static.clear()
            answer = self._static[key] = static_failures(pod, node)
        return answer

    def _schedule(self, key: str) -> float | None:
        assert self.pods is not None
        assert self.nodes is not None
        assert self.client is not None
        pod = self.pods.get(key)
        with self._lock:
            self._unschedulable.discard(key)
            if pod is None or not self._wants_scheduling(pod) or key in self._assumed:
                return None
        requests = to_milli(pod_requests(pod))
        placement = json.dumps(placement_fields(pod), sort_keys=True)
        views = self._views()
        enough = feasible_nodes_to_find(len(views))
        start = self._next_start % len(views) if views else 0
        best: tuple[float, float, str] | None = None
        found = 0
        reasons: list[list[str]] = []
        with self._lock:
            for name, version, node, allocatable in views[start:] + views[:start]:
                usage = self._usage.get(name) or NodeUsage()
                failed = self._static_failures(pod, placement, name, version, node) or resource_failures(
                    requests, allocatable, usage
                )
                if failed:
                    reasons.append(failed)
                    continue
                candidate = (score_usage(requests, allocatable, usage), self._rng.random(), name)
                best = candidate if best is None else max(best, candidate)
                found += 1
                if found >= enough:
                    break
            self._next_start = start + found + len(reasons)
            if best is None:
                self._unschedulable.add(key)
            else:
                self._assumed[key] = best[2]
        if best is None:
            self._report_unschedulable(pod, unschedulable_message(len(views), reasons))
            return None
        self._place(key, best[2], pod, requests)
        if self._binder is None:
            self._bind(pod, best[2])
        else:
            self._binder.submit(self._bind_in_background, pod, best[2])
        return None

    def _bind_in_background(self, pod: JSON, node: str) -> None:
        try:
            self._bind(pod, node)
        except Exception as exc:
            assert self.queue is not None
            log.debug("binding %s to %s failed (%s); trying again", obj_key(pod), node, exc)
            self.queue.add_after(obj_key(pod), 0.5)

    def _bind(self, pod: JSON, node: str) -> None:
        """POST the binding of a pod assumed on ``node``; forget the assumption when it fails."""
        assert self.client is not None
        meta = pod["metadata"]
        key = obj_key(pod)
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid")},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            self.client.request("POST", kubeapi.path("Pod", meta["namespace"], meta["name"], "binding"), body=binding)
        except Exception:
            # Forget the assumption on every failure, a broken connection or a timeout included: an
            # assumed pod is never scheduled again, so it would stay Pending for good. Every failure is
            # retried, a 404 or a 409 too, as kube-scheduler requeues a pod whose binding failed: the retry
            # reads the pod from the informer, and stops there once the watch shows it bound or gone.
            with self._lock:
                still_assumed = self._assumed.get(key) == node
                if still_assumed:
                    del self._assumed[key]
            if still_assumed:  # else the watch has shown where the pod really is, and it is counted there
                self._unplace(key, only_from=node)
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
        event = pod_event(
            pod,
            f"{meta['name']}.{suffix}",
            event_type,
            reason,
            message=message,
            component=SCHEDULER_NAME,
            now=now,
        )
        self.events.record(self.client, event)
