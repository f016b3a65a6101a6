"""The ``NAME-chief`` Lease as the planner reads and writes it: holder, epoch, expiry, the chief's
progress report, the worker counts published for the learning rate, and the chief label."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from pydantic import ValidationError

from ttj.api.models import (
    MAX_EVALUATION_METRICS,
    MAX_METRIC_NAME_LENGTH,
    MAX_PATH_LENGTH,
    ChiefStatus,
    JobRef,
    ProgressStatus,
)
from ttj.planner import children
from ttj.planner.actions import CreateChild, LabelPod, UpdateLease, Write
from ttj.planner.config import PlannerConfig
from ttj.planner.observed import Obj, annotations_of, has_stopped, labels_of, lease_spec, meta, name_of
from ttj_contract import (
    ANNOTATION_ACTIVE_WORKERS,
    ANNOTATION_DESIRED_WORKERS,
    ANNOTATION_PROGRESS,
    LABEL_CHIEF,
    LeaseProgress,
    format_micro_time,
    lease_name,
    parse_time,
)


def lease_epoch_of(lease: Obj | None) -> int:
    return int(lease_spec(lease).get("leaseTransitions") or 0)


def lease_holder(lease: Obj | None, recorded: ChiefStatus | None) -> str | None:
    """The chief pod the Lease names."""
    if lease is None and recorded is not None and recorded.epoch > 0:
        # The status names a chief, so the Lease was made: our watch has not delivered it yet, or someone
        # deleted it. Recreate it as the status says rather than elect again (which would bump the epoch
        # for nothing).
        return recorded.pod
    holder: str | None = lease_spec(lease).get("holderIdentity")
    return holder


def reported_progress(lease: Obj | None, previous: ProgressStatus | None) -> ProgressStatus | None:
    """The chief's latest progress report; the previous one while there is none (or it is malformed).

    The latest evaluation and the export path stay until a report carries newer ones: a new chief reports
    neither before it has evaluated or exported itself, and that must not erase what its predecessor did."""
    report = LeaseProgress.from_annotation(annotations_of(lease or {}).get(ANNOTATION_PROGRESS))
    if report is None:
        return previous
    evaluation = fitting_metrics(report.evaluation)
    evaluated = report.evaluation_step is not None and evaluation is not None
    export_path = report.export_path if report.export_path and len(report.export_path) <= MAX_PATH_LENGTH else None
    kept = previous or ProgressStatus()
    try:
        return ProgressStatus(
            global_step=report.global_step,
            checkpoint_step=report.checkpoint_step,
            checkpoint_path=report.checkpoint_path,
            checkpoint_time=report.checkpoint_time,
            epoch=report.epoch,
            last_error=report.last_error,
            last_progress_time=kept.last_progress_time,
            evaluation_step=report.evaluation_step if evaluated else kept.evaluation_step,
            evaluation=evaluation if evaluated else kept.evaluation,
            export_path=export_path or kept.export_path,
            steps_per_second=total_steps_per_second(report.slot_steps_per_second),
            loss=report.loss,
        )
    except ValidationError:
        return previous


def total_steps_per_second(slot_rates: Mapping[int, float] | None) -> float | None:
    """The job's steps per second: its active slots' together (None when the report has no rates)."""
    return None if slot_rates is None else round(sum(slot_rates.values()), 3)


def fitting_metrics(metrics: Mapping[str, float] | None) -> dict[str, float] | None:
    """The metrics status.progress.evaluation can hold: finite values (JSON has no NaN), names within the
    bound, and the first of them by name up to the bound on their number."""
    if metrics is None:
        return None
    fitting = sorted(
        (name, value) for name, value in metrics.items() if len(name) <= MAX_METRIC_NAME_LENGTH and math.isfinite(value)
    )
    return dict(fitting[:MAX_EVALUATION_METRICS])


def renew_stamp(lease: Obj | None) -> str | None:
    """The Lease's renewTime as written (acquireTime before any renewal): compared, never read as a clock."""
    spec = lease_spec(lease)
    stamp: str | None = spec.get("renewTime") or spec.get("acquireTime")
    return stamp


