"""The part of GKE's cluster autoscaler a stock-out shows: what it says on pending pods (pure decisions + a loop).

Every ``scan`` seconds (the autoscaler's ``--scan-interval``, 10 s) it looks at the pods the scheduler left
``PodScheduled=False``/``Unschedulable`` and, for each, at every pool's node template (a new node of the pool):

- the pod fits a live node, or a pool that is below its size and in stock: a node is on its way (the pool's
  ``restore-after`` replacement) or the scheduler has not retried yet; nothing is said;
- else, if a stocked-out pool below its size could take it, a scale-up of that pool is attempted (one pool per
  scan, the one that would help the most pods) and fails as GCE fails it: ``TriggeredScaleUp`` then
  ``FailedScaleUp`` on those pods, and the pool is in backoff for ``backoff`` seconds (5 min, as the
  autoscaler's ``--initial-node-group-backoff-duration``);
- else ``NotTriggerScaleUp`` with the reasons counted per pool: the template's scheduling failures (``2
  node(s) didn't match Pod's node affinity/selector``), ``in backoff after failed scale-up``, ``max node group
  size reached`` (a pool at its size: the local pools are fixed-size node groups).

The wording is the autoscaler's: ``NotTriggerScaleUp``/``TriggeredScaleUp`` and the skipped reasons from
kubernetes/autoscaler (cluster-autoscaler/processors/status/eventing_scale_up_processor.go, core/scaleup/
orchestrator), ``FailedScaleUp`` from GKE's autoscaler ("Node scale up in zones ... associated with this pod
failed: GCE out of resources. Pod is at risk of not being scheduled."). Reasons are sorted (the autoscaler
joins them in map order). It never grows a pool past its size and never scales down.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ttj.kubeapi import JSON, KubeClient

from .kube import obj_key, pod_event
from .pools import CLUSTER_NAME, NODE_INTERNAL_IP, NodePool, instance_group_name, node_object, now_rfc3339
from .predicates import (
    NodeUsage,
    node_allocatable,
    placement_fields,
    pod_is_terminal,
    pod_requests,
    resource_failures,
    static_failures,
    to_milli,
    usage_of,
)

log = logging.getLogger(__name__)

COMPONENT = "cluster-autoscaler"
SCAN_S = 10.0
BACKOFF_S = 300.0
BACKOFF_REASON = "in backoff after failed scale-up"
MAX_SIZE_REASON = "max node group size reached"
OUT_OF_RESOURCES = "GCE out of resources"
#: client-go's spam filter: Events per object and source at once, then one per refill period
SPAM_BURST = 25
SPAM_REFILL_S = 300.0


@dataclass(frozen=True)
class PoolView:
    """What a scan knows of one pool."""

    pool: NodePool
    live: int
    stocked_out: bool
    in_backoff: bool

    @property
    def below_size(self) -> bool:
        return self.live < self.pool.nodes


@dataclass
class ScanResult:
    """What one scan decided: the pool whose scale-up fails now (and the pods it was for), what each other
    pending pod is told."""

    failed_pool: NodePool | None = None
    failed_pods: list[JSON] = field(default_factory=list)
    not_triggered: list[tuple[JSON, str]] = field(default_factory=list)


@functools.lru_cache(maxsize=256)
def template_node(pool: NodePool) -> JSON:
    """A new node of the pool, as the autoscaler imagines it from the instance template."""
    return node_object(pool, f"template-node-for-{instance_group_name(pool)}", NODE_INTERNAL_IP)


def template_failures(pod: JSON, pool: NodePool) -> list[str]:
    """Why the pod would not fit a new, empty node of the pool (empty: it would)."""
    node = template_node(pool)
    return static_failures(pod, node) or resource_failures(
        to_milli(pod_requests(pod)), to_milli(node_allocatable(node)), NodeUsage()
    )


def waits_for_scale_up(pod: JSON) -> bool:
    """Pending, unbound, and marked unschedulable by the scheduler."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    if spec.get("nodeName") or meta.get("deletionTimestamp") or pod_is_terminal(pod):
        return False
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in status.get("conditions") or []
    )


