"""Apply the planner's writes to the API server (blocking; run in a thread), through a :class:`KubeApi`.

The request bodies are the planner's own (:mod:`ttj.planner.interpreter`), so a write means here what it
means in the unit tests and the simulator. Creates of existing names, deletes of missing objects and
patches of vanished pods are not errors: every write is idempotent, so a pass that repeats one after a
lagging watch or a restart is safe. A refused :func:`~ttj.planner.interpreter.conditional` write (a Lease
update whose resourceVersion precondition fails, a Lease create carrying an election that finds the
Lease already there) and a status write whose precondition fails raise :class:`Conflict`: the pass stops
there and the job is planned again from a fresh observation. A delete that names the uid it observed, of a
name that now holds another object, finds its object gone: its patch answers 422 (``metadata.uid`` is
immutable) and its delete 409, both harmless.

Any other refusal of a write (a ResourceQuota or Pod Security admission answering 403, a 422, a 429, a
5xx) does not stop the pass: it is recorded as a :class:`~ttj.planner.actions.Refusal`, the remaining
writes (the chief election included) still apply, and the controller plans the pass again with the
refusals so that its status and Events carry the API's message. Only a refused conditional write still
raises: the status relies on it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from tenacity import Retrying, retry_if_exception, stop_after_attempt

from ttj import kubeapi
from ttj.kubeapi import MERGE_PATCH, KubeError
from ttj.planner import (
    CreateChild,
    DeleteChild,
    EmitEvent,
    LabelPod,
    Refusal,
    RemoveFinalizer,
    ReplaceChild,
    UpdateLease,
    Write,
)
from ttj.planner.actions import EVENT_MESSAGE_LIMIT
from ttj.planner.interpreter import (
    Conflict,
    conditional,
    delete_options,
    deliberate_patch,
    finalizer_patch,
    labels_patch,
    lease_patch,
)
from ttj_contract import GROUP, KIND, format_time

__all__ = ["Applied", "Applier", "Conflict", "KubeApi"]

log = logging.getLogger("ttj.controller")

#: Attempts at removing a finalizer from a pod that keeps changing under us.
FINALIZER_ATTEMPTS = 5


class KubeApi(Protocol):
    """The one call the Applier makes: :meth:`ttj.kubeapi.KubeClient.request`."""

    def request(
        self, method: str, path: str, *, body: Any = None, content_type: str = "application/json"
    ) -> dict[str, Any]:
        """The JSON answer; an error answer raises :class:`~ttj.kubeapi.KubeError`."""
        ...


@dataclass
class Applied:
    """What a pass did, for metrics and logs."""

    #: seconds from a loss's first evidence to its replacement's creation, per replacement created
    recoveries: list[float] = field(default_factory=list)
    #: writes the API refused, in order; the others were applied
    refused: list[Refusal] = field(default_factory=list)
    #: the longest Retry-After a refusal asked for (429, 503)
    retry_after_seconds: float | None = None
    #: the chief's Lease as the pass's last write of it left it (the API's answer)
    lease: dict[str, Any] | None = None
    #: the children created or relabelled, as (kind, name, the API's answer)
    written: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)


def _refusal(write: Write, exc: KubeError) -> Refusal:
    if isinstance(write, CreateChild | ReplaceChild | DeleteChild):
        kind, name = write.kind, write.name
    elif isinstance(write, UpdateLease):
        kind, name = "Lease", write.name
    else:
        kind, name = "Pod", write.pod
    verb = "create" if isinstance(write, CreateChild) else "delete" if isinstance(write, DeleteChild) else "patch"
    return Refusal(kind, name, verb, exc.status, exc.message)


def _names_a_successor(write: Write, exc: KubeError) -> bool:
    """A uid-carrying patch refused because the name now holds another object: kube-apiserver answers 422
    (``metadata.uid`` is immutable), as a delete's uid precondition answers 409. The object the write meant
    is gone either way; its successor is observed and planned like any other child."""
    return isinstance(write, DeleteChild) and write.uid is not None and "metadata.uid" in exc.invalid_fields


def _changed_meanwhile(exc: BaseException) -> bool:
    return isinstance(exc, KubeError) and exc.status == 409


class Applier:
    def __init__(self, api: KubeApi) -> None:
        self.api = api

    def _patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self.api.request("PATCH", path, body=patch, content_type=MERGE_PATCH)

    def apply(self, namespace: str, writes: Sequence[Write]) -> Applied:
        """Apply in order."""
        done = Applied()
        for write in writes:
            try:
                self._apply_one(namespace, write, done)
            except KubeError as exc:
                if exc.status in (404, 409) or _names_a_successor(write, exc):
                    if conditional(write):
                        raise Conflict(f"{type(write).__name__} refused: {exc.message}") from exc
                    continue  # gone already / exists already: the write's intent holds
                if exc.status == 403 and "being terminated" in exc.body:
                    continue  # the namespace is going away, and the job with it
                if conditional(write):
                    raise
                log.warning("%s refused (HTTP %d): %s", type(write).__name__, exc.status, exc.message)
                done.refused.append(_refusal(write, exc))
                if exc.retry_after_seconds is not None:
                    done.retry_after_seconds = max(done.retry_after_seconds or 0.0, exc.retry_after_seconds)
        return done

    def _apply_one(self, namespace: str, write: Write, done: Applied) -> None:
        if isinstance(write, CreateChild):
            answer = self.api.request("POST", kubeapi.path(write.kind, namespace), body=write.manifest)
            done.written.append((write.kind, write.name, answer))
            if write.recovery_since is not None:
                done.recoveries.append(max(0.0, time.time() - write.recovery_since.timestamp()))
        elif isinstance(write, ReplaceChild):
            self._patch(kubeapi.path(write.kind, namespace, write.name), write.manifest)
        elif isinstance(write, DeleteChild):
            path = kubeapi.path(write.kind, namespace, write.name)
            if write.mark_deliberate:
                self._patch(path, deliberate_patch(write))
            self.api.request("DELETE", path, body=delete_options(write))
        elif isinstance(write, RemoveFinalizer):
            self._remove_finalizer(namespace, write.pod)
        elif isinstance(write, LabelPod):
            answer = self._patch(kubeapi.path("Pod", namespace, write.pod), labels_patch(write))
            done.written.append(("Pod", write.pod, answer))
        else:
            done.lease = self._patch(kubeapi.path("Lease", namespace, write.name), lease_patch(write))

    def release_finalizer(self, namespace: str, pod: str) -> None:
        """Remove our finalizer from a pod whose job is gone; a pod already gone is fine."""
        try:
            self._remove_finalizer(namespace, pod)
        except KubeError as exc:
            if exc.status != 404:
                log.warning("could not release pod %s/%s: %s", namespace, pod, exc.message)

    def _remove_finalizer(self, namespace: str, pod: str) -> None:
        """Read the pod, then patch its finalizer list under the resourceVersion read; again if it changed."""
        path = kubeapi.path("Pod", namespace, pod)
        retrying = Retrying(
            stop=stop_after_attempt(FINALIZER_ATTEMPTS), retry=retry_if_exception(_changed_meanwhile), reraise=True
        )
        try:
            for attempt in retrying:
                with attempt:
                    patch = finalizer_patch(self.api.request("GET", path))
                    if patch is not None:
                        self._patch(path, patch)
        except KubeError as exc:
            if _changed_meanwhile(exc):
                raise Conflict(f"pod {pod} kept changing while removing the finalizer") from exc
            raise

    def write_status(
        self, namespace: str, name: str, resource_version: str | None, patch: dict[str, Any]
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"status": patch}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        try:
            return self._patch(kubeapi.path(KIND, namespace, name, "status"), body)
        except KubeError as exc:
            if exc.status == 409:
                raise Conflict(f"job {name} changed") from exc
            raise

    def delete_job(self, namespace: str, name: str) -> None:
        options = delete_options(DeleteChild(KIND, name))
        try:
            self.api.request("DELETE", kubeapi.path(KIND, namespace, name), body=options)
        except KubeError as exc:
            if exc.status != 404:
                raise

    def post_event(self, job: dict[str, Any], event: EmitEvent, at: datetime | None = None) -> None:
        """A core/v1 Event about the job, stamped ``at`` (default: now); best effort."""
        metadata = job["metadata"]
        now = format_time(at or datetime.now(UTC))
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{metadata['name']}.", "namespace": metadata["namespace"]},
            "involvedObject": {
                "apiVersion": job.get("apiVersion"),
                "kind": job.get("kind"),
                "name": metadata["name"],
                "namespace": metadata["namespace"],
                "uid": metadata.get("uid"),
                "resourceVersion": metadata.get("resourceVersion"),
            },
            "type": event.type,
            "reason": event.reason,
            "message": event.message[:EVENT_MESSAGE_LIMIT],
            "source": {"component": "ttj-operator"},
            "reportingComponent": f"{GROUP}/ttj-operator",
            "reportingInstance": "ttj-operator",
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.api.request("POST", kubeapi.path("Event", metadata["namespace"]), body=body)
        except KubeError as exc:
            log.warning("could not post event %s for %s: %s", event.reason, metadata["name"], exc.message)
