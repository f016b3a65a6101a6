"""An in-memory stand-in for the API server: apply a Plan's actions to an :class:`Observed`.

For tests and the what-if simulator: it follows the API's rules the planner relies on (finalizers
hold a deleted pod, deterministic names conflict, a Lease update with a stale resourceVersion is
refused) but runs no kubelet or scheduler — callers move pods through their phases themselves.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ttj.planner.actions import (
    CreateChild,
    DeleteChild,
    EmitEvent,
    LabelPod,
    RemoveFinalizer,
    ReplaceChild,
    UpdateLease,
    Write,
)
from ttj.planner.core import Plan, PlannerConfig, plan
from ttj.planner.observed import Obj, Observed, meta, name_of
from ttj_contract import ANNOTATION_DELETED, format_time


class Conflict(Exception):
    """A precondition (resourceVersion) failed, as the API answers 409."""


@dataclass
class World:
    """One job and its children, kept in memory."""

    job: dict[str, Any]
    observed: Observed = field(default_factory=Observed)
    events: list[EmitEvent] = field(default_factory=list)
    job_deleted: bool = False
    _versions: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def _stamp(self, obj: Obj, now: datetime) -> None:
        metadata = obj.setdefault("metadata", {})
        metadata.setdefault("creationTimestamp", format_time(now))
        metadata.setdefault("uid", f"uid-{next(self._versions)}")
        metadata["resourceVersion"] = str(next(self._versions))

    def pod(self, name: str) -> Obj | None:
        return next((p for p in self.observed.pods if name_of(p) == name), None)

    def reconcile(self, now: datetime, config: PlannerConfig | None = None) -> Plan:
        """Plan, apply every action, write the status: one operator pass."""
        result = plan(self.job, self.observed, now, config)
        try:
            for write in result.writes:
                self.apply(write, now)
        except Conflict:
            return result  # as the controller does: no status write, replan later
        self.job["status"] = copy.deepcopy(result.status)
        self.events.extend(result.events)
        self.job_deleted = self.job_deleted or result.delete_job
        return result

    def apply(self, action: Write | EmitEvent, now: datetime) -> None:
        if isinstance(action, CreateChild):
            self._create(copy.deepcopy(action.manifest), now)
        elif isinstance(action, ReplaceChild):
            self.observed.children[(action.kind, action.name)] = copy.deepcopy(action.manifest)
        elif isinstance(action, DeleteChild):
            self._delete(action, now)
        elif isinstance(action, RemoveFinalizer):
            pod = self.pod(action.pod)
            if pod is not None:
                meta(pod)["finalizers"] = [
                    f for f in meta(pod).get("finalizers") or [] if f != "transient.training/accounting"
                ]
                if meta(pod).get("deletionTimestamp") and not meta(pod)["finalizers"]:
                    self.observed.pods.remove(pod)
        elif isinstance(action, LabelPod):
            pod = self.pod(action.pod)
            if pod is not None:
                labels = meta(pod).setdefault("labels", {})
                for key, value in action.labels.items():
                    if value is None:
                        labels.pop(key, None)
                    else:
                        labels[key] = value
        elif isinstance(action, UpdateLease):
            self._update_lease(action, now)
        elif isinstance(action, EmitEvent):
            self.events.append(action)

    def _create(self, manifest: Obj, now: datetime) -> None:
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        self._stamp(manifest, now)
        if kind == "Pod":
            if self.pod(name) is None:
                manifest.setdefault("status", {"phase": "Pending"})
                self.observed.pods.append(manifest)
        elif kind == "Lease":
            if self.observed.lease is None:
                self.observed.lease = manifest
        else:
            self.observed.children.setdefault((kind, name), manifest)

    def _delete(self, action: DeleteChild, now: datetime) -> None:
        if action.kind != "Pod":
            self.observed.children.pop((action.kind, action.name), None)
            return
        pod = self.pod(action.name)
        if pod is None:
            return
        metadata = meta(pod)
        if action.mark_deliberate:
            metadata.setdefault("annotations", {})[ANNOTATION_DELETED] = "true"
        metadata.setdefault("deletionTimestamp", format_time(now))
        metadata["deletionGracePeriodSeconds"] = 0 if action.force else metadata.get("deletionGracePeriodSeconds", 30)
        if not metadata.get("finalizers"):
            self.observed.pods.remove(pod)

    def _update_lease(self, action: UpdateLease, now: datetime) -> None:
        lease = self.observed.lease
        if lease is None:
            raise Conflict("lease not found")
        if action.resource_version is not None and action.resource_version != meta(lease).get("resourceVersion"):
            raise Conflict("lease changed")
        lease.setdefault("spec", {}).update(action.spec_fields())
        if action.annotations:
            meta(lease).setdefault("annotations", {}).update(action.annotations)
        self._stamp(lease, now)
