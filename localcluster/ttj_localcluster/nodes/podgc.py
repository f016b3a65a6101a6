"""The pod garbage collector of kube-controller-manager 1.25 (``pkg/controller/podgc``), as an API client.

One pass every ``period`` seconds (kube: 20) over the pods and nodes its informers hold, deleting with
``gracePeriodSeconds: 0``:

- **orphaned pods**: bound (``spec.nodeName``) to a node that does not exist. A node first found missing is
  quarantined for ``quarantine`` seconds (kube: 40; the node informer may lag behind a node that just
  registered), then looked up with a GET; if it is still not found, every pod bound to it is deleted.
  Graceful deletion needs the node's kubelet to finish it, so without this a pod deleted with a grace
  period after its node went away would stay ``Terminating`` for ever;
- **unscheduled terminating pods**: ``deletionTimestamp`` set and no ``nodeName``;
- **terminated pods** (``Succeeded``/``Failed``) beyond ``terminated_threshold`` (kube's
  ``--terminated-pod-gc-threshold``, 12500): the oldest first (``creationTimestamp``, then name).

As 1.25 with its default feature gates, it does not delete terminating pods on nodes tainted
``node.kubernetes.io/out-of-service`` (``NodeOutOfServiceVolumeDetach``, alpha) nor mark pods ``Failed``
with a ``DisruptionTarget`` condition before deleting them (``PodDisruptionConditions``, alpha). Unlike
kube's, each delete carries the observed pod's uid as a precondition, so a same-named successor the
informer has not seen yet is never deleted in its place.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ttj import kubeapi
from ttj.kubeapi import JSON, KubeClient, KubeError

from .kube import Informer, obj_key, wait_synced
from .predicates import pod_is_terminal

log = logging.getLogger(__name__)

#: kube-controller-manager's constants (gcCheckPeriod, quarantineTime) and flag default
PERIOD_S = 20.0
QUARANTINE_S = 40.0
TERMINATED_THRESHOLD = 12500


@dataclass(frozen=True)
class Sweep:
    """What one pass decides before it asks the API about missing nodes (pod keys are NAMESPACE/NAME)."""

    #: terminated pods beyond the threshold, oldest first
    terminated: tuple[str, ...]
    #: terminating pods never bound to a node
    unscheduled_terminating: tuple[str, ...]
    #: missing nodes whose quarantine is over: to be looked up
    check_nodes: tuple[str, ...]
    #: missing nodes still in quarantine, with when they were first found missing
    quarantined: Mapping[str, float]


def _node_of(pod: JSON) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _age_order(pod: JSON) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("creationTimestamp") or ""), str(meta.get("name") or "")


def plan_sweep(
    pods: Sequence[JSON],
    node_names: Iterable[str],
    quarantined: Mapping[str, float],
    now: float,
    *,
    quarantine: float = QUARANTINE_S,
    terminated_threshold: int = TERMINATED_THRESHOLD,
) -> Sweep:
    """One pass of the pod GC over the cached pods and nodes; ``quarantined`` is the last pass's."""
    existing = set(node_names)
    terminated: list[JSON] = []
    if terminated_threshold > 0:
        finished = sorted((p for p in pods if pod_is_terminal(p)), key=_age_order)
        terminated = finished[: max(0, len(finished) - terminated_threshold)]
    unscheduled = [p for p in pods if (p.get("metadata") or {}).get("deletionTimestamp") and not _node_of(p)]
    missing = sorted({_node_of(p) for p in pods if _node_of(p) and _node_of(p) not in existing})
    since = {node: quarantined.get(node, now) for node in missing}
    due = tuple(node for node in missing if now - since[node] >= quarantine)
    return Sweep(
        terminated=tuple(obj_key(p) for p in terminated),
        unscheduled_terminating=tuple(obj_key(p) for p in unscheduled),
        check_nodes=due,
        quarantined={node: at for node, at in since.items() if node not in due},
    )


def orphans(pods: Sequence[JSON], deleted_nodes: Iterable[str]) -> tuple[str, ...]:
    """The pods bound to nodes the API confirmed deleted."""
    gone = set(deleted_nodes)
    return tuple(obj_key(p) for p in pods if _node_of(p) in gone)


class PodGarbageCollector:
    """The addon ``ttj_localcluster.nodes.podgc.PodGarbageCollector`` (kube-controller-manager's PodGC)."""

    name = "pod-garbage-collector"

    def __init__(
        self,
        *,
        period: float = PERIOD_S,
        quarantine: float = QUARANTINE_S,
        terminated_threshold: int = TERMINATED_THRESHOLD,
    ) -> None:
        self.period = period
        self.quarantine = quarantine
        self.terminated_threshold = terminated_threshold
        self.client: KubeClient | None = None
        self.pods: Informer | None = None
        self.nodes: Informer | None = None
        self._quarantined: dict[str, float] = {}
        self._lock = threading.Lock()  # one pass at a time (the loop's, or a caller's)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-gc", daemon=True)

    def start(self, kubeconfig_path: str) -> None:
        self.client = KubeClient.from_kubeconfig(kubeconfig_path)
        self.pods = Informer(self.client, "/api/v1/pods", "podgc-pods", self._stop)
        self.nodes = Informer(self.client, "/api/v1/nodes", "podgc-nodes", self._stop)
        for informer in (self.pods, self.nodes):
            informer.start()
        wait_synced([self.pods, self.nodes])
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self.client is not None:
            self.client.close()  # ends the watches
        for part in (self.pods, self.nodes):
            if part is not None:
                part.join(2)
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.collect()
            except Exception:
                if not self._stop.is_set():
                    log.exception("pod GC: pass failed")
            self._stop.wait(self.period)

    def collect(self) -> list[str]:
        """One pass now; the keys of the pods it deleted."""
        assert self.pods is not None
        assert self.nodes is not None
        with self._lock:
            pods = self.pods.items()
            sweep = plan_sweep(
                pods,
                (str(n["metadata"]["name"]) for n in self.nodes.items()),
                self._quarantined,
                time.monotonic(),
                quarantine=self.quarantine,
                terminated_threshold=self.terminated_threshold,
            )
            self._quarantined = dict(sweep.quarantined)
            deleted_nodes = [node for node in sweep.check_nodes if self._node_is_gone(node)]
            by_key = {obj_key(p): p for p in pods}
            work = [
                *((key, "terminated pod beyond the threshold") for key in sweep.terminated),
                *((key, "orphaned: its node no longer exists") for key in orphans(pods, deleted_nodes)),
                *((key, "unscheduled and terminating") for key in sweep.unscheduled_terminating),
            ]
            done: list[str] = []
            for key, why in dict(work).items():
                if self._force_delete(by_key[key], why):
                    done.append(key)
            return done

    def _node_is_gone(self, node: str) -> bool:
        assert self.client is not None
        try:
            return self.client.get(f"/api/v1/nodes/{node}") is None
        except Exception as exc:
            log.warning("pod GC: could not look up node %s (%s); checking again next pass", node, exc)
            return False

    def _force_delete(self, pod: JSON, why: str) -> bool:
        assert self.client is not None
        meta = pod["metadata"]
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": meta["uid"]},
        }
        try:
            self.client.request("DELETE", kubeapi.path("Pod", meta["namespace"], meta["name"]), body=options)
        except KubeError as exc:
            if exc.status not in (404, 409):  # gone already, or a successor of the same name
                log.warning("pod GC: deleting %s failed: %s", obj_key(pod), exc)
            return False
        log.info("pod GC: force-deleted pod %s (%s)", obj_key(pod), why)
        return True
