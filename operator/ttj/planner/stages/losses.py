"""What each loss cost, and the savings against on-demand prices net of those costs.

A loss is recorded in ``status.preemptionCosts`` when it is counted (a worker or the chief preempted, a
parameter server replaced) and closed when its replacement is ready. What it cost is read from the
cluster alone:

- steps lost: global steps trained again. A parameter server's loss rolls training back to the latest
  checkpoint; a worker's or the chief's does not, the parameter servers keep the model.
- seconds the slot stood empty: from the loss to the replacement being ready (its Ready condition, else
  its container running).
- the replacement's start-up: what the replacement was paid for (from its start time, as the cost ledger
  charges it) before it was ready; the lost steps are priced at the job's average cost per step.

The totals live in ``status.savings`` and grow as losses are counted and closed, each in the same status
write as the record itself, so a pass that is retried or an operator restart counts each once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from ttj.api.models import CostStatus, PreemptionCost, ProgressStatus, SavingsStatus
from ttj.planner.actions import EmitEvent
from ttj.planner.classify import PodState, PodVerdict
from ttj.planner.lost import ServerLoss
from ttj.planner.observed import (
    Obj,
    condition,
    container_statuses,
    has_role,
    meta,
    name_of,
    phase_of,
    pod_status,
    slot_of,
)
from ttj_contract import Role, format_time, format_usd, parse_time, worker_incarnation

#: Records kept in status.preemptionCosts (a status object lives in etcd, at most 1.5 MB); older ones live on
#: only in status.savings' totals.
KEPT_RECORDS = 20


@dataclass(frozen=True)
class LossAccounting:
    costs: list[PreemptionCost] | None
    savings: SavingsStatus | None
    events: tuple[EmitEvent, ...]


def ready_at(pod: Obj) -> datetime | None:
    """When a pod was ready to work: its Ready condition, else its container running, else its start time."""
    ready = condition(pod, "Ready")
    if ready is not None and ready.get("status") == "True":
        moment = parse_time(ready.get("lastTransitionTime"))
        if moment is not None:
            return moment
    for status in container_statuses(pod):
        started = parse_time(status.get("state", {}).get("running", {}).get("startedAt"))
        if started is not None:
            return started
    if phase_of(pod) == "Running":
        return parse_time(pod_status(pod).get("startTime"))
    return None


def account_losses(
    records: Sequence[PreemptionCost],
    savings: SavingsStatus | None,
    *,
    lost_workers: Iterable[str],
    lost_servers: Iterable[ServerLoss],
    chief: str | None,
    pods: Iterable[Obj],
    verdicts: Mapping[str, PodVerdict],
    progress: ProgressStatus | None,
    cost: CostStatus | None,
    now: datetime,
) -> LossAccounting:
    """Open a record for each new loss, close those whose replacement is ready, and total them up.

    ``lost_workers`` are the worker pods counted as preempted in this pass, ``chief`` the pod the last
    written status names as chief, ``progress`` and ``cost`` this pass's.
    """
    by_name = {name_of(p): p for p in pods}
    opened = _opened(
        lost_workers,
        lost_servers,
        chief=chief,
        by_name=by_name,
        verdicts=verdicts,
        progress=progress,
        cost=cost,
        now=now,
    )

    events: list[EmitEvent] = []
    closed: list[PreemptionCost] = []
    updated: list[PreemptionCost] = []
    # A pod replaces one loss only, and a slot's own next pod is its own loss's.
    claimed = {record.replacement for record in records if record.replacement}
    open_slots = {r.slot for r in [*records, *opened] if r.recovered_at is None and r.role != "ps"}
    for record in [*records, *opened]:
        if record.recovered_at is not None:
            updated.append(record)
            continue
        replacement = _replacement(record, by_name, verdicts, claimed, open_slots)
        done = _close(record, replacement, cost) if replacement is not None else None
        if done is None:
            updated.append(record)
            continue
        claimed.add(done.replacement or "")
        updated.append(done)
        closed.append(done)
        events.append(EmitEvent("Normal", "PreemptionCost", describe(done)))

    kept, dropped_open = _keep(updated)
    return LossAccounting(kept or None, _totals(savings, opened, closed, cost, dropped_open), tuple(events))


def _opened(
    lost_workers: Iterable[str],
    lost_servers: Iterable[ServerLoss],
    *,
    chief: str | None,
    by_name: Mapping[str, Obj],
    verdicts: Mapping[str, PodVerdict],
    progress: ProgressStatus | None,
    cost: CostStatus | None,
    now: datetime,
) -> list[PreemptionCost]:
    """A record for each loss counted in this pass, with the step and the job's cost at the loss."""
    step = progress.global_step if progress is not None else 0
    job_usd = cost.usd if cost is not None else 0.0
    opened: list[PreemptionCost] = []
    for name in lost_workers:
        pod = by_name.get(name, {})
        verdict = verdicts.get(name)
        opened.append(
            PreemptionCost(
                pod=name,
                role="chief" if name == chief else "worker",
                slot=slot_of(pod),
                started_at=pod_status(pod).get("startTime"),
                lost_at=format_time((verdict.since if verdict is not None else None) or now),
                global_step=step,
                steps_lost=0,
                job_usd=job_usd,
            )
        )
    for server in lost_servers:
        new = by_name.get(server.new, {})
        since = parse_time(meta(new).get("creationTimestamp")) or now
        at_checkpoint = progress.checkpoint_step if progress is not None else None
        opened.append(
            PreemptionCost(
                pod=server.old,
                role="ps",
                slot=server.index,
                lost_at=format_time(since),
                global_step=step,
                steps_lost=max(0, step - (at_checkpoint or 0)),
                job_usd=job_usd,
                replacement=server.new,
            )
        )
    return opened


