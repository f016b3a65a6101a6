"""The end of a job: whether it finishes now (success, too many failures, deadline, budget), and the
clean-up of a finished job (cleanPodPolicy, finalizers, ttlSecondsAfterFinished)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from ttj.api.models import CleanPodPolicy, Phase, ProgressStatus, Reason, TransientTrainingJobSpec
from ttj.cost.budget import BudgetDecision
from ttj.planner.actions import DeleteChild, RemoveFinalizer, Write
from ttj.planner.classify import PodState, PodVerdict
from ttj.planner.conditions import Ending
from ttj.planner.observed import Observed, finalizers_of, has_role, meta, name_of, phase_of, uid_of
from ttj_contract import FINALIZER, Role, TrainerExit

#: Trainer exits that retrying cannot mend, and the reason the job fails with.
PERMANENT_EXITS: dict[int, Reason] = {
    TrainerExit.CONFIG: Reason.TRAINER_MISCONFIGURED,
    TrainerExit.DATA_UNAVAILABLE: Reason.DATA_UNAVAILABLE,
    TrainerExit.CHECKPOINT_INDEX_CORRUPT: Reason.CHECKPOINT_INDEX_CORRUPT,
    TrainerExit.CHECKPOINT_LOCATION_TAKEN: Reason.CHECKPOINT_LOCATION_TAKEN,
    TrainerExit.PROGRAM_INVALID: Reason.PROGRAM_INVALID,
    TrainerExit.LOSS_NOT_FINITE: Reason.LOSS_NOT_FINITE,
}


def final_checkpoint_reported(
    spec: TransientTrainingJobSpec, progress: ProgressStatus | None, epoch: int, *, renewed: bool
) -> bool:
    """The chief of the current ``epoch`` reported a checkpoint at trainSteps or beyond: the model exists.

    A report that names no epoch (a trainer that does not publish one) counts once the holder has
    ``renewed`` the Lease since its election: the report is then its own, not its predecessor's."""
    if progress is None or progress.checkpoint_step is None or progress.checkpoint_step < spec.train_steps:
        return False
    return progress.epoch == epoch if progress.epoch is not None else renewed


def permanent_failure(verdicts: Mapping[str, PodVerdict]) -> Ending | None:
    """A worker that exited with a code saying no retry can help: the job fails with its termination message."""
    for name, verdict in sorted(verdicts.items()):
        if verdict.state == PodState.FAILED and verdict.exit_code in PERMANENT_EXITS:
            return Ending(Phase.FAILED, PERMANENT_EXITS[verdict.exit_code], f"worker {name}: {verdict.message}")
    return None


def ending(
    spec: TransientTrainingJobSpec,
    *,
    holder: str | None,
    epoch: int,
    renewed: bool,
    verdicts: Mapping[str, PodVerdict],
    failures: int,
    last_failure: str,
    progress: ProgressStatus | None,
    started_at: datetime | None,
    now: datetime,
    budget: BudgetDecision | None,
) -> Ending | None:
    """How the job ends in this pass, first match wins; None while it goes on.

    Success needs both: the chief the Lease names exited 0, and it (the chief of the current ``epoch``)
    reported a checkpoint at trainSteps or beyond. A chief that exited 0 without one is replaced instead
    (:func:`ttj.planner.stages.chief.keep_chief`), and the new chief writes the final checkpoint."""
    chief = verdicts.get(holder) if holder else None
    if (
        holder
        and chief is not None
        and chief.state == PodState.SUCCEEDED
        and progress is not None
        and final_checkpoint_reported(spec, progress, epoch, renewed=renewed)
    ):
        return Ending(
            Phase.SUCCEEDED,
            Reason.TRAINING_COMPLETE,
            f"chief {holder} wrote the final checkpoint at global step {progress.checkpoint_step} (epoch {epoch})",
        )
    permanent = permanent_failure(verdicts)
    if permanent is not None:
        return permanent
    if failures > spec.backoff_limit:
        detail = last_failure or "the training code failed"
        return Ending(
            Phase.FAILED,
            Reason.BACKOFF_LIMIT_EXCEEDED,
            f"{failures} failures, over backoffLimit {spec.backoff_limit}; last: {detail}",
        )
    deadline = spec.active_deadline_seconds
    if deadline is not None and started_at is not None and (now - started_at).total_seconds() >= deadline:
        return Ending(Phase.FAILED, Reason.DEADLINE_EXCEEDED, f"running longer than {deadline}s")
    if budget is not None and budget.exceeded and not any(v.alive for v in verdicts.values()):
        return Ending(Phase.FAILED, Reason.BUDGET_EXCEEDED, budget.message)
    return None


def deadline_of(spec: TransientTrainingJobSpec, started_at: datetime | None) -> datetime | None:
    """When activeDeadlineSeconds runs out."""
    if spec.active_deadline_seconds is None or started_at is None:
        return None
    return started_at + timedelta(seconds=spec.active_deadline_seconds)


@dataclass(frozen=True)
class CleanUp:
    writes: tuple[Write, ...]
    #: ttlSecondsAfterFinished has passed.
    delete_job: bool
    #: When it will pass.
    wake: datetime | None


def clean_up(
    spec: TransientTrainingJobSpec, observed: Observed, completed_at: datetime | None, now: datetime
) -> CleanUp:
    """A finished job: release the finalizers, delete the pods and Deployments cleanPodPolicy names, and
    the job itself once its TTL is over."""
    writes = release_pods(observed, spec.clean_pod_policy)
    ttl = spec.ttl_seconds_after_finished
    if ttl is None or completed_at is None:
        return CleanUp(tuple(writes), delete_job=False, wake=None)
    expiry = completed_at + timedelta(seconds=ttl)
    return CleanUp(tuple(writes), delete_job=now >= expiry, wake=None if now >= expiry else expiry)


def release_pods(observed: Observed, policy: CleanPodPolicy) -> list[Write]:
    """Release every finalizer, and delete the workers and PS Deployments ``policy`` names."""
    writes: list[Write] = []
    for pod in observed.pods:
        name = name_of(pod)
        if FINALIZER in finalizers_of(pod):
            writes.append(RemoveFinalizer(name))
        if not has_role(pod, Role.WORKER) or meta(pod).get("deletionTimestamp"):
            continue
        if policy == CleanPodPolicy.ALL or (
            policy == CleanPodPolicy.RUNNING and phase_of(pod) in ("Running", "Pending")
        ):
            writes.append(DeleteChild("Pod", name, mark_deliberate=True, reason="CleanPodPolicy", uid=uid_of(pod)))
    if policy != CleanPodPolicy.NONE:
        for kind, child_name in sorted(observed.children):
            if kind == "Deployment":
                uid = uid_of(observed.children[(kind, child_name)])
                writes.append(DeleteChild(kind, child_name, reason="CleanPodPolicy", uid=uid))
    return writes
