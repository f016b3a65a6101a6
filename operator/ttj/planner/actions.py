"""What the planner asks for: small, serialisable writes a controller (or a simulator) applies in order.

Every action is idempotent when applied against the real API: creates of deterministic names answer
409 on a retry, deletes answer 404, label and annotation patches converge. The only action that must
not be applied blindly is :class:`UpdateLease` when it changes holder or epoch: it carries the
resourceVersion it was computed from, and a conflict means "observe again and replan".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class CreateChild:
    """Create a child object (Service, Deployment, Pod, Lease, ServiceAccount, Role, RoleBinding)."""

    manifest: dict[str, Any]
    #: For a replacement worker pod: when the loss it replaces was first evidenced (for ttj_recovery_seconds).
    recovery_since: datetime | None = None

    @property
    def kind(self) -> str:
        return str(self.manifest["kind"])

    @property
    def name(self) -> str:
        return str(self.manifest["metadata"]["name"])


@dataclass(frozen=True)
class ReplaceChild:
    """Bring an existing child's spec back to the desired one (e.g. a Deployment after a spec change)."""

    manifest: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.manifest["kind"])

    @property
    def name(self) -> str:
        return str(self.manifest["metadata"]["name"])


@dataclass(frozen=True)
class DeleteChild:
    """Delete a child. ``force`` deletes a pod with grace period 0 (its node is gone or NotReady)."""

    kind: str
    name: str
    force: bool = False
    #: Annotate the object as deleted on purpose first, so a later look does not mistake it for a loss.
    mark_deliberate: bool = False
    reason: str = ""
    #: The uid of the object as observed: if the name now holds another object, the delete is refused (409)
    #: and its deliberate mark too (422: a patch may not change the uid).
    uid: str | None = None


@dataclass(frozen=True)
class RemoveFinalizer:
    """Remove the operator's accounting finalizer from a worker pod, letting it vanish."""

    pod: str


@dataclass(frozen=True)
class LabelPod:
    """Set (str) or remove (None) labels on a pod."""

    pod: str
    labels: dict[str, str | None]


@dataclass(frozen=True)
class UpdateLease:
    """Patch the ``NAME-chief`` Lease.

    ``resource_version`` is a precondition when set (holder/epoch changes): the controller must send
    it, and on a conflict drop the rest of this reconcile and replan from a fresh observation.
    Fields left ``None`` are not touched.
    """

    name: str
    resource_version: str | None = None
    holder: str | None = None
    epoch: int | None = None
    acquire_time: str | None = None
    renew_time: str | None = None
    lease_duration_seconds: int | None = None
    annotations: dict[str, str] = field(default_factory=dict)

    def spec_fields(self) -> dict[str, Any]:
        """The Lease ``spec`` fields this action sets, by their API names."""
        fields = {
            "holderIdentity": self.holder,
            "leaseTransitions": self.epoch,
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseDurationSeconds": self.lease_duration_seconds,
        }
        return {key: value for key, value in fields.items() if value is not None}


#: The length of an Event's message the operator posts (the rest is cut): what kube-apiserver accepts.
EVENT_MESSAGE_LIMIT = 1024


@dataclass(frozen=True)
class EmitEvent:
    """A Kubernetes Event on the job (``type`` is Normal or Warning)."""

    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class Observation:
    """A measurement for a histogram, made from cluster state (not from the operator's clock)."""

    metric: str  # "chief_handover_seconds"
    seconds: float


@dataclass(frozen=True)
class Refusal:
    """A write the API server refused for a reason other than "exists already"/"gone" (a ResourceQuota or
    Pod Security admission answering 403, a 422, a 429, a 5xx): the pass went on without it."""

    kind: str
    name: str
    #: create, update, delete, patch
    verb: str
    #: The HTTP status of the answer.
    status: int
    #: The API's own message, shown to users as it is.
    message: str


#: A change to the job's children, applied in order before the status write.
Write = CreateChild | ReplaceChild | DeleteChild | RemoveFinalizer | LabelPod | UpdateLease