class LiveNodes:
    """The fleet's live nodes as one scan sees them: each node, its allocatable and what its pods request."""

    def __init__(self, nodes: Mapping[str, NodePool], pods: Sequence[JSON]) -> None:
        bound: dict[str, list[JSON]] = {}
        for pod in pods:
            name = str((pod.get("spec") or {}).get("nodeName") or "")
            if name in nodes and not pod_is_terminal(pod):
                bound.setdefault(name, []).append(pod)
        self._nodes: list[tuple[JSON, dict[str, int], NodeUsage]] = []
        for node_name, pool in nodes.items():
            node = node_object(pool, node_name, NODE_INTERNAL_IP)
            self._nodes.append((node, to_milli(node_allocatable(node)), usage_of(bound.get(node_name, []))))

    def fit(self, pod: JSON) -> bool:
        """The pod fits one of them as they are filled now (the scheduler will place it)."""
        requests = to_milli(pod_requests(pod))
        return any(
            not static_failures(pod, node) and not resource_failures(requests, allocatable, usage)
            for node, allocatable, usage in self._nodes
        )


def pod_shape(pod: JSON) -> str:
    """What the decisions read of a pod: pods of one job's group share it, and are decided once per scan."""
    return json.dumps([placement_fields(pod), pod_requests(pod)], sort_keys=True, default=str)


def not_triggered_message(reasons_per_pool: Iterable[Sequence[str]]) -> str:
    """``pod didn't trigger scale-up: 1 in backoff after failed scale-up, 2 max node group size reached``."""
    counts: Counter[str] = Counter()
    for reasons in reasons_per_pool:
        counts.update(reasons)
    return "pod didn't trigger scale-up: " + ", ".join(sorted(f"{n} {reason}" for reason, n in counts.items()))


def failed_message(zones: Sequence[str]) -> str:
    """GKE's FailedScaleUp message for a stock-out."""
    return (
        f"Node scale up in zones {', '.join(zones)} associated with this pod failed: {OUT_OF_RESOURCES}. "
        "Pod is at risk of not being scheduled."
    )


def triggered_message(view: PoolView) -> str:
    """``pod triggered scale-up: [{https://www.googleapis.com/compute/v1/projects/P/zones/Z/instanceGroups/G 0->1
    (max: 3)}]``."""
    pool = view.pool
    url = (
        f"https://www.googleapis.com/compute/v1/projects/{CLUSTER_NAME}/zones/{pool.zone}/instanceGroups/"
        f"{instance_group_name(pool)}"
    )
    return f"pod triggered scale-up: [{{{url} {view.live}->{view.live + 1} (max: {pool.nodes})}}]"


def scan(pending: Sequence[JSON], views: Sequence[PoolView], fits_now: Callable[[JSON], bool]) -> ScanResult:
    """The decisions of one scan over the pending pods (pure but for ``fits_now``)."""
    result = ScanResult()
    attempts: dict[str, list[JSON]] = {}
    silent: list[tuple[JSON, list[list[str]]]] = []
    answers: dict[str, tuple[bool, list[list[str]]]] = {}
    for pod in pending:
        shape = pod_shape(pod)
        if shape not in answers:
            fits = fits_now(pod)
            answers[shape] = (fits, [] if fits else [template_failures(pod, v.pool) for v in views])
        fits, failures_per_pool = answers[shape]
        if fits:
            continue
        reasons: list[list[str]] = []
        upcoming = False
        for view, failures in zip(views, failures_per_pool, strict=True):
            if failures:
                reasons.append(failures)
            elif not view.below_size:
                reasons.append([MAX_SIZE_REASON])
            elif view.in_backoff:
                reasons.append([BACKOFF_REASON])
            elif view.stocked_out:
                attempts.setdefault(view.pool.name, []).append(pod)
                reasons.append([BACKOFF_REASON])  # what it is told if another pool's attempt is made this scan
            else:
                upcoming = True
        if not upcoming:
            silent.append((pod, reasons))
    if attempts:
        order = [v.pool.name for v in views]
        chosen = max(attempts, key=lambda name: (len(attempts[name]), -order.index(name)))
        result.failed_pool = next(v.pool for v in views if v.pool.name == chosen)
        result.failed_pods = attempts[chosen]
        # As the autoscaler: no NotTriggerScaleUp in a scan that attempted a scale-up.
        return result
    result.not_triggered = [(pod, not_triggered_message(reasons)) for pod, reasons in silent]
    return result


