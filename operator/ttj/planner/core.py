"""The planner: job spec + observed children + clock → actions and the new status. Pure and level-based.

Everything it needs to remember lives in the cluster: counters, which lost pods were already counted
(``status.accountedPods``; a lost pod is deleted only after a status naming it was written, and a
finalizer keeps worker pods from vanishing uncounted), the PS pods holding model state
(``status.parameterServerPods``), when the chief was lost (``status.chief.lostAt``), and holder and
epoch in the Lease. So a restarted operator, or a simulator, reaches the same decisions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from pydantic import ValidationError

from ttj.api.models import (
    ChiefStatus,
    CostStatus,
    ProgressStatus,
    TransientTrainingJob,
    TransientTrainingJobSpec,
    TransientTrainingJobStatus,
    WorkerCounts,
)
from ttj.cost.budget import BudgetDecision
from ttj.cost.prices import PriceTable
from ttj.planner import children, costing
from ttj.planner.actions import (
    CreateChild,
    DeleteChild,
    EmitEvent,
    LabelPod,
    Observation,
    RemoveFinalizer,
    ReplaceChild,
    UpdateLease,
    Write,
)
from ttj.planner.classify import PodState, PodVerdict, classify_pod
from ttj.planner.conditions import Wanted, set_conditions
from ttj.planner.election import Candidate, choose_chief
from ttj.planner.observed import Obj, Observed, annotations_of, labels_of, meta, name_of
from ttj_contract import (
    ANNOTATION_ACTIVE_WORKERS,
    ANNOTATION_DESIRED_WORKERS,
    ANNOTATION_PROGRESS,
    ANNOTATION_PS_TEMPLATE,
    FINALIZER,
    LABEL_CHIEF,
    LABEL_PS_INDEX,
    LABEL_ROLE,
    LABEL_SLOT,
    format_micro_time,
    format_time,
    lease_name,
    parse_time,
    ps_name,
    worker_selector,
)

#: A cost override for simulators: (spec, observed, previous cost status, now) → new cost status.
CostFunction = Callable[[TransientTrainingJobSpec, Observed, CostStatus | None, datetime], CostStatus]

TERMINAL = ("Succeeded", "Failed")
WriteT = TypeVar("WriteT")
_INCARNATION = re.compile(r"-(\d+)$")


@dataclass(frozen=True)
class PlannerConfig:
    """Operator settings that shape decisions."""

    #: Lease duration the operator writes; a chief silent for longer than this is replaced.
    lease_duration_seconds: int = 30
    #: A newly elected chief that has never renewed is given this long to start (TensorFlow start-up).
    chief_startup_seconds: int = 180
    #: A node NotReady (or a bound pod's node missing) for this long means its pods are lost.
    node_grace_seconds: int = 30
    #: Replan at least this often even when nothing changes (leases expire without events).
    resync_seconds: float = 60.0
    #: Prices for cost accrual and budgets (ttj.cost); None leaves status.cost at zero and budgets unchecked.
    prices: PriceTable | None = None
    #: Instead of ``prices``: a function computing status.cost; the budget then only stops the job.
    cost: CostFunction | None = None


@dataclass
class Plan:
    """The planner's answer: apply ``writes`` in order, write ``status`` if it differs, then post ``events``;
    delete the job itself when ``delete_job`` (ttlSecondsAfterFinished elapsed)."""

    writes: list[Write] = field(default_factory=list)
    #: Events about the job, posted after the status write.
    events: list[EmitEvent] = field(default_factory=list)
    #: The full new status, camelCase JSON as written to the status subresource.
    status: dict[str, Any] = field(default_factory=dict)
    #: Histogram samples measured from cluster state (e.g. chief handover).
    observations: list[Observation] = field(default_factory=list)
    delete_job: bool = False
    #: Replan after this many seconds at the latest (timers: grace, lease expiry, deadlines, TTL).
    requeue_after: float | None = None

    def of_type(self, kind: type[WriteT]) -> list[WriteT]:
        """The writes of one kind, in order."""
        return [w for w in self.writes if isinstance(w, kind)]


def _dump(status: TransientTrainingJobStatus) -> dict[str, Any]:
    return status.model_dump(by_alias=True, exclude_none=True, mode="json")


def _incarnation(pod_name: str) -> int:
    match = _INCARNATION.search(pod_name)
    return int(match.group(1)) if match else 0


def _slot(pod: Obj) -> int | None:
    try:
        return int(labels_of(pod).get(LABEL_SLOT, ""))
    except ValueError:
        return None


def _progress(lease: Obj | None, previous: ProgressStatus | None) -> ProgressStatus | None:
    raw = annotations_of(lease or {}).get(ANNOTATION_PROGRESS)
    if not raw:
        return previous
    try:
        data = json.loads(raw)
        return ProgressStatus(
            global_step=max(0, int(data.get("globalStep", 0))),
            checkpoint_step=data.get("checkpointStep"),
            checkpoint_path=data.get("checkpointPath"),
            checkpoint_time=data.get("checkpointTime"),
        )
    except (ValueError, TypeError, AttributeError, ValidationError):
        return previous  # a malformed report is ignored, not fatal


class _Timer:
    def __init__(self, now: datetime, resync: float) -> None:
        self.now = now
        self.at = now + timedelta(seconds=resync)

    def wake_at(self, moment: datetime | None) -> None:
        if moment is not None and moment > self.now:
            self.at = min(self.at, moment)

    @property
    def seconds(self) -> float:
        return max(0.0, (self.at - self.now).total_seconds())


def plan(
    job: dict[str, Any] | TransientTrainingJob,
    observed: Observed,
    now: datetime,
    config: PlannerConfig | None = None,
) -> Plan:
    """Decide what to do for one job.

    ``job`` is the TransientTrainingJob as the API returns it (a dict with metadata, spec, status) or
    the pydantic model; ``observed`` its children; ``now`` an aware datetime. The result is
    deterministic in its inputs.
    """
    config = config or PlannerConfig()
    if isinstance(job, TransientTrainingJob):
        job = job.model_dump(by_alias=True, exclude_none=True, mode="json")
    return _Planner(job, observed, now, config).run()


class _Planner:
    def __init__(self, job: dict[str, Any], observed: Observed, now: datetime, config: PlannerConfig) -> None:
        self.job = job
        self.observed = observed
        self.now = now
        self.now_text = format_time(now)
        self.config = config
        self.name = str(meta(job).get("name", ""))
        self.generation = meta(job).get("generation")
        try:
            self.prev = TransientTrainingJobStatus.model_validate(job.get("status") or {})
        except ValidationError:
            self.prev = TransientTrainingJobStatus()
        self.status = self.prev.model_copy(deep=True)
        self.actions: list[Write] = []
        self.delete_job = False
        self.events: list[EmitEvent] = []
        self.observations: list[Observation] = []
        self.timer = _Timer(now, config.resync_seconds)

    # -- entry ---------------------------------------------------------------------------------
    def run(self) -> Plan:
        try:
            spec = TransientTrainingJobSpec.model_validate(self.job.get("spec") or {})
        except ValidationError as exc:
            problems = [f"{'.'.join(str(p) for p in e['loc']) or 'spec'}: {e['msg']}" for e in exc.errors()]
            return self._invalid(problems)
        problems = children.name_problems(self.name, spec)
        if problems:
            return self._invalid(problems)
        self.spec = spec
        if self.prev.phase in TERMINAL:
            self._finished()
        else:
            self._reconcile()
        return self._result()

    def _result(self) -> Plan:
        self.status.observed_generation = self.generation
        return Plan(
            writes=self.actions,
            events=self.events,
            delete_job=self.delete_job,
            status=_dump(self.status),
            observations=self.observations,
            requeue_after=self.timer.seconds,
        )

    def _invalid(self, problems: list[str]) -> Plan:
        message = "; ".join(problems)
        if self.prev.phase not in TERMINAL:
            self.status.phase = "Failed"  # type: ignore[assignment]
            self.status.completion_time = self.status.completion_time or self.now_text
        self.status.start_time = self.status.start_time or self.now_text
        self._conditions(
            [Wanted("Invalid", "True", "InvalidSpec", message), Wanted("Failed", "True", "InvalidSpec", message)]
        )
        return self._result()

    # -- conditions ----------------------------------------------------------------------------
    def _conditions(self, wanted: list[Wanted]) -> None:
        self.status.conditions, changed = set_conditions(self.prev.conditions, wanted, self.now_text, self.generation)
        for change in changed:
            if change.status != "True" and change.reason != "WorkersUnschedulable":
                continue
            warning = change.type in ("Recovering", "Failed", "Invalid", "BudgetExceeded") or (
                change.reason == "WorkersUnschedulable"
            )
            self.events.append(
                EmitEvent("Warning" if warning else "Normal", change.reason, change.message or change.type)
            )

    # -- finished jobs ---------------------------------------------------------------------------
    def _finished(self) -> None:
        """Succeeded or Failed: apply cleanPodPolicy, release finalizers, and the TTL."""
        policy = self.spec.clean_pod_policy
        for pod in self.observed.pods:
            name = name_of(pod)
            if FINALIZER in (meta(pod).get("finalizers") or []):
                self.actions.append(RemoveFinalizer(name))
            if labels_of(pod).get(LABEL_ROLE) != "worker" or meta(pod).get("deletionTimestamp"):
                continue
            phase = (pod.get("status") or {}).get("phase")
            if policy == "All" or (policy == "Running" and phase in ("Running", "Pending")):
                self.actions.append(DeleteChild("Pod", name, mark_deliberate=True, reason="CleanPodPolicy"))
        if policy != "None":
            for (kind, child_name), _ in sorted(self.observed.children.items()):
                if kind == "Deployment":
                    self.actions.append(DeleteChild(kind, child_name, reason="CleanPodPolicy"))
        self.status.accounted_pods = None
        self.status.workers = self._counts(active=0, pending=0)
        ttl = self.spec.ttl_seconds_after_finished
        completed = parse_time(self.status.completion_time)
        if ttl is not None and completed is not None:
            expiry = completed + timedelta(seconds=ttl)
            if self.now >= expiry:
                self.delete_job = True
            else:
                self.timer.wake_at(expiry)
        # Keep the conditions as they are; only refresh their generation.
        self.status.conditions = self.prev.conditions

    def _counts(self, active: int, pending: int) -> WorkerCounts:
        desired = self.spec.workers.replicas
        return WorkerCounts(
            desired=desired,
            active=active,
            pending=pending,
            summary=f"{active}/{desired}",
            selector=worker_selector(self.name),
        )

    # -- the running job -------------------------------------------------------------------------
    def _reconcile(self) -> None:
        spec, status, now = self.spec, self.status, self.now
        grace = timedelta(seconds=self.config.node_grace_seconds)
        status.start_time = status.start_time or self.now_text
        job_obj = self.job

        self._static_children()

        workers = [p for p in self.observed.pods if labels_of(p).get(LABEL_ROLE) == "worker"]
        verdicts: dict[str, PodVerdict] = {
            name_of(p): classify_pod(p, self.observed.nodes, now, grace) for p in workers
        }
        self._wake_for_node_grace(workers, grace)
        by_name = {name_of(p): p for p in workers}
        accounted_before = set(self.prev.accounted_pods or [])
        accounted = {n for n in accounted_before if n in by_name}

        # 1. Count every lost worker exactly once (its name goes into status.accountedPods).
        last_failure = ""
        for pod in sorted(workers, key=name_of):
            name, verdict = name_of(pod), verdicts[name_of(pod)]
            if not verdict.lost or name in accounted:
                continue
            accounted.add(name)
            if verdict.state == PodState.PREEMPTED:
                status.preemptions += 1
                self.events.append(EmitEvent("Warning", "WorkerPreempted", f"worker {name} lost: {verdict.message}"))
            else:
                status.failures += 1
                last_failure = f"worker {name} failed: {verdict.message}"
                self.events.append(EmitEvent("Warning", "WorkerFailed", last_failure))
            status.replacements += 1  # its slot is refilled below, in this same plan

        # 2. Lost pods counted in an earlier, written status may now go.
        for name in sorted(accounted_before & set(by_name)):
            verdict = verdicts[name]
            pod = by_name[name]
            if verdict.lost:
                self._release(pod, verdict.force_delete)
        for name, verdict in sorted(verdicts.items()):
            if verdict.state == PodState.RELEASED and FINALIZER in (meta(by_name[name]).get("finalizers") or []):
                self.actions.append(RemoveFinalizer(name))
        status.accounted_pods = sorted(accounted) or None

        # 3. The end: success, too many failures, deadline, budget.
        lease = self.observed.lease
        holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
        if lease is None and self.prev.chief is not None and self.prev.chief.epoch > 0:
            # The status names a chief, so the Lease was made: our watch has not delivered it yet, or
            # someone deleted it. Recreate it as the status says rather than elect again (which would
            # bump the epoch for nothing).
            holder = self.prev.chief.pod
        status.progress = _progress(lease, self.prev.progress)
        self.budget: BudgetDecision | None = None
        if self.config.prices is not None:
            alive = [v for v in verdicts.values() if v.alive]
            missing = max(0, min(spec.workers.replicas, spec.workers.slots) - len(alive))
            status.cost, self.budget = costing.accrue_and_decide(
                spec,
                self.observed,
                verdicts,
                self.prev.cost,
                now=now,
                prices=self.config.prices,
                requested_new_workers=missing,
                pending_workers=sum(v.state == PodState.PENDING for v in alive),
                stop_lead_seconds=children.WORKER_TERMINATION_GRACE_SECONDS,
            )
        elif self.config.cost is not None:
            status.cost = self.config.cost(spec, self.observed, self.prev.cost, now)
            limit = spec.budget.max_cost_usd if spec.budget else None
            if limit is not None:
                over = status.cost.usd >= limit
                message = f"cost ${status.cost.usd:.2f} reached budget.maxCostUSD ${limit:.2f}" if over else ""
                self.budget = BudgetDecision(10**6, over, message, status.cost.usd, limit, status.cost.usd)
        end = self._end_reason(holder, verdicts, last_failure)
        if end is not None:
            phase, reason, message = end
            status.phase = phase  # type: ignore[assignment]
            status.completion_time = self.now_text
            status.workers = self._counts(
                active=sum(v.state == PodState.RUNNING for v in verdicts.values()),
                pending=sum(v.state == PodState.PENDING for v in verdicts.values()),
            )
            wanted = [Wanted("Created", "True", "ChildrenCreated", "")]
            if phase == "Succeeded":
                wanted.append(Wanted("Succeeded", "True", reason, message))
            else:
                wanted.append(Wanted("Failed", "True", reason, message))
            if spec.budget and spec.budget.max_cost_usd is not None:
                over = reason == "BudgetExceeded"
                wanted.append(
                    Wanted(
                        "BudgetExceeded",
                        "True" if over else "False",
                        reason if over else "WithinBudget",
                        message if over else "",
                    )
                )
            self._conditions(wanted)
            self.timer.wake_at(now)  # clean up in the next pass, after this status is written
            return

        # 4. Parameter servers: a different PS pod means the model state is gone.
        ps_ready, ps_replaced = self._parameter_servers()
        # A replacement PS holds no model state until the chief restores it: recovering, even when the
        # Deployment had the new pod running before any pass saw the old one missing.
        ps_ready = ps_ready and not ps_replaced

        # 5. Worker slots: keep `desired` slots filled, replace lost pods at once in their slot.
        active, pending, unschedulable = self._worker_slots(workers, verdicts, holder, job_obj)
        # --- cost/pools seam (issue 8): no node pool can hold these pods at all; say why instead of waiting.
        placement = self.observed.placement
        if placement is not None and not placement.ok and active < spec.workers.replicas:
            unschedulable = f"{placement.reason}: {placement.message}"
        # --- end of seam

        # 6. The chief.
        chief_ok = self._chief(workers, verdicts, holder, ps_replaced, active)

        # 7. Phase and conditions.
        desired = spec.workers.replicas
        started = status.chief_elections > 0
        status.workers = self._counts(active=active, pending=pending)
        training = started and chief_ok and ps_ready and active >= spec.workers.min_replicas
        if not started:
            status.phase = "Pending"  # type: ignore[assignment]
        elif active >= desired and chief_ok and ps_ready:
            status.phase = "Running"  # type: ignore[assignment]
        else:
            status.phase = "Recovering"  # type: ignore[assignment]
        wanted = [Wanted("Created", "True", "ChildrenCreated", "")]
        if training:
            wanted.append(Wanted("Running", "True", "Training", f"{active}/{desired} workers"))
        elif not started:
            wanted.append(
                Wanted(
                    "Running", "False", "WorkersUnschedulable" if unschedulable else "WaitingForWorkers", unschedulable
                )
            )
        else:
            wanted.append(
                Wanted(
                    "Running",
                    "False",
                    "BelowMinReplicas"
                    if active < spec.workers.min_replicas
                    else "WaitingForChief"
                    if not chief_ok
                    else "WaitingForParameterServers",
                    f"{active} active, at least {spec.workers.min_replicas} needed",
                )
            )
        if status.phase == "Recovering":
            if not ps_ready:
                reason, message = "ParameterServerLost", "waiting for the parameter servers to run again"
            elif not chief_ok:
                reason, message = "ChiefLost", "waiting for a running worker to become chief"
            elif unschedulable:
                reason, message = "WorkersUnschedulable", unschedulable
            else:
                reason, message = "WorkersLost", f"{active}/{desired} workers active"
            wanted.append(Wanted("Recovering", "True", reason, message))
        elif started:
            wanted.append(Wanted("Recovering", "False", "AtDesiredWorkers", ""))
        chief = status.chief
        if chief is not None and chief.pod and chief_ok:
            wanted.append(Wanted("ChiefElected", "True", "Elected", f"chief {chief.pod} at epoch {chief.epoch}"))
        else:
            wanted.append(Wanted("ChiefElected", "False", "ChiefLost" if started else "NoRunningWorkers", ""))
        if self.budget is not None and self.budget.exceeded:
            wanted.append(Wanted("BudgetExceeded", "True", "BudgetExceeded", self.budget.message))
        elif self.budget is not None and self.budget.message:
            wanted.append(Wanted("BudgetExceeded", "False", "ScaleOutLimited", self.budget.message))
        elif spec.budget and spec.budget.max_cost_usd is not None:
            wanted.append(Wanted("BudgetExceeded", "False", "WithinBudget", ""))
        self._conditions(wanted)
        deadline = spec.active_deadline_seconds
        start = parse_time(status.start_time)
        if deadline is not None and start is not None:
            self.timer.wake_at(start + timedelta(seconds=deadline))

    def _release(self, pod: Obj, force: bool) -> None:
        name = name_of(pod)
        deleting = meta(pod).get("deletionTimestamp")
        already_forced = meta(pod).get("deletionGracePeriodSeconds") == 0
        phase = (pod.get("status") or {}).get("phase")
        if not deleting or (force and not already_forced and phase not in ("Failed", "Succeeded")):
            self.actions.append(DeleteChild("Pod", name, force=force, reason="LostWorker"))
        if FINALIZER in (meta(pod).get("finalizers") or []):
            self.actions.append(RemoveFinalizer(name))

    def _wake_for_node_grace(self, pods: list[Obj], grace: timedelta) -> None:
        for pod in pods:
            node_name = (pod.get("spec") or {}).get("nodeName")
            node = self.observed.nodes.get(node_name) if node_name else None
            if node_name and node is None:
                self.timer.wake_at(self.now + grace)
            for cond in (node or {}).get("status", {}).get("conditions") or []:
                if cond.get("type") == "Ready" and cond.get("status") != "True":
                    since = parse_time(cond.get("lastTransitionTime"))
                    if since is not None:
                        self.timer.wake_at(since + grace)

    def _end_reason(
        self, holder: str | None, verdicts: dict[str, PodVerdict], last_failure: str
    ) -> tuple[str, str, str] | None:
        spec, status = self.spec, self.status
        if holder and verdicts.get(holder) is not None and verdicts[holder].state == PodState.SUCCEEDED:
            step = status.progress.global_step if status.progress else 0
            return "Succeeded", "TrainingComplete", f"chief {holder} finished at global step {step}"
        if status.failures > spec.backoff_limit:
            detail = last_failure or "the training code failed"
            return (
                "Failed",
                "BackoffLimitExceeded",
                f"{status.failures} failures, over backoffLimit {spec.backoff_limit}; last: {detail}",
            )
        start = parse_time(status.start_time)
        deadline = spec.active_deadline_seconds
        if deadline is not None and start is not None and (self.now - start).total_seconds() >= deadline:
            return "Failed", "DeadlineExceeded", f"running longer than {deadline}s"
        if self.budget is not None and self.budget.exceeded and not any(v.alive for v in verdicts.values()):
            return "Failed", "BudgetExceeded", self.budget.message
        return None

    def _static_children(self) -> None:
        job = self.job
        observed = self.observed.children
        wanted = [children.headless_service(job), *children.trainer_rbac(job)]
        wanted += [children.ps_deployment(job, self.spec, i) for i in range(self.spec.parameter_servers.replicas)]
        wanted_keys = set()
        for manifest in wanted:
            key = (manifest["kind"], manifest["metadata"]["name"])
            wanted_keys.add(key)
            if key not in observed:
                self.actions.append(CreateChild(manifest))
            elif key[0] == "Deployment":
                # A spec change (image, parameterServers.resources) reaches the PS through its template:
                # the Deployment controller recreates the pod, which step 4 sees as a PS loss.
                fingerprint = annotations_of(manifest).get(ANNOTATION_PS_TEMPLATE)
                if annotations_of(observed[key]).get(ANNOTATION_PS_TEMPLATE) != fingerprint:
                    self.actions.append(ReplaceChild(manifest))
                    self.events.append(
                        EmitEvent(
                            "Normal",
                            "ParameterServerUpdated",
                            f"{key[1]}: the spec changed its image or resources; the parameter server restarts "
                            "and the chief restores the latest checkpoint",
                        )
                    )
        for kind, child_name in sorted(observed):
            if kind == "Deployment" and (kind, child_name) not in wanted_keys:
                self.actions.append(DeleteChild(kind, child_name, reason="ParameterServersScaledDown"))

    def _parameter_servers(self) -> tuple[bool, bool]:
        """(all PS running with their model state or freshly recorded, a PS was replaced now)."""
        status = self.status
        replicas = self.spec.parameter_servers.replicas
        recorded = list(self.prev.parameter_server_pods or [])[:replicas]
        recorded += [""] * (replicas - len(recorded))
        running: dict[int, list[str]] = {}
        template_hash: dict[str, str] = {}
        for pod in self.observed.pods:
            labels = labels_of(pod)
            if labels.get(LABEL_ROLE) != "ps" or meta(pod).get("deletionTimestamp"):
                continue
            if (pod.get("status") or {}).get("phase") != "Running":
                continue
            try:
                index = int(labels.get(LABEL_PS_INDEX, ""))
            except ValueError:
                continue
            running.setdefault(index, []).append(name_of(pod))
            template_hash[name_of(pod)] = labels.get("pod-template-hash", "")
        ready, replaced = True, False
        for index in range(replicas):
            names = sorted(running.get(index, []))
            if recorded[index] in names:
                continue
            if not names:
                ready = False
                continue
            if recorded[index]:
                replaced = True
                # Deployment pods are named <deployment>-<pod-template-hash>-<suffix>: another hash means a
                # rollout of a changed template (a spec change), which is no preemption.
                prefix = f"{ps_name(self.name, index)}-"
                rest = recorded[index][len(prefix) :].split("-") if recorded[index].startswith(prefix) else []
                old_hash = rest[0] if len(rest) == 2 else ""
                new_hash = template_hash.get(names[0], "")
                if old_hash and new_hash and new_hash != old_hash:
                    self.events.append(
                        EmitEvent(
                            "Normal",
                            "ParameterServerReplaced",
                            f"parameter server {index} is now {names[0]} (was {recorded[index]}) after a spec "
                            "change: the chief restores the latest checkpoint",
                        )
                    )
                    recorded[index] = names[0]
                    continue
                status.preemptions += 1
                self.events.append(
                    EmitEvent(
                        "Warning",
                        "ParameterServerReplaced",
                        f"parameter server {index} is now {names[0]} (was {recorded[index]}): model state lost, "
                        "the chief restores the latest checkpoint",
                    )
                )
            recorded[index] = names[0]
        status.parameter_server_pods = recorded
        return ready, replaced

    def _worker_slots(
        self, workers: list[Obj], verdicts: dict[str, PodVerdict], holder: str | None, job: Obj
    ) -> tuple[int, int, str]:
        spec = self.spec
        slots = spec.workers.slots
        desired = min(spec.workers.replicas, slots)
        occupants: dict[int, list[Obj]] = {}
        last_loss: dict[int, datetime] = {}
        incarnations: dict[int, int] = {}
        for pod in workers:
            slot = _slot(pod)
            verdict = verdicts[name_of(pod)]
            if slot is None:
                continue
            incarnations[slot] = max(incarnations.get(slot, 0), _incarnation(name_of(pod)))
            if verdict.alive or verdict.state == PodState.SUCCEEDED:
                occupants.setdefault(slot, []).append(pod)
            elif verdict.lost and verdict.since is not None:
                last_loss[slot] = max(last_loss.get(slot, verdict.since), verdict.since)

        def keep_order(pod: Obj) -> tuple[int, int, int]:
            v = verdicts[name_of(pod)]
            return (name_of(pod) != holder, v.state != PodState.RUNNING, -_incarnation(name_of(pod)))

        # Never two live pods in one slot (a watch that lagged behind our own create): keep the best.
        for slot, pods in sorted(occupants.items()):
            pods.sort(key=keep_order)
            extras = pods[1:] if slot < slots else pods
            for pod in extras:
                self.actions.append(DeleteChild("Pod", name_of(pod), mark_deliberate=True, reason="SlotOutOfRange"))
            occupants[slot] = pods[: 1 if slot < slots else 0]
        filled = {s: p[0] for s, p in occupants.items() if p}
        # Scale down: pending pods first, then the highest slots; never the chief.
        excess = len(filled) - desired
        if excess > 0:
            order = sorted(
                filled.items(),
                key=lambda item: (
                    name_of(item[1]) == holder,
                    verdicts[name_of(item[1])].state == PodState.RUNNING,
                    -item[0],
                ),
            )
            for slot, pod in order[:excess]:
                self.actions.append(DeleteChild("Pod", name_of(pod), mark_deliberate=True, reason="ScaledDown"))
                del filled[slot]
        budget = self.budget
        if budget is not None and budget.exceeded:
            # Checkpoint and stop: SIGTERM every worker (the chief writes its checkpoint), add none.
            for pod in filled.values():
                if verdicts[name_of(pod)].alive:
                    self.actions.append(DeleteChild("Pod", name_of(pod), mark_deliberate=True, reason="BudgetExceeded"))
            filled = {}
            desired = 0
        # Fill empty slots, lowest first (as far as the budget allows).
        missing = desired - len(filled)
        if budget is not None:
            missing = min(missing, budget.allow_new_workers)
        for slot in range(slots):
            if missing <= 0:
                break
            if slot in filled:
                continue
            pod = children.worker_pod(job, spec, slot, incarnations.get(slot, 0) + 1)
            self.actions.append(CreateChild(pod, recovery_since=last_loss.get(slot)))
            missing -= 1
        alive = [verdicts[name_of(p)] for p in filled.values()]
        active = sum(v.state == PodState.RUNNING for v in alive)
        pending = sum(v.state == PodState.PENDING for v in alive) + max(0, desired - len(filled))
        reasons = sorted({v.pending_reason for v in alive if v.pending_reason})
        unschedulable = (
            f"{sum(bool(v.pending_reason) for v in alive)} worker(s) unschedulable: " + "; ".join(reasons)
            if reasons
            else ""
        )
        return active, pending, unschedulable

    def _chief(
        self, workers: list[Obj], verdicts: dict[str, PodVerdict], holder: str | None, ps_replaced: bool, active: int
    ) -> bool:
        """Elect or keep the chief, keep the Lease and the chief label right. True when a chief is healthy."""
        status, now, config = self.status, self.now, self.config
        lease = self.observed.lease
        lease_spec = (lease or {}).get("spec") or {}
        lease_epoch = int(lease_spec.get("leaseTransitions") or 0)
        prev_chief = self.prev.chief or ChiefStatus()
        epoch = max(lease_epoch, prev_chief.epoch)
        by_name = {name_of(p): p for p in workers}
        if holder and holder != prev_chief.pod and lease_epoch > prev_chief.epoch:
            # The Lease moved but the status never said so (the operator stopped between the two
            # writes): adopt that election, so it is counted once and the handover is still measured.
            old = verdicts.get(prev_chief.pod or "")
            lost_at = prev_chief.lost_at
            if prev_chief.pod and not lost_at:
                since = old.since if old is not None and old.lost else None
                lost_at = format_time(since or parse_time(lease_spec.get("acquireTime")) or now)
            status.chief_elections += 1
            prev_chief = ChiefStatus(
                pod=holder,
                epoch=lease_epoch,
                elected_at=format_time(parse_time(lease_spec.get("acquireTime")) or now),
                lost_at=lost_at,
            )
            status.chief = prev_chief
            self.events.append(EmitEvent("Normal", "ChiefElected", f"{holder} is chief at epoch {lease_epoch}"))

        lost_since: datetime | None = None
        lost_why = ""
        exclude: set[str] = set()
        if holder:
            verdict = verdicts.get(holder)
            if verdict is None or verdict.lost or verdict.state == PodState.RELEASED:
                lost_since = (verdict.since if verdict else None) or now
                lost_why = f"chief {holder} lost" + (f": {verdict.message}" if verdict and verdict.message else "")
                exclude.add(holder)
            elif verdict.state == PodState.RUNNING:
                stale_at = self._lease_expiry(lease_spec)
                if stale_at is not None and now >= stale_at:
                    lost_since = stale_at
                    lost_why = f"chief {holder} stopped renewing the lease"
                    exclude.add(holder)
                else:
                    self.timer.wake_at(stale_at)
        if lost_since is not None and prev_chief.lost_at:
            lost_since = min(lost_since, parse_time(prev_chief.lost_at) or lost_since)

        candidates = [
            Candidate(pod, self.observed.nodes.get((pod.get("spec") or {}).get("nodeName") or ""), _slot(pod) or 0)
            for name, pod in sorted(by_name.items())
            if verdicts[name].state == PodState.RUNNING and name not in exclude
        ]
        new_holder = holder
        bump = ps_replaced
        lease_update: dict[str, Any] = {}
        if (not holder or lost_since is not None) and candidates:
            choice = choose_chief(candidates, now)
            assert choice is not None
            new_holder = name_of(choice.pod)
            bump = True
            status.chief_elections += 1
            handover_from = format_time(lost_since) if lost_since is not None else None
            status.chief = ChiefStatus(pod=new_holder, epoch=epoch + 1, elected_at=self.now_text, lost_at=handover_from)
            node = (choice.pod.get("spec") or {}).get("nodeName") or "?"
            self.events.append(
                EmitEvent(
                    "Normal",
                    "ChiefElected",
                    f"{new_holder} (slot {choice.slot}, node {node}) is chief at epoch {epoch + 1}"
                    + (f"; {lost_why}" if lost_why else ""),
                )
            )
            lease_update = {"acquire_time": format_micro_time(now), "renew_time": format_micro_time(now)}
        elif lost_since is not None:
            # No running worker to take over yet: remember when the chief was lost, elect later.
            status.chief = ChiefStatus(
                pod=prev_chief.pod or holder,
                epoch=epoch,
                elected_at=prev_chief.elected_at,
                lost_at=format_time(lost_since),
            )
        elif bump:
            status.chief = ChiefStatus(
                pod=holder, epoch=epoch + 1, elected_at=prev_chief.elected_at, lost_at=prev_chief.lost_at
            )
        elif holder:
            status.chief = ChiefStatus(
                pod=holder, epoch=epoch, elected_at=prev_chief.elected_at or self.now_text, lost_at=prev_chief.lost_at
            )
            self._handover_done(lease_spec, holder)
        new_epoch = epoch + 1 if bump and new_holder else epoch

        # The Lease: create it, or move holder/epoch under a resourceVersion precondition.
        published = {
            ANNOTATION_ACTIVE_WORKERS: str(active),
            ANNOTATION_DESIRED_WORKERS: str(self.spec.workers.replicas),
        }
        lease_name_ = lease_name(self.name)
        if lease is None:
            manifest = children.lease(self.job, config.lease_duration_seconds, active, self.spec.workers.replicas)
            manifest["spec"]["leaseTransitions"] = new_epoch
            if new_holder:
                manifest["spec"].update(
                    holderIdentity=new_holder, acquireTime=format_micro_time(now), renewTime=format_micro_time(now)
                )
            self.actions.append(CreateChild(manifest))
        else:
            changes: dict[str, Any] = {}
            if new_holder != holder or new_epoch != lease_epoch:
                changes.update(holder=new_holder, epoch=new_epoch, resource_version=meta(lease).get("resourceVersion"))
                changes.update(lease_update)
            if lease_spec.get("leaseDurationSeconds") != config.lease_duration_seconds:
                changes["lease_duration_seconds"] = config.lease_duration_seconds
            annotations = {k: v for k, v in published.items() if annotations_of(lease).get(k) != v}
            if changes or annotations:
                self.actions.append(UpdateLease(name=lease_name_, annotations=annotations, **changes))

        # Exactly one pod carries the chief label: take it off others first, then put it on.
        for name, pod in sorted(by_name.items()):
            if labels_of(pod).get(LABEL_CHIEF) and name != new_holder:
                self.actions.append(LabelPod(name, {LABEL_CHIEF: None}))
        if new_holder in by_name and labels_of(by_name[new_holder]).get(LABEL_CHIEF) != "true":
            self.actions.append(LabelPod(new_holder, {LABEL_CHIEF: "true"}))
        return (
            bool(new_holder)
            and verdicts.get(new_holder or "") is not None
            and (verdicts[new_holder or ""].state == PodState.RUNNING)
            and (new_holder != holder or lost_since is None)
        )

    def _lease_expiry(self, lease_spec: Obj) -> datetime | None:
        acquired = parse_time(lease_spec.get("acquireTime"))
        renewed = parse_time(lease_spec.get("renewTime"))
        duration = timedelta(seconds=int(lease_spec.get("leaseDurationSeconds") or self.config.lease_duration_seconds))
        if renewed is not None and (acquired is None or renewed > acquired):
            return renewed + duration
        start = acquired or renewed
        if start is None:
            return None
        return start + max(duration, timedelta(seconds=self.config.chief_startup_seconds))

    def _handover_done(self, lease_spec: Obj, holder: str) -> None:
        """The new chief renewed its lease: the handover is over; measure it."""
        chief = self.status.chief
        if chief is None or not chief.lost_at or chief.pod != holder:
            return
        acquired = parse_time(lease_spec.get("acquireTime"))
        renewed = parse_time(lease_spec.get("renewTime"))
        lost = parse_time(chief.lost_at)
        if renewed is None or acquired is None or lost is None or renewed <= acquired:
            return
        self.observations.append(Observation("chief_handover_seconds", max(0.0, (renewed - lost).total_seconds())))
        chief.lost_at = None
