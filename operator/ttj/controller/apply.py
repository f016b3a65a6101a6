"""Apply the planner's actions to the API server with the official client (blocking; run in a thread).

Creates of existing names, deletes of missing objects and patches of vanished pods are not errors:
every action is idempotent, so a pass that repeats one after a lagging watch or a restart is safe.
A Lease or status write whose resourceVersion precondition fails raises :class:`Conflict`: the pass
stops there and the job is planned again from a fresh observation. So does a Lease create carrying an
election that finds the Lease already there: the election did not happen, and the status must not say it did.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from ttj import kubeapi
from ttj.planner import (
    CreateChild,
    DeleteChild,
    EmitEvent,
    LabelPod,
    RemoveFinalizer,
    ReplaceChild,
    UpdateLease,
    Write,
)
from ttj_contract import ANNOTATION_DELETED, FINALIZER, KIND

log = logging.getLogger("ttj.controller")

MERGE_PATCH = kubeapi.MERGE_PATCH


class Conflict(Exception):
    """A precondition failed (409): observe again and replan."""


@dataclass
class Applied:
    """What a pass did, for metrics and logs."""

    #: seconds from a loss's first evidence to its replacement's creation, per replacement created
    recoveries: list[float] = field(default_factory=list)


class Applier:
    def __init__(self, api: ApiClient) -> None:
        self.api = api

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str | None = None,
    ) -> Any:
        """One request; the JSON answer as dicts; errors as ApiException (status 404, 409, ...)."""
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        elif body is not None:
            headers["Content-Type"] = "application/json"
        method, url, headers, body, _post = self.api.param_serialize(
            method, path, header_params=headers, body=body, auth_settings=["BearerToken"]
        )
        response = self.api.call_api(method, url, header_params=headers, body=body, _request_timeout=30)
        data = response.read()  # type: ignore[no-untyped-call]
        text = data.decode("utf-8") if data else ""
        if not 200 <= response.status <= 299:
            raise ApiException(http_resp=response, body=text, data=None)
        return json.loads(text) if text else {}

    @staticmethod
    def path(kind: str, namespace: str, name: str | None = None) -> str:
        return kubeapi.path(kind, namespace, name)

    def apply(self, namespace: str, writes: Sequence[Write]) -> Applied:
        """Apply in order."""
        done = Applied()
        for action in writes:
            try:
                self._apply_one(namespace, action, done)
            except ApiException as exc:
                if exc.status == 409 and isinstance(action, UpdateLease) and action.resource_version:
                    raise Conflict(f"lease {action.name} changed") from exc
                if exc.status == 409 and isinstance(action, CreateChild) and _elects(action):
                    # The pass saw no Lease (a lagging watch) and elected in the create: the existing Lease
                    # does not hold that election, so the status must not claim it. Observe again.
                    raise Conflict(f"lease {action.name} exists already") from exc
                if exc.status in (404, 409):
                    continue  # gone already / exists already: the action's intent holds
                if exc.status == 403 and "being terminated" in str(exc.body or ""):
                    continue  # the namespace is going away, and the job with it
                raise
        return done

    def _apply_one(self, namespace: str, action: Write, done: Applied) -> None:
        if isinstance(action, CreateChild):
            self._call("POST", self.path(action.kind, namespace), action.manifest)
            if action.recovery_since is not None:
                done.recoveries.append(max(0.0, time.time() - action.recovery_since.timestamp()))
        elif isinstance(action, ReplaceChild):
            self._call("PATCH", self.path(action.kind, namespace, action.name), action.manifest, MERGE_PATCH)
        elif isinstance(action, DeleteChild):
            path = self.path(action.kind, namespace, action.name)
            if action.mark_deliberate:
                self._call("PATCH", path, {"metadata": {"annotations": {ANNOTATION_DELETED: "true"}}}, MERGE_PATCH)
            options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
            if action.force:
                options["gracePeriodSeconds"] = 0
            self._call("DELETE", path, options)
        elif isinstance(action, RemoveFinalizer):
            self._remove_finalizer(namespace, action.pod)
        elif isinstance(action, LabelPod):
            self._call(
                "PATCH", self.path("Pod", namespace, action.pod), {"metadata": {"labels": action.labels}}, MERGE_PATCH
            )
        elif isinstance(action, UpdateLease):
            self._call("PATCH", self.path("Lease", namespace, action.name), lease_patch(action), MERGE_PATCH)

    def release_finalizer(self, namespace: str, pod: str) -> None:
        """Remove our finalizer from a pod whose job is gone; a pod already gone is fine."""
        try:
            self._remove_finalizer(namespace, pod)
        except ApiException as exc:
            if exc.status != 404:
                log.warning("could not release pod %s/%s: %s", namespace, pod, exc.reason)

    def _remove_finalizer(self, namespace: str, pod: str) -> None:
        path = self.path("Pod", namespace, pod)
        for _ in range(5):
            current = self._call("GET", path)
            finalizers = current["metadata"].get("finalizers") or []
            if FINALIZER not in finalizers:
                return
            patch = {
                "metadata": {
                    "resourceVersion": current["metadata"]["resourceVersion"],
                    "finalizers": [f for f in finalizers if f != FINALIZER] or None,
                }
            }
            try:
                self._call("PATCH", path, patch, MERGE_PATCH)
                return
            except ApiException as exc:
                if exc.status != 409:
                    raise
        raise Conflict(f"pod {pod} kept changing while removing the finalizer")

    def write_status(
        self, namespace: str, name: str, resource_version: str | None, patch: dict[str, Any]
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"status": patch}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        try:
            result: dict[str, Any] = self._call(
                "PATCH", self.path(KIND, namespace, name) + "/status", body, MERGE_PATCH
            )
        except ApiException as exc:
            if exc.status == 409:
                raise Conflict(f"job {name} changed") from exc
            raise
        return result

    def delete_job(self, namespace: str, name: str) -> None:
        try:
            self._call(
                "DELETE",
                self.path(KIND, namespace, name),
                {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"},
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def post_event(self, job: dict[str, Any], event: EmitEvent) -> None:
        """A core/v1 Event about the job."""
        metadata = job["metadata"]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
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
            "message": event.message[:1024],
            "source": {"component": "ttj-operator"},
            "reportingComponent": "transient.training/ttj-operator",
            "reportingInstance": "ttj-operator",
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self._call("POST", f"/api/v1/namespaces/{metadata['namespace']}/events", body)
        except ApiException as exc:  # events are best effort
            log.warning("could not post event %s for %s: %s", event.reason, metadata["name"], exc.reason)


def _elects(action: CreateChild) -> bool:
    """A Lease create that carries a chief: its 409 means the election did not happen."""
    return action.kind == "Lease" and bool((action.manifest.get("spec") or {}).get("holderIdentity"))


def lease_patch(action: UpdateLease) -> dict[str, Any]:
    spec = action.spec_fields()
    metadata: dict[str, Any] = {}
    if action.resource_version:
        metadata["resourceVersion"] = action.resource_version
    if action.annotations:
        metadata["annotations"] = dict(action.annotations)
    patch: dict[str, Any] = {}
    if spec:
        patch["spec"] = spec
    if metadata:
        patch["metadata"] = metadata
    return patch
