"""What the planner sees: the job's children and the nodes under its pods, as raw Kubernetes JSON dicts."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ttj.cost.pools import PlacementCheck

GROUP = "transient.training"
LABEL_JOB = f"{GROUP}/job-name"
LABEL_ROLE = f"{GROUP}/role"
LABEL_SLOT = f"{GROUP}/slot"
LABEL_PS_INDEX = f"{GROUP}/ps-index"
LABEL_CHIEF = f"{GROUP}/chief"
ANNOTATION_ACTIVE_WORKERS = f"{GROUP}/active-workers"
#: The desired worker count now (spec.workers.replicas): pods' TTJ_DESIRED_WORKERS is fixed at creation.
ANNOTATION_DESIRED_WORKERS = f"{GROUP}/desired-workers"
ANNOTATION_PROGRESS = f"{GROUP}/progress"
ANNOTATION_DELETED = f"{GROUP}/deleted-by-operator"
FINALIZER = f"{GROUP}/accounting"

Obj = dict[str, Any]


@dataclass
class Observed:
    """The cluster as the planner sees it for one job.

    ``pods``: every pod labelled ``transient.training/job-name=NAME`` (workers and PS, including
    terminating and finished ones). ``nodes``: node name → Node for (at least) the nodes those pods
    are bound to; a bound node missing here is taken as gone. ``children``: (kind, name) → object for
    Service, Deployment, ServiceAccount, Role, RoleBinding. ``lease``: the ``NAME-chief`` Lease or None.
    ``placement``: whether any node pool can hold the job's workers and parameter servers.
    """

    pods: list[Obj] = field(default_factory=list)
    nodes: dict[str, Obj] = field(default_factory=dict)
    children: dict[tuple[str, str], Obj] = field(default_factory=dict)
    lease: Obj | None = None
    # --- cost/pools seam (issue 8): the controller fills this from ttj.cost.pools.validate_placement over
    # the cluster's node pools (GKE API or Node labels); None when not checked.
    placement: PlacementCheck | None = None


def parse_time(value: str | None) -> datetime | None:
    """RFC 3339 (with or without fraction, Z or offset) → aware datetime."""
    if not value:
        return None
    text = value.replace("Z", "+00:00")
    parsed = datetime.fromisoformat(text)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def format_time(moment: datetime) -> str:
    """Aware datetime → RFC 3339 with seconds, as Kubernetes writes metav1.Time."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(moment: datetime) -> str:
    """Aware datetime → metav1.MicroTime (Lease acquireTime/renewTime)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def name_of(obj: Obj) -> str:
    return str(meta(obj).get("name", ""))


def labels_of(obj: Obj) -> dict[str, str]:
    return meta(obj).get("labels") or {}


def annotations_of(obj: Obj) -> dict[str, str]:
    return meta(obj).get("annotations") or {}


def condition(obj: Obj, type_: str) -> Obj | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None