class ClusterAutoscaler:
    """The loop: scans the pods the fleet's kubelet informer sees and posts the Events (aggregated per pod and
    message, as client-go's event correlator does)."""

    def __init__(
        self,
        client: KubeClient,
        pods: Callable[[], list[JSON]],
        views: Callable[[], list[PoolView]],
        live_nodes: Callable[[], dict[str, NodePool]],
        stop: threading.Event,
        *,
        scan_s: float = SCAN_S,
        backoff_s: float = BACKOFF_S,
    ) -> None:
        self.client = client
        self.pods = pods
        self.views = views
        self.live_nodes = live_nodes
        self.stop = stop
        self.scan_s = scan_s
        self.backoff_s = backoff_s
        self._lock = threading.Lock()
        self._backoff_until: dict[str, float] = {}
        #: (pod uid, reason, message) → (event name, count, first timestamp)
        self._posted: dict[tuple[str, str, str], tuple[str, int, str]] = {}
        #: pod uid → (tokens, monotonic time of the last refill): client-go's spam filter per object and source
        self._tokens: dict[str, tuple[float, float]] = {}
        self._thread = threading.Thread(target=self._run, name="cluster-autoscaler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)

    def in_backoff(self, pool: str) -> bool:
        with self._lock:
            return self._backoff_until.get(pool, 0.0) > time.monotonic()

    def forget_backoff(self, pool: str) -> None:
        """A restocked pool is tried again at once."""
        with self._lock:
            self._backoff_until.pop(pool, None)

    def _run(self) -> None:
        while not self.stop.wait(self.scan_s):
            try:
                self.scan_once()
            except Exception as exc:
                if not self.stop.is_set():
                    log.warning("cluster autoscaler scan failed: %s", exc)

    def scan_once(self) -> ScanResult:
        pods = self.pods()
        pending = [p for p in pods if waits_for_scale_up(p)]
        waiting = {str((p.get("metadata") or {}).get("uid")) for p in pending}
        with self._lock:  # a pod that no longer waits starts a new count if it waits again
            self._posted = {key: value for key, value in self._posted.items() if key[0] in waiting}
            self._tokens = {uid: value for uid, value in self._tokens.items() if uid in waiting}
        if not pending:
            return ScanResult()
        result = scan(pending, self.views(), LiveNodes(self.live_nodes(), pods).fit)
        if result.failed_pool is not None:
            view = next(v for v in self.views() if v.pool.name == result.failed_pool.name)
            with self._lock:
                self._backoff_until[view.pool.name] = time.monotonic() + self.backoff_s
            log.info("scale-up of pool %s failed: stocked out (%d pods)", view.pool.name, len(result.failed_pods))
            for pod in result.failed_pods:
                self._event(pod, "Normal", "TriggeredScaleUp", triggered_message(view))
            for pod in result.failed_pods:
                self._event(pod, "Warning", "FailedScaleUp", failed_message([view.pool.zone]))
        for pod, message in result.not_triggered:
            self._event(pod, "Normal", "NotTriggerScaleUp", message)
        return result

    def _event(self, pod: JSON, event_type: str, reason: str, message: str) -> None:
        meta = pod["metadata"]
        uid = str(meta.get("uid") or obj_key(pod))
        now = now_rfc3339()
        key = (uid, reason, message)
        with self._lock:
            seen = self._posted.get(key)
            if not self._take_token(uid):
                return
        path = f"/api/v1/namespaces/{meta['namespace']}/events"
        try:
            if seen is not None:
                name, count, first = seen
                self.client.merge_patch(f"{path}/{name}", {"count": count + 1, "lastTimestamp": now})
                with self._lock:
                    self._posted[key] = (name, count + 1, first)
                return
            name = f"{meta['name']}.{time.time_ns():x}"
            self.client.create(
                path, pod_event(pod, name, event_type, reason, message=message, component=COMPONENT, now=now)
            )
            with self._lock:
                self._posted[key] = (name, 1, now)
        except Exception as exc:  # an Event is best effort, as in kube
            log.debug("could not record event %s on %s: %s", reason, obj_key(pod), exc)

    def _take_token(self, uid: str) -> bool:
        """client-go's EventSourceObjectSpamFilter: a burst of 25 Events per pod, then one per 5 minutes."""
        now = time.monotonic()
        tokens, last = self._tokens.get(uid, (float(SPAM_BURST), now))
        tokens = min(float(SPAM_BURST), tokens + (now - last) / SPAM_REFILL_S)
        if tokens < 1:
            self._tokens[uid] = (tokens, now)
            return False
        self._tokens[uid] = (tokens - 1, now)
        return True
