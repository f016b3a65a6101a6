"""Deployment and ReplicaSet controllers as API clients (what kube-controller-manager runs for apps/v1).

Covered: ReplicaSets named ``<deployment>-<pod-template-hash>`` with the ``pod-template-hash`` label
and selector, controller ownerReferences (Deployment → ReplicaSet → Pod; deletion cascades through
the API server's garbage collector), ``Recreate`` and ``RollingUpdate`` (maxSurge / maxUnavailable),
revisions, and status (replicas, updatedReplicas, readyReplicas, availableReplicas,
unavailableReplicas, observedGeneration, Available/Progressing conditions). Not covered: paused
deployments, rollbacks, progressDeadlineSeconds, revisionHistoryLimit pruning, minReadySeconds.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from ttj import kubeapi
from ttj.kubeapi import JSON, KubeClient, KubeError
from ttj_contract import LABEL_POD_TEMPLATE_HASH

from .kube import Informer, WorkQueue, obj_key, wait_synced
from .pools import now_rfc3339
from .predicates import pod_is_terminal
from .scheduler import replace_condition

REVISION_ANNOTATION = "deployment.kubernetes.io/revision"
SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
EXPECTATION_TIMEOUT_S = 30.0


def _fnv32a(data: bytes) -> int:
    value = 0x811C9DC5
    for byte in data:
        value ^= byte
        value = (value * 0x01000193) & 0xFFFFFFFF
    return value


def pod_template_hash(template: JSON, collision_count: int = 0) -> str:
    """FNV-32a of the template, spelt with Kubernetes' safe alphabet, as the Deployment controller does."""
    data = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    if collision_count:
        data += str(collision_count).encode()
    return "".join(SAFE_ALPHABET[ord(c) % len(SAFE_ALPHABET)] for c in str(_fnv32a(data)))


def _controller_uid(obj: JSON) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def _owner_ref(owner: JSON, kind: str) -> JSON:
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _pod_ready(pod: JSON) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def _scaled(value: Any, total: int, round_up: bool) -> int:
    if value is None:
        value = "25%"
    if isinstance(value, str) and value.endswith("%"):
        share = float(value[:-1]) * total / 100
        return math.ceil(share) if round_up else math.floor(share)
    return int(value)