def _replacement(
    record: PreemptionCost,
    pods: Mapping[str, Obj],
    verdicts: Mapping[str, PodVerdict],
    claimed: set[str],
    open_slots: set[int | None],
) -> tuple[Obj, datetime] | None:
    """The pod that took the loss over and is ready, with when it became ready.

    A worker's is the next incarnation of its slot, else the first worker made after the loss in a slot
    with no open loss of its own (a slot that was free then: a job with maxReplicas above replicas refills
    where it has room), which no other loss claimed.
    """
    if record.role == "ps":
        pod = pods.get(record.replacement or "")
        moment = ready_at(pod) if pod is not None else None
        return (pod, moment) if pod is not None and moment is not None else None
    lost = parse_time(record.lost_at)
    same_slot: list[tuple[int, Obj, datetime]] = []
    other_slot: list[tuple[datetime, Obj, datetime]] = []
    for name, pod in pods.items():
        if not has_role(pod, Role.WORKER) or name == record.pod or name in claimed:
            continue
        verdict = verdicts.get(name)
        moment = ready_at(pod)
        if verdict is None or verdict.state != PodState.RUNNING or moment is None:
            continue
        if slot_of(pod) == record.slot:
            if worker_incarnation(name) > worker_incarnation(record.pod):
                same_slot.append((worker_incarnation(name), pod, moment))
        elif slot_of(pod) not in open_slots and _made_after(pod, lost):
            other_slot.append((moment, pod, moment))
    if same_slot:
        _, pod, moment = min(same_slot, key=lambda item: item[0])
        return pod, moment
    if other_slot:
        _, pod, moment = min(other_slot, key=lambda item: (item[0], name_of(item[1])))
        return pod, moment
    return None


def _made_after(pod: Obj, moment: datetime | None) -> bool:
    """Whether the pod was created at or after ``moment`` (creation times are whole seconds)."""
    created = parse_time(meta(pod).get("creationTimestamp"))
    return moment is not None and created is not None and created >= moment.replace(microsecond=0)


