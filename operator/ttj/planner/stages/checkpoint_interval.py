"""The adaptive checkpoint interval: how often the chief should checkpoint, given how likely its node is to be
preempted soon and what a checkpoint costs.

Young (1974) and Daly (2006): with a write cost C and a mean time between failures M, the interval that
minimises the expected time lost (writing, plus redoing the work since the last checkpoint) is about
``sqrt(2·C·M)``. M is the inverse of the preemption hazard of the chief's node at its present age, from the
ICAC'19 lifetime measurements of its GPU type (``ttj.preemption.lifetimes``): young preemptible nodes are
revoked far more often than old ones. C is what a checkpoint costs the job: the write time the chief
measured and published on the Lease, divided by the active workers, because with a parameter server the
others keep training while the chief writes, whereas a rollback loses the work of all of them.
The result is kept within the spec's ``[minIntervalSeconds, maxIntervalSeconds]``.

Pure: spec, the chief's pod and node, its progress report and the clock in; the status and the Lease
annotation write out. The operator publishes the interval only when it moved by more than
:data:`REPUBLISH_TOLERANCE`, so the Lease is not rewritten at every pass as the node ages.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

from ttj.api.models import CheckpointIntervalStatus, TransientTrainingJobSpec
from ttj.planner.actions import UpdateLease, Write
from ttj.planner.observed import Obj, annotations_of, labels_of, meta, node_name_of
from ttj.preemption.lifetimes import LifetimeDistribution
from ttj_contract import (
    ACCELERATOR_LABEL,
    ANNOTATION_CHECKPOINT_INTERVAL,
    ANNOTATION_PROGRESS,
    LeaseProgress,
    Provisioning,
    lease_name,
    parse_time,
    provisioning_of,
)

#: A published interval is rewritten only when the new choice differs from it by more than this share.
REPUBLISH_TOLERANCE = 0.2

#: The preemption hazard (per second) of a transient node of a GPU type (None: unknown) at an age (seconds).
HazardModel = Callable[[str | None, float], float]


@lru_cache(maxsize=16)
def _lifetimes(accelerator: str | None) -> LifetimeDistribution:
    return LifetimeDistribution.for_accelerator(accelerator)


def measured_hazard(accelerator: str | None, age_s: float) -> float:
    """Preemption hazard (per second) of a preemptible or spot node from the ICAC'19 lifetimes of its GPU type."""
    return _lifetimes(accelerator).hazard_per_second(age_s)


def young_daly_seconds(write_seconds: float, hazard_per_second: float) -> float:
    """The first-order optimum checkpoint interval sqrt(2·C·M), M = 1/hazard (inf when nothing fails)."""
    if hazard_per_second <= 0:
        return math.inf
    return math.sqrt(2.0 * max(0.0, write_seconds) / hazard_per_second)


@dataclass(frozen=True)
class IntervalPlan:
    status: CheckpointIntervalStatus | None
    writes: tuple[Write, ...]


def choose_interval(
    spec: TransientTrainingJobSpec,
    *,
    write_seconds: float,
    provisioning: Provisioning,
    accelerator: str | None,
    node_age_s: float,
    active_workers: int = 1,
    hazard: HazardModel = measured_hazard,
) -> CheckpointIntervalStatus:
    """The interval for a chief on a node of this kind and age, with a write time of ``write_seconds`` while
    ``active_workers`` train."""
    low, high = spec.checkpoint.min_interval_seconds, spec.checkpoint.max_interval_seconds
    rate = 0.0 if provisioning == Provisioning.ON_DEMAND else hazard(accelerator, node_age_s)
    cost = write_seconds / max(1, active_workers)
    optimum = young_daly_seconds(cost, rate)
    seconds = round(min(high, max(low, optimum)))
    if rate <= 0:
        reason = "on-demand node: never preempted, so the longest interval allowed"
    else:
        reason = (
            f"Young-Daly sqrt(2 x {write_seconds:.1f} s / {max(1, active_workers)} workers x "
            f"{1 / rate / 3600:.1f} h) = "
            f"{optimum:.0f} s for a {provisioning.value} {accelerator or 'GPU'} node {node_age_s / 3600:.1f} h old"
        )
        if seconds != round(optimum):
            reason += f", bounded to [{low}, {high}] s"
    return CheckpointIntervalStatus(
        seconds=seconds,
        write_seconds=round(write_seconds, 3),
        hazard_per_hour=round(rate * 3600, 6),
        node_age_seconds=int(node_age_s),
        reason=reason,
    )


def adaptive_checkpoint_interval(
    spec: TransientTrainingJobSpec,
    *,
    job_name: str,
    holder_pod: Obj | None,
    nodes: Mapping[str, Obj],
    lease: Obj | None,
    previous: CheckpointIntervalStatus | None,
    now: datetime,
    active_workers: int = 1,
    hazard: HazardModel = measured_hazard,
) -> IntervalPlan:
    """The interval for the chief now, and the Lease annotation that publishes it (None while not adaptive,
    or before the chief has measured a write: until then it uses the spec's fixed intervals)."""
    report = LeaseProgress.from_annotation(annotations_of(lease or {}).get(ANNOTATION_PROGRESS))
    write_seconds = report.checkpoint_write_seconds if report is not None else None
    if not spec.checkpoint.adaptive or holder_pod is None or lease is None or write_seconds is None:
        return IntervalPlan(previous if spec.checkpoint.adaptive else None, ())
    node = nodes.get(node_name_of(holder_pod) or "")
    if node is None:
        return IntervalPlan(previous, ())
    created = parse_time(meta(node).get("creationTimestamp"))
    age = max(0.0, (now - created).total_seconds()) if created is not None else 0.0
    labels = labels_of(node)
    chosen = choose_interval(
        spec,
        write_seconds=write_seconds,
        provisioning=provisioning_of(labels),
        accelerator=labels.get(ACCELERATOR_LABEL) or spec.workers.accelerator_type,
        node_age_s=age,
        active_workers=active_workers,
        hazard=hazard,
    )
    published = _published(lease)
    if published is not None and abs(chosen.seconds - published) <= REPUBLISH_TOLERANCE * published:
        # keep what the chief already uses; show the interval in force
        return IntervalPlan(chosen.model_copy(update={"seconds": published}), ())
    write = UpdateLease(name=lease_name(job_name), annotations={ANNOTATION_CHECKPOINT_INTERVAL: str(chosen.seconds)})
    return IntervalPlan(chosen, (write,))


def _published(lease: Obj) -> int | None:
    raw = annotations_of(lease).get(ANNOTATION_CHECKPOINT_INTERVAL)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None