class DeploymentController:
    """The addon ``ttj_localcluster.nodes.deployments.DeploymentController`` (Deployments + ReplicaSets)."""

    name = "deployment-controller"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        # client-go's "expectations": creations/deletions sent but not yet seen through the watch
        self._creating: dict[str, dict[str, float]] = {}
        self._deleting: dict[str, dict[str, float]] = {}
        self.client: KubeClient | None = None
        self.deployments: Informer | None = None
        self.replicasets: Informer | None = None
        self.pods: Informer | None = None
        self.deployment_queue: WorkQueue | None = None
        self.replicaset_queue: WorkQueue | None = None

    def start(self, kubeconfig_path: str) -> None:
        self.client = KubeClient.from_kubeconfig(kubeconfig_path)
        self.deployments = Informer(self.client, "/apis/apps/v1/deployments", "deployments", self._stop)
        self.replicasets = Informer(self.client, "/apis/apps/v1/replicasets", "replicasets", self._stop)
        self.pods = Informer(self.client, "/api/v1/pods", "rs-pods", self._stop)
        self.deployment_queue = WorkQueue("deployments", self._sync_deployment, self._stop)
        self.replicaset_queue = WorkQueue("replicasets", self._sync_replicaset, self._stop)
        self.deployments.add_handler(lambda _k, d, _o: self._queue_deployment(obj_key(d)))
        self.replicasets.add_handler(self._on_replicaset)
        self.pods.add_handler(self._on_pod)
        self.deployment_queue.start()
        self.replicaset_queue.start()
        informers = [self.deployments, self.replicasets, self.pods]
        for informer in informers:
            informer.start()
        wait_synced(informers)

    def stop(self) -> None:
        self._stop.set()
        if self.client is not None:
            self.client.close()  # ends the watches
        for part in (self.deployments, self.replicasets, self.pods, self.deployment_queue, self.replicaset_queue):
            if part is not None:
                part.join(2)

    # events ------------------------------------------------------------------------------------
    def _queue_deployment(self, key: str) -> None:
        assert self.deployment_queue is not None
        self.deployment_queue.add(key)

    def _owner_key(self, obj: JSON, kind: str) -> str | None:
        for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
            if ref.get("controller") and ref.get("kind") == kind:
                return f"{obj['metadata']['namespace']}/{ref['name']}"
        return None

    def _on_replicaset(self, _kind: str, rs: JSON, _old: JSON | None) -> None:
        assert self.replicaset_queue is not None
        self.replicaset_queue.add(obj_key(rs))
        owner = self._owner_key(rs, "Deployment")
        if owner:
            self._queue_deployment(owner)

    def _on_pod(self, _kind: str, pod: JSON, _old: JSON | None) -> None:
        assert self.replicaset_queue is not None
        owner = self._owner_key(pod, "ReplicaSet")
        if owner:
            self.replicaset_queue.add(owner)

    # replica sets ------------------------------------------------------------------------------
    def _owned_pods(self, rs: JSON) -> list[JSON]:
        assert self.pods is not None
        uid = rs["metadata"]["uid"]
        namespace = rs["metadata"]["namespace"]
        return [
            p for p in self.pods.items() if p["metadata"].get("namespace") == namespace and _controller_uid(p) == uid
        ]

    def _pending(self, table: dict[str, dict[str, float]], key: str) -> dict[str, float]:
        now = time.monotonic()
        with self._lock:
            entries = {n: t for n, t in table.get(key, {}).items() if t > now}
            table[key] = entries
            return dict(entries)

    def _sync_replicaset(self, key: str) -> float | None:
        assert self.replicasets is not None
        assert self.client is not None
        rs = self.replicasets.get(key)
        if rs is None or rs["metadata"].get("deletionTimestamp"):
            return None
        namespace, name = rs["metadata"]["namespace"], rs["metadata"]["name"]
        pods = self._owned_pods(rs)
        active = [p for p in pods if not pod_is_terminal(p) and not p["metadata"].get("deletionTimestamp")]
        with self._lock:  # a creation once observed is no longer expected (even if the pod is gone again)
            for observed in {p["metadata"]["name"] for p in pods} & set(self._creating.get(key, {})):
                del self._creating[key][observed]
        creating = self._pending(self._creating, key)
        deleting = self._pending(self._deleting, key)
        active_names = {p["metadata"]["name"] for p in active} - set(deleting)
        count = len(active_names) + len(creating)
        wanted = int((rs.get("spec") or {}).get("replicas", 1))
        failure: KubeError | None = None  # a create or delete the API refused: the ReplicaFailure condition
        if count < wanted:
            failure = self._create_pods(key, rs, wanted - count)
        elif count > wanted:
            failure = self._delete_pods(key, namespace, _deletion_order(active, active_names)[: count - wanted])
        status = _replicaset_status(rs, active)
        current = rs.get("status") or {}
        conditions = _replica_failure(list(current.get("conditions") or []), failure, count < wanted)
        if any(current.get(k, 0) != v for k, v in status.items()) or conditions != list(
            current.get("conditions") or []
        ):
            self.client.merge_patch(
                f"/apis/apps/v1/namespaces/{namespace}/replicasets/{name}/status",
                {"status": {**status, "conditions": conditions or None}},
            )
        if failure is not None:
            raise failure  # retried with the queue's backoff, as the ReplicaSet controller does
        return 1.0 if creating or deleting else None

    def _create_pods(self, key: str, rs: JSON, count: int) -> KubeError | None:
        """Creates ``count`` pods of ``rs``; the refusal that stopped them."""
        assert self.client is not None
        for _ in range(count):
            pod = _replica_pod(rs)
            create = functools.partial(
                self.client.request, "POST", kubeapi.path("Pod", rs["metadata"]["namespace"]), body=pod
            )
            failure = self._send_expected(self._creating, key, pod["metadata"]["name"], create)
            if failure is not None:
                return failure
        return None

    def _delete_pods(self, key: str, namespace: str, victims: list[JSON]) -> KubeError | None:
        """Deletes ``victims``; the refusal that stopped them."""
        assert self.client is not None
        for pod in victims:
            pod_name = pod["metadata"]["name"]
            delete = functools.partial(self.client.delete, kubeapi.path("Pod", namespace, pod_name))
            failure = self._send_expected(self._deleting, key, pod_name, delete)
            if failure is not None:
                return failure
        return None

    def _send_expected(
        self, expected: dict[str, dict[str, float]], key: str, pod_name: str, send: Callable[[], object]
    ) -> KubeError | None:
        """Sends one create or delete of ``pod_name``, expected until the watch shows it; the API's refusal."""
        with self._lock:
            expected.setdefault(key, {})[pod_name] = time.monotonic() + EXPECTATION_TIMEOUT_S
        try:
            send()
        except Exception as exc:
            with self._lock:
                expected.get(key, {}).pop(pod_name, None)
            if not isinstance(exc, KubeError):
                raise
            return exc
        return None

    # deployments -------------------------------------------------------------------------------
    def _owned_replicasets(self, deployment: JSON) -> list[JSON]:
        assert self.replicasets is not None
        uid = deployment["metadata"]["uid"]
        namespace = deployment["metadata"]["namespace"]
        return [
            rs
            for rs in self.replicasets.items()
            if rs["metadata"].get("namespace") == namespace
            and _controller_uid(rs) == uid
            and not rs["metadata"].get("deletionTimestamp")
        ]

    def _set_replicas(self, rs: JSON, replicas: int) -> None:
        assert self.client is not None
        if int((rs.get("spec") or {}).get("replicas", 0)) == replicas:
            return
        meta = rs["metadata"]
        self.client.merge_patch(
            f"/apis/apps/v1/namespaces/{meta['namespace']}/replicasets/{meta['name']}", {"spec": {"replicas": replicas}}
        )

    def _sync_deployment(self, key: str) -> float | None:
        assert self.deployments is not None
        assert self.client is not None
        deployment = self.deployments.get(key)
        if deployment is None or deployment["metadata"].get("deletionTimestamp"):
            return None
        meta, spec = deployment["metadata"], deployment.get("spec") or {}
        meta["namespace"]
        replicas = int(spec.get("replicas", 1))
        template = spec.get("template") or {}
        template_hash = pod_template_hash(template, int((deployment.get("status") or {}).get("collisionCount", 0)))
        owned = self._owned_replicasets(deployment)
        new_rs = next(
            (rs for rs in owned if (rs["metadata"].get("labels") or {}).get(LABEL_POD_TEMPLATE_HASH) == template_hash),
            None,
        )
        old = [rs for rs in owned if rs is not new_rs]
        strategy = spec.get("strategy") or {}
        recreate = strategy.get("type") == "Recreate"
        requeue: float | None = None
        if new_rs is None:
            revision = 1 + max(
                (int(rs["metadata"].get("annotations", {}).get(REVISION_ANNOTATION, 0)) for rs in owned), default=0
            )
            initial = 0 if (recreate and old) or (old and not recreate) else replicas
            new_rs = self._create_replicaset(deployment, template, template_hash, initial, revision)
            if new_rs is None:
                return 0.5  # created meanwhile by an earlier pass: see it through the watch
            requeue = 0.5
        if recreate:
            for rs in old:
                self._set_replicas(rs, 0)
            if any(self._owned_pods(rs) for rs in old if not self._all_terminal(rs)):
                requeue = 0.5
            else:
                self._set_replicas(new_rs, replicas)
        elif not old:
            self._set_replicas(new_rs, replicas)
        else:
            requeue = self._roll(spec, replicas, new_rs, old) or requeue
        self._write_status(deployment, new_rs, old, replicas, spec)
        return requeue

    def _all_terminal(self, rs: JSON) -> bool:
        return all(pod_is_terminal(p) for p in self._owned_pods(rs))

    def _roll(self, spec: JSON, replicas: int, new_rs: JSON, old: list[JSON]) -> float | None:
        rolling = (spec.get("strategy") or {}).get("rollingUpdate") or {}
        surge = _scaled(rolling.get("maxSurge"), replicas, round_up=True)
        unavailable = _scaled(rolling.get("maxUnavailable"), replicas, round_up=False)
        if surge == 0 and unavailable == 0:
            unavailable = 1
        new_spec = int((new_rs.get("spec") or {}).get("replicas", 0))
        total = new_spec + sum(int((rs.get("spec") or {}).get("replicas", 0)) for rs in old)
        room = replicas + surge - total
        if room > 0 and new_spec < replicas:
            self._set_replicas(new_rs, min(replicas, new_spec + room))
        available = sum(int((rs.get("status") or {}).get("availableReplicas", 0)) for rs in [new_rs, *old])
        removable = max(0, available - (replicas - unavailable))
        for rs in sorted(old, key=lambda r: r["metadata"].get("creationTimestamp", "")):
            old_spec = int((rs.get("spec") or {}).get("replicas", 0))
            old_unavailable = max(0, old_spec - int((rs.get("status") or {}).get("availableReplicas", 0)))
            cut = min(old_spec, removable + old_unavailable)
            if cut > 0:
                self._set_replicas(rs, old_spec - cut)
                removable -= max(0, cut - old_unavailable)
        done = new_spec == replicas and all(int((rs.get("spec") or {}).get("replicas", 0)) == 0 for rs in old)
        return None if done else 0.5

    def _create_replicaset(
        self, deployment: JSON, template: JSON, template_hash: str, replicas: int, revision: int
    ) -> JSON | None:
        assert self.client is not None
        meta = deployment["metadata"]
        spec = deployment.get("spec") or {}
        rs_template = copy.deepcopy(template)
        rs_template.setdefault("metadata", {}).setdefault("labels", {})[LABEL_POD_TEMPLATE_HASH] = template_hash
        selector = copy.deepcopy(spec.get("selector") or {})
        selector.setdefault("matchLabels", {})[LABEL_POD_TEMPLATE_HASH] = template_hash
        rs = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": f"{meta['name']}-{template_hash}",
                "namespace": meta["namespace"],
                "labels": {**(rs_template["metadata"].get("labels") or {})},
                "annotations": {
                    REVISION_ANNOTATION: str(revision),
                    "deployment.kubernetes.io/desired-replicas": str(spec.get("replicas", 1)),
                },
                "ownerReferences": [_owner_ref(deployment, "Deployment")],
            },
            "spec": {"replicas": replicas, "selector": selector, "template": rs_template},
        }
        return self.client.create(f"/apis/apps/v1/namespaces/{meta['namespace']}/replicasets", rs)

    def _write_status(self, deployment: JSON, new_rs: JSON, old: list[JSON], replicas: int, spec: JSON) -> None:
        assert self.client is not None
        status, conditions = _deployment_status(deployment, new_rs, old, replicas, spec)
        current = deployment.get("status") or {}
        changed = any(current.get(k, 0) != v for k, v in status.items()) or [
            (c.get("type"), c.get("status"), c.get("reason")) for c in current.get("conditions") or []
        ] != [(c.get("type"), c.get("status"), c.get("reason")) for c in conditions]
        if changed:
            meta = deployment["metadata"]
            self.client.merge_patch(
                f"/apis/apps/v1/namespaces/{meta['namespace']}/deployments/{meta['name']}/status",
                {"status": {**status, "conditions": conditions}},
            )