def _close(record: PreemptionCost, replacement: tuple[Obj, datetime], cost: CostStatus | None) -> PreemptionCost:
    pod, ready = replacement
    lost = parse_time(record.lost_at) or ready
    charged_from = parse_time(pod_status(pod).get("startTime")) or ready
    startup = max(0.0, (ready - charged_from).total_seconds())
    entry = next((e for e in (cost.pods if cost is not None else None) or [] if e.name == name_of(pod)), None)
    update: dict[str, object] = {
        "replacement": name_of(pod),
        "recovered_at": format_time(ready),
        "slot_empty_seconds": max(0.0, (ready - lost).total_seconds()),
        "startup_seconds": startup,
    }
    if cost is not None:
        per_step = record.job_usd / record.global_step if record.global_step else 0.0
        ratio = cost.on_demand_equivalent_usd / cost.usd if cost.usd else 1.0
        startup_usd = entry.usd_per_hour * startup / 3600 if entry is not None else 0.0
        startup_on_demand = entry.on_demand_usd_per_hour * startup / 3600 if entry is not None else 0.0
        redo = record.steps_lost * per_step
        update |= {
            "startup_usd": startup_usd,
            "usd": startup_usd + redo,
            "on_demand_equivalent_usd": startup_on_demand + redo * ratio,
        }
    return record.model_copy(update=update)


def _totals(
    before: SavingsStatus | None,
    opened: Sequence[PreemptionCost],
    closed: Sequence[PreemptionCost],
    cost: CostStatus | None,
    dropped_open: int = 0,
) -> SavingsStatus | None:
    previous = before or SavingsStatus()
    loss_usd = previous.preemption_loss_usd + sum(r.usd or 0.0 for r in closed)
    loss_on_demand = previous.preemption_loss_on_demand_usd + sum(r.on_demand_equivalent_usd or 0.0 for r in closed)
    totals = previous.model_copy(
        update={
            "losses": previous.losses + len(opened),
            "recovered": previous.recovered + len(closed),
            "dropped_open": previous.dropped_open + dropped_open,
            "steps_lost": previous.steps_lost + sum(r.steps_lost for r in opened),
            "slot_empty_seconds": previous.slot_empty_seconds + sum(r.slot_empty_seconds or 0.0 for r in closed),
            "preemption_loss_usd": loss_usd,
            "preemption_loss_on_demand_usd": loss_on_demand,
        }
    )
    if cost is None:
        return totals if (before is not None or opened) else None
    on_demand = max(0.0, cost.on_demand_equivalent_usd - loss_on_demand)
    net = on_demand - cost.usd
    return totals.model_copy(
        update={
            "on_demand_usd": on_demand,
            "gross_usd": cost.on_demand_equivalent_usd - cost.usd,
            "net_usd": net,
            "net_percent": 100.0 * net / on_demand if on_demand > 0 else None,
        }
    )


def _keep(records: list[PreemptionCost]) -> tuple[list[PreemptionCost], int]:
    """The newest :data:`KEPT_RECORDS`, and how many open records were dropped. Closed records go first, oldest
    first (an open one may still close); were more than :data:`KEPT_RECORDS` open (replacements that never
    came), the oldest open ones go too, so that the status stays small whatever happens."""
    surplus = len(records) - KEPT_RECORDS
    if surplus <= 0:
        return records, 0
    closed = [i for i, record in enumerate(records) if record.recovered_at is not None]
    still_open = [i for i, record in enumerate(records) if record.recovered_at is None]
    dropped_open = still_open[: max(0, surplus - len(closed))]
    dropped = {*closed[:surplus], *dropped_open}
    return [r for i, r in enumerate(records) if i not in dropped], len(dropped_open)


def describe(record: PreemptionCost) -> str:
    """One line of what a loss cost, as the PreemptionCost Event and ``ttj timeline`` say it."""
    what = {"ps": "parameter server", "chief": "chief", "worker": "worker"}[record.role]
    where = f"{what} {record.pod}" + (
        f" (slot {record.slot})" if record.slot is not None and record.role != "ps" else ""
    )
    parts = [f"{record.steps_lost} steps lost"]
    if record.slot_empty_seconds is not None:
        parts.append(
            f"{'parameter server down' if record.role == 'ps' else 'slot empty'} {record.slot_empty_seconds:.0f} s"
        )
    if record.startup_seconds is not None:
        startup = f"start-up of {record.replacement} {record.startup_seconds:.0f} s"
        if record.startup_usd is not None:
            startup += f" {format_usd(record.startup_usd)}"
        parts.append(startup)
    if record.usd is not None:
        parts.append(f"{format_usd(record.usd)} in all")
    return f"{where} lost at {record.lost_at}: " + ", ".join(parts)