def renewed_since_election(lease: Obj | None) -> bool:
    """The holder renewed after the operator named it (which writes acquireTime and renewTime alike)."""
    spec = lease_spec(lease)
    return bool(spec.get("renewTime")) and spec.get("renewTime") != spec.get("acquireTime")


def renewal_observed_at(lease: Obj | None, recorded: ChiefStatus | None, now: datetime) -> datetime:
    """When this operator first saw the Lease's current renewTime: now when it differs from the one the
    status recorded. Only a change of renewTime counts (as in client-go's leader election), so a trainer
    whose clock is off is judged by the operator's clock alone."""
    if recorded is not None and recorded.renew_time == renew_stamp(lease):
        return parse_time(recorded.renew_observed_at) or now
    return now


def lease_expiry(lease: Obj | None, config: PlannerConfig, observed_at: datetime) -> datetime | None:
    """When the holder's claim runs out: a lease duration after the operator saw its last renewal, or, for a
    chief that has not renewed since its election, after the longer TensorFlow start-up allowance."""
    if renew_stamp(lease) is None:
        return None
    spec = lease_spec(lease)
    duration = timedelta(seconds=int(spec.get("leaseDurationSeconds") or config.lease_duration_seconds))
    if renewed_since_election(lease):
        return observed_at + duration
    return observed_at + max(duration, timedelta(seconds=config.chief_startup_seconds))


def lease_write(
    job: JobRef,
    lease: Obj | None,
    config: PlannerConfig,
    now: datetime,
    *,
    holder_before: str | None,
    holder: str | None,
    epoch: int,
    elected: bool,
    active: int,
    desired: int,
) -> Write | None:
    """Create the Lease, or move its holder and epoch under a resourceVersion precondition and keep its
    duration and published worker counts current; None when it is right as it is."""
    duration = config.lease_duration_seconds
    stamp = format_micro_time(now)
    if lease is None:
        manifest = children.lease(job, duration, active, desired)
        spec = {**manifest["spec"], "leaseTransitions": epoch}
        if holder:
            spec.update(holderIdentity=holder, acquireTime=stamp, renewTime=stamp)
        return CreateChild({**manifest, "spec": spec})
    moved = holder != holder_before or epoch != lease_epoch_of(lease)
    duration_changed = lease_spec(lease).get("leaseDurationSeconds") != duration
    published = {ANNOTATION_ACTIVE_WORKERS: str(active), ANNOTATION_DESIRED_WORKERS: str(desired)}
    annotations = {k: v for k, v in published.items() if annotations_of(lease).get(k) != v}
    if not moved and not duration_changed and not annotations:
        return None
    return UpdateLease(
        name=lease_name(job.name),
        resource_version=meta(lease).get("resourceVersion") if moved else None,
        holder=holder if moved else None,
        epoch=epoch if moved else None,
        acquire_time=stamp if moved and elected else None,
        renew_time=stamp if moved and elected else None,
        lease_duration_seconds=duration if duration_changed else None,
        annotations=annotations,
    )


def chief_labels(workers: Iterable[Obj], holder: str | None) -> tuple[list[LabelPod], list[LabelPod]]:
    """Exactly one pod that can still run carries the chief label: (the writes that name ``holder``: the label
    off the others that can still run, then on ``holder``; the label off stopped pods). A stopped pod is no
    chief whatever its labels say, so its label comes off after the new chief is named and the replacements
    are made, not one round trip before."""
    by_name = {name_of(p): p for p in workers}
    others = [
        (name, pod) for name, pod in sorted(by_name.items()) if labels_of(pod).get(LABEL_CHIEF) and name != holder
    ]
    naming = [LabelPod(name, {LABEL_CHIEF: None}) for name, pod in others if not has_stopped(pod)]
    if holder in by_name and labels_of(by_name[holder]).get(LABEL_CHIEF) != "true":
        naming.append(LabelPod(holder, {LABEL_CHIEF: "true"}))
    tidying = [LabelPod(name, {LABEL_CHIEF: None}) for name, pod in others if has_stopped(pod)]
    return naming, tidying