REPLICA_FAILURE = "ReplicaFailure"


def _replica_failure(conditions: list[JSON], failure: KubeError | None, short: bool) -> list[JSON]:
    """The ReplicaSet's ReplicaFailure condition: set with the API's message when a create or delete was
    refused, removed once the replicas are managed without one (kube's ReplicaSet controller)."""
    if failure is not None:
        reason = "FailedCreate" if short else "FailedDelete"
        return replace_condition(
            conditions,
            {
                "type": REPLICA_FAILURE,
                "status": "True",
                "reason": reason,
                "message": failure.message,
                "lastTransitionTime": now_rfc3339(),
            },
        )
    return [c for c in conditions if c.get("type") != REPLICA_FAILURE]


def _replica_pod(rs: JSON) -> JSON:
    """A new pod of ``rs``'s template, named ``<rs>-<5 random characters>`` as kube's ReplicaSet controller does."""
    meta = rs["metadata"]
    template = (rs.get("spec") or {}).get("template") or {}
    template_meta = copy.deepcopy(template.get("metadata") or {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{meta['name']}-{''.join(secrets.choice(SAFE_ALPHABET) for _ in range(5))}",
            "namespace": meta["namespace"],
            "labels": template_meta.get("labels") or {},
            "annotations": template_meta.get("annotations") or {},
            "ownerReferences": [{**_owner_ref(rs, "ReplicaSet")}],
        },
        "spec": copy.deepcopy(template.get("spec") or {}),
    }


