"""What the planner's writes do to the cluster, in memory: the API rules the planner relies on.

One reading of every :data:`Write`, shared by the unit tests' :class:`~ttj.planner.world.World` and the
what-if simulator. The request bodies a write sends (:func:`lease_patch`, :func:`labels_patch`, ...) are
built here and sent as they are by the controller's Applier, so both apply the same JSON merge patches.

The rules: a create of an existing name is refused (409) and a write to a missing object finds nothing
(404), both harmless, except for a :func:`conditional` write, whose refusal is a :class:`Conflict`; a
deleted pod gets ``deletionTimestamp`` = now + its grace period (0 when forced, unbound or finished) and
is held by its finalizers; a write that changes an object moves its ``resourceVersion``, a no-op does not.
No kubelet, scheduler or controller runs here: a pod deleted without finalizers is gone at once, and
callers move pods through their phases themselves.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ttj.mergepatch import apply_merge_patch
from ttj.planner.actions import CreateChild, DeleteChild, LabelPod, RemoveFinalizer, ReplaceChild, UpdateLease, Write
from ttj.planner.observed import Obj, Observed, is_terminal, lease_spec, meta, name_of, pod_spec
from ttj_contract import ANNOTATION_DELETED, FINALIZER, format_time

#: A pod's grace period when its spec names none (Kubernetes' default).
DEFAULT_GRACE_SECONDS = 30

#: Called after a write changed an object, with the object as the write left it (not when it removed it).
WriteHook = Callable[[Write, Obj], None]


class Conflict(Exception):
    """A write that held only as planned was refused: observe again and replan."""


def conditional(write: Write) -> bool:
    """Whether the pass's status relies on this write as computed, so its refusal is a :class:`Conflict`.

    A Lease update carrying a resourceVersion (holder or epoch moves) and a Lease create carrying a
    chief (an election in a pass that saw no Lease): if the Lease changed, is gone or exists already,
    the election did not happen and the status must not say it did.
    """
    if isinstance(write, UpdateLease):
        return write.resource_version is not None
    if isinstance(write, CreateChild):
        return write.kind == "Lease" and bool(lease_spec(write.manifest).get("holderIdentity"))
    return False


# -- the request bodies of the writes --------------------------------------------------------------
def lease_patch(action: UpdateLease) -> Obj:
    """The merge patch of an :class:`UpdateLease`, with its resourceVersion precondition if any."""
    metadata: Obj = {}
    if action.resource_version:
        metadata["resourceVersion"] = action.resource_version
    if action.annotations:
        metadata["annotations"] = dict(action.annotations)
    patch: Obj = {}
    if spec := action.spec_fields():
        patch["spec"] = spec
    if metadata:
        patch["metadata"] = metadata
    return patch


def labels_patch(action: LabelPod) -> Obj:
    """The merge patch of a :class:`LabelPod` (a None value removes the label)."""
    return {"metadata": {"labels": dict(action.labels)}}


#: The merge patch that marks an object as deleted on purpose, sent before a ``mark_deliberate`` delete.
DELIBERATE_PATCH: Obj = {"metadata": {"annotations": {ANNOTATION_DELETED: "true"}}}


def deliberate_patch(action: DeleteChild) -> Obj:
    """:data:`DELIBERATE_PATCH` for the object the delete means: with its uid, a same-named successor answers 422."""
    if action.uid is None:
        return DELIBERATE_PATCH
    return {"metadata": {**DELIBERATE_PATCH["metadata"], "uid": action.uid}}


def delete_options(action: DeleteChild) -> Obj:
    """The DeleteOptions of a :class:`DeleteChild`: dependents go in the background; ``force`` means no grace;
    a uid precondition when the object was observed (names are reused: never delete a successor by name)."""
    options: Obj = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
    if action.force:
        options["gracePeriodSeconds"] = 0
    if action.uid is not None:
        options["preconditions"] = {"uid": action.uid}
    return options


def finalizer_patch(pod: Obj) -> Obj | None:
    """The merge patch removing ttj's :data:`FINALIZER` from ``pod`` as read, guarded by its resourceVersion
    (the finalizer list is replaced whole); None when the finalizer is not there."""
    finalizers = meta(pod).get("finalizers") or []
    if FINALIZER not in finalizers:
        return None
    return {
        "metadata": {
            "resourceVersion": meta(pod).get("resourceVersion"),
            "finalizers": [f for f in finalizers if f != FINALIZER] or None,
        }
    }


# -- the cluster in memory -------------------------------------------------------------------------
@dataclass
class Interpreter:
    """Applies writes to ``observed`` as the API server would. ``revision`` moves with every change."""

    observed: Observed = field(default_factory=Observed)
    on_applied: WriteHook | None = None
    revision: int = 0
    _uids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def pod(self, name: str) -> Obj | None:
        return next((p for p in self.observed.pods if name_of(p) == name), None)

    def get(self, kind: str, name: str) -> Obj | None:
        if kind == "Pod":
            return self.pod(name)
        if kind == "Lease":
            lease = self.observed.lease
            return lease if lease is not None and name_of(lease) == name else None
        return self.observed.children.get((kind, name))

    def apply(self, write: Write, now: datetime) -> bool:
        """Apply one write; True when it changed the cluster. Raises :class:`Conflict` as described above."""
        if isinstance(write, CreateChild):
            changed = self._create(write, now)
        elif isinstance(write, ReplaceChild):
            changed = self._patch(write.kind, write.name, write.manifest) is not None
        elif isinstance(write, DeleteChild):
            changed = self._delete(write, now)
        elif isinstance(write, RemoveFinalizer):
            pod = self.pod(write.pod)
            patch = finalizer_patch(pod) if pod is not None else None
            changed = patch is not None and self._patch("Pod", write.pod, patch) is not None
        elif isinstance(write, LabelPod):
            changed = self._patch("Pod", write.pod, labels_patch(write)) is not None
        else:
            changed = self._update_lease(write)
        if changed and self.on_applied is not None:
            obj = self.get(_kind(write), _name(write))
            if obj is not None:
                self.on_applied(write, obj)
        return changed

    # -- the verbs ---------------------------------------------------------------------------------
    def _stamp(self, obj: Obj) -> None:
        """A new resourceVersion, above any the object had (tests may set their own)."""
        previous = str(meta(obj).get("resourceVersion") or "0")
        self.revision = max(self.revision, int(previous) if previous.isdigit() else 0) + 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.revision)

    def _create(self, write: CreateChild, now: datetime) -> bool:
        if self.get(write.kind, write.name) is not None:
            if conditional(write):
                raise Conflict(f"{write.kind.lower()} {write.name} exists already")
            return False
        obj = _json_copy(write.manifest)
        metadata = obj.setdefault("metadata", {})
        metadata["creationTimestamp"] = format_time(now)
        metadata["uid"] = f"uid-{next(self._uids)}"
        self._stamp(obj)
        if write.kind == "Pod":
            obj.setdefault("status", {"phase": "Pending"})
            self.observed.pods.append(obj)
        elif write.kind == "Lease":
            self.observed.lease = obj
        else:
            self.observed.children[(write.kind, write.name)] = obj
        return True

    def _patch(self, kind: str, name: str, patch: Obj) -> Obj | None:
        """A merge patch with an optional resourceVersion precondition; the changed object, None if unchanged."""
        current = self.get(kind, name)
        if current is None:
            return None
        wanted = meta(patch).get("resourceVersion")
        if wanted and wanted != meta(current).get("resourceVersion"):
            raise Conflict(f"{kind.lower()} changed since it was observed: {name}")
        wanted_uid = meta(patch).get("uid")
        if wanted_uid and wanted_uid != meta(current).get("uid"):
            return None  # another object under that name now: 422 (uid is immutable); the write's intent holds
        patched = apply_merge_patch(current, patch)
        patched["metadata"]["resourceVersion"] = meta(current).get("resourceVersion")
        if patched == current:
            return None
        current.clear()
        current.update(patched)
        self._stamp(current)
        self._collect(kind, current)
        return current

    def _delete(self, write: DeleteChild, now: datetime) -> bool:
        obj = self.get(write.kind, write.name)
        if obj is None or (write.uid is not None and write.uid != meta(obj).get("uid")):
            return False  # gone, or a successor under the same name (409): the object meant is gone
        changed = False
        if write.mark_deliberate:
            changed = self._patch(write.kind, write.name, deliberate_patch(write)) is not None
        metadata = obj["metadata"]
        grace = _grace_seconds(obj, write.force) if write.kind == "Pod" else 0
        if metadata.get("deletionTimestamp") and grace >= (metadata.get("deletionGracePeriodSeconds") or 0):
            return changed  # deleting already, and not sooner than asked
        metadata["deletionTimestamp"] = format_time(now + timedelta(seconds=grace))
        metadata["deletionGracePeriodSeconds"] = grace
        self._stamp(obj)
        self._collect(write.kind, obj)
        return True

    def _collect(self, kind: str, obj: Obj) -> None:
        """An object being deleted goes once no finalizer holds it."""
        metadata = meta(obj)
        if not metadata.get("deletionTimestamp") or metadata.get("finalizers"):
            return
        if kind == "Pod":
            self.observed.pods.remove(obj)
        elif kind == "Lease":
            self.observed.lease = None
        else:
            self.observed.children.pop((kind, name_of(obj)), None)

    def _update_lease(self, write: UpdateLease) -> bool:
        if self.get("Lease", write.name) is None:
            if conditional(write):
                raise Conflict(f"lease {write.name} is gone")
            return False
        return self._patch("Lease", write.name, lease_patch(write)) is not None


def _grace_seconds(pod: Obj, force: bool) -> int:
    """As the API decides: nothing to wait for when forced, unbound or finished; else the pod's own grace."""
    spec = pod_spec(pod)
    if force or not spec.get("nodeName") or is_terminal(pod):
        return 0
    return int(spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS))


def _json_copy(obj: Obj) -> Obj:
    """A deep copy of JSON data (several times faster than ``copy.deepcopy``: manifests are big)."""
    copied: Obj = json.loads(json.dumps(obj))
    return copied


def _kind(write: Write) -> str:
    if isinstance(write, CreateChild | ReplaceChild | DeleteChild):
        return write.kind
    return "Lease" if isinstance(write, UpdateLease) else "Pod"


def _name(write: Write) -> str:
    if isinstance(write, CreateChild | ReplaceChild | DeleteChild | UpdateLease):
        return write.name
    return write.pod