def _deletion_order(active: list[JSON], deletable: set[str]) -> list[JSON]:
    """The ``deletable`` pods, least useful first: unscheduled, then not ready, then the newest."""
    return sorted(
        (p for p in active if p["metadata"]["name"] in deletable),
        key=lambda p: (
            bool((p.get("spec") or {}).get("nodeName")),
            _pod_ready(p),
            [-ord(c) for c in p["metadata"].get("creationTimestamp", "")],
        ),
    )


def _replicaset_status(rs: JSON, active: list[JSON]) -> JSON:
    """The counts of ``rs``'s status from its pods that run or wait to."""
    ready = [p for p in active if _pod_ready(p)]
    return {
        "replicas": len(active),
        "fullyLabeledReplicas": len(active),
        "readyReplicas": len(ready),
        "availableReplicas": len(ready),
        "observedGeneration": rs["metadata"].get("generation", 1),
    }


def _deployment_status(
    deployment: JSON, new_rs: JSON, old: list[JSON], replicas: int, spec: JSON
) -> tuple[JSON, list[JSON]]:
    """The Deployment's status counts and conditions, from its ReplicaSets' status."""
    every = [new_rs, *old]
    totals = {
        field: sum(int((rs.get("status") or {}).get(field, 0)) for rs in every)
        for field in ("replicas", "readyReplicas", "availableReplicas")
    }
    available = totals["availableReplicas"]
    rolling = (spec.get("strategy") or {}).get("rollingUpdate") or {}
    max_unavailable = (
        0
        if (spec.get("strategy") or {}).get("type") == "Recreate"
        else _scaled(rolling.get("maxUnavailable"), replicas, False)
    )
    updated = int((new_rs.get("status") or {}).get("replicas", 0))
    complete = updated == replicas and totals["replicas"] == replicas and available >= replicas
    now = now_rfc3339()
    conditions = list((deployment.get("status") or {}).get("conditions") or [])
    conditions = replace_condition(conditions, _available_condition(available >= replicas - max_unavailable, now))
    conditions = replace_condition(conditions, _progressing_condition(new_rs["metadata"]["name"], complete, now))
    conditions = _with_replicasets_failure(conditions, every, now)
    status: JSON = {
        "observedGeneration": deployment["metadata"].get("generation", 1),
        "replicas": totals["replicas"],
        "updatedReplicas": updated,
        "readyReplicas": totals["readyReplicas"],
        "availableReplicas": available,
        "unavailableReplicas": max(0, replicas - available),
    }
    return status, conditions


def _available_condition(available: bool, now: str) -> JSON:
    return {
        "type": "Available",
        "status": "True" if available else "False",
        "reason": "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
        "message": "Deployment has minimum availability."
        if available
        else "Deployment does not have minimum availability.",
        "lastUpdateTime": now,
        "lastTransitionTime": now,
    }


def _progressing_condition(rs_name: str, complete: bool, now: str) -> JSON:
    return {
        "type": "Progressing",
        "status": "True",
        "reason": "NewReplicaSetAvailable" if complete else "ReplicaSetUpdated",
        "message": f'ReplicaSet "{rs_name}" has successfully progressed.'
        if complete
        else f'ReplicaSet "{rs_name}" is progressing.',
        "lastUpdateTime": now,
        "lastTransitionTime": now,
    }


def _with_replicasets_failure(conditions: list[JSON], replicasets: list[JSON], now: str) -> list[JSON]:
    """The ReplicaSets' refused creates, as the Deployment controller surfaces them."""
    failures = [
        c
        for rs in replicasets
        for c in (rs.get("status") or {}).get("conditions") or []
        if c.get("type") == REPLICA_FAILURE and c.get("status") == "True"
    ]
    if failures:
        return replace_condition(conditions, {**failures[0], "lastUpdateTime": now})
    return [c for c in conditions if c.get("type") != REPLICA_FAILURE]
