"""The cost and budget stage: turn observed pods into cost observations, accrue, ask the budget."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from ttj.api.models import ZONE_LABEL, CostStatus, TransientTrainingJobSpec
from ttj.cost.budget import BudgetDecision, budget_decision, spending_decision
from ttj.cost.model import NodeShape, PodObservation, accrue, expected_worker_node, worker_hourly_rate
from ttj.cost.model import Role as CostRole
from ttj.cost.pools import gpu_capacity
from ttj.cost.prices import PriceTable
from ttj.cost.traffic import ZonedWorker, add_cross_zone, cross_zone_traffic, seconds_in, steps_to_price
from ttj.planner.children import WORKER_TERMINATION_GRACE_SECONDS
from ttj.planner.classify import PodState, PodVerdict
from ttj.planner.config import PlannerConfig
from ttj.planner.groups import Group, Unavailable, choose_group, group_of, in_catch_up_group, worker_gpus
from ttj.planner.observed import (
    Obj,
    Observed,
    annotations_of,
    container_statuses,
    is_terminal,
    labels_of,
    meta,
    name_of,
    node_name_of,
    phase_of,
    pod_status,
)
from ttj.planner.rates import pod_steps_per_second
from ttj_contract import ANNOTATION_PROGRESS, LABEL_PS_INDEX, LABEL_ROLE, LeaseProgress, Role, parse_time


def _ended_at(pod: Obj, verdict: PodVerdict | None) -> datetime | None:
    for status in container_statuses(pod):
        finished = parse_time(status.get("state", {}).get("terminated", {}).get("finishedAt"))
        if finished is not None:
            return finished
    if verdict is not None and (verdict.lost or verdict.since is not None):
        return verdict.since
    if is_terminal(pod):
        return parse_time(meta(pod).get("deletionTimestamp")) or parse_time(pod_status(pod).get("startTime"))
    return None


def observations(
    spec: TransientTrainingJobSpec, observed: Observed, verdicts: Mapping[str, PodVerdict]
) -> list[PodObservation]:
    """Every pod of the job that has run, with its node's shape, for :func:`ttj.cost.model.accrue`."""
    out = []
    for pod in observed.pods:
        label = labels_of(pod).get(LABEL_ROLE)
        if label not in (Role.PS, Role.WORKER):
            continue
        role: CostRole = "ps" if label == Role.PS else "worker"
        status = pod_status(pod)
        started = parse_time(status.get("startTime")) if status.get("phase") != "Pending" else None
        node_name = node_name_of(pod)
        node = observed.nodes.get(node_name) if node_name else None
        shape = None
        if node is not None:
            shape = NodeShape.from_labels(labels_of(node), gpu_capacity(node))
        zone = labels_of(node).get(ZONE_LABEL) if node is not None else None
        out.append(
            PodObservation(
                name=name_of(pod),
                uid=str(meta(pod).get("uid") or name_of(pod)),
                role=role,
                started_at=started,
                ended_at=_ended_at(pod, verdicts.get(name_of(pod))) if started is not None else None,
                node=shape,
                gpus=worker_gpus(spec, pod) if label == Role.WORKER else 0,
                group=group_of(pod),
                zone=zone or None,
            )
        )
    return out


def parameter_server_zones(observed: Observed, count: int) -> list[str | None]:
    """The zone of each parameter server's running pod, by PS index; None when unknown."""
    zones: list[str | None] = [None] * count
    for pod in observed.pods:
        labels = labels_of(pod)
        index = labels.get(LABEL_PS_INDEX, "")
        if labels.get(LABEL_ROLE) != Role.PS or not index.isdigit() or int(index) >= count:
            continue
        node = observed.nodes.get(node_name_of(pod) or "")
        if node is not None and phase_of(pod) == "Running":
            zones[int(index)] = labels_of(node).get(ZONE_LABEL) or None
    return zones


def priced_traffic(
    cost: CostStatus, pods: list[PodObservation], observed: Observed, *, now: datetime, prices: PriceTable
) -> CostStatus:
    """``cost`` with the cross-zone traffic of the steps since the last priced one added (:mod:`ttj.cost.traffic`),
    once the chief reports the bytes its parameter servers hold; each worker's share follows the steps per
    second the chief measured for its slot, where it did."""
    report = LeaseProgress.from_annotation(annotations_of(observed.lease or {}).get(ANNOTATION_PROGRESS))
    if report is None or report.parameter_bytes is None:
        return cost
    mark = cost.cross_zone
    steps = steps_to_price(mark.step if mark is not None else None, report.global_step)
    since = parse_time(mark.priced_at) if mark is not None else None
    rates = pod_steps_per_second(report.slot_steps_per_second, observed.pods)
    workers = [
        ZonedWorker(pod.uid, pod.zone, seconds_in(pod.started_at, pod.ended_at, since or now, now), rates.get(pod.name))
        for pod in pods
        if pod.role == "worker" and pod.started_at is not None
    ]
    traffic = cross_zone_traffic(
        workers,
        ps_zones=parameter_server_zones(observed, len(report.parameter_bytes)),
        parameter_bytes=report.parameter_bytes,
        steps=steps,
        usd_per_gib=prices.inter_zone_usd_per_gib,
    )
    return add_cross_zone(cost, traffic, global_step=report.global_step, now=now)


@dataclass(frozen=True)
class Costing:
    """status.cost and what the budget allows."""

    cost: CostStatus | None
    #: None when nothing is priced, or a cost function stands in for prices and the job has no budget.
    budget: BudgetDecision | None
    #: The budget allows one worker more than replicas (priced at the group a new worker goes to): to move a
    #: worker back to a preferred group, make-before-break.
    allows_extra: bool = True
    #: What one more worker of each group costs per hour (empty without prices): which worker a scale-down
    #: releases first.
    group_rates: Mapping[str | None, float] = field(default_factory=dict)


def cost_and_budget(
    spec: TransientTrainingJobSpec,
    observed: Observed,
    verdicts: Mapping[str, PodVerdict],
    previous: CostStatus | None,
    *,
    now: datetime,
    config: PlannerConfig,
    groups: tuple[Group, ...],
    unavailable: Mapping[str, Unavailable] | None = None,
) -> Costing:
    """Accrue the cost (from prices, or the configured cost function) and ask the budget.

    Without either, status.cost stays as it was and the budget is not checked. ``unavailable``: the groups new
    workers skip (:func:`ttj.planner.groups.recorded_unavailable`), for the group a new worker is priced at;
    ``groups``: the spec's worker groups (:func:`ttj.planner.groups.groups_of`).
    """
    if config.prices is not None:
        return _priced(
            spec,
            observed,
            verdicts,
            previous,
            now=now,
            prices=config.prices,
            groups=groups,
            unavailable=unavailable or {},
        )
    if config.cost is not None:
        cost = config.cost(spec, observed, previous, now)
        return Costing(cost, spending_decision(spec, cost))
    return Costing(previous, None)


def _priced(
    spec: TransientTrainingJobSpec,
    observed: Observed,
    verdicts: Mapping[str, PodVerdict],
    previous: CostStatus | None,
    *,
    now: datetime,
    prices: PriceTable,
    groups: tuple[Group, ...],
    unavailable: Mapping[str, Unavailable],
) -> Costing:
    alive = {name: v for name, v in verdicts.items() if v.alive}
    alive_pods = [pod for pod in observed.pods if name_of(pod) in alive]
    nodes = {group.name: _group_worker_node(group, observed, alive_pods, prices) for group in groups}
    rates = {group.name: worker_hourly_rate(group.spec, prices, nodes[group.name]) for group in groups}
    pods = observations(spec, observed, verdicts)
    cost = accrue(
        previous,
        pods,
        now,
        prices,
        fallback_worker_node=expected_worker_node(spec, prices),
        group_worker_nodes={name: node for name, node in nodes.items() if name is not None},
    )
    cost = priced_traffic(cost, pods, observed, now=now, prices=prices)
    new_worker = _next_group(groups, alive_pods, unavailable)
    pending = [pod for pod in alive_pods if alive[name_of(pod)].state == PodState.PENDING]
    # the deadline's catch-up workers are on top of replicas: they leave no replica's place taken
    replicas_alive = len(alive) - sum(in_catch_up_group(groups, pod) for pod in alive_pods)
    requested = max(0, min(spec.workers.replicas, spec.workers.slots) - replicas_alive)

    def decide(new_workers: int) -> BudgetDecision:
        return budget_decision(
            spec,
            cost,
            requested_new_workers=new_workers,
            worker_usd_per_hour=rates[new_worker.name],
            pending_workers=len(pending),
            pending_usd_per_hour=sum(rates.get(group_of(pod), rates[new_worker.name]) for pod in pending),
            # The chief's time to checkpoint after SIGTERM: stop this long before the money runs out.
            stop_lead_seconds=WORKER_TERMINATION_GRACE_SECONDS,
        )

    return Costing(
        cost,
        decide(requested),
        allows_extra=decide(requested + 1).cap(requested + 1) == requested + 1,
        group_rates=rates,
    )


def _group_worker_node(group: Group, observed: Observed, alive: list[Obj], prices: PriceTable) -> NodeShape:
    """The node a worker of ``group`` is priced on before its own is known: the node its fields describe, or,
    for a group whose compute class chooses the nodes, the node its latest started live worker landed on (the
    fields' node, spec.workers', only while none has)."""
    if group.compute_class is not None:
        landed = []
        for pod in alive:
            node_name = node_name_of(pod)
            node = observed.nodes.get(node_name) if node_name and group_of(pod) == group.name else None
            started = parse_time(pod_status(pod).get("startTime"))
            if node is not None and started is not None:
                landed.append((started, name_of(pod), node))
        if landed:
            _, _, node = max(landed, key=lambda item: (item[0], item[1]))
            return NodeShape.from_labels(labels_of(node), gpu_capacity(node))
    return expected_worker_node(group.spec, prices)


def _next_group(groups: tuple[Group, ...], alive: list[Obj], unavailable: Mapping[str, Unavailable]) -> Group:
    """The group a new worker goes to (the one its projected price is of); the first group when none has room."""
    held = Counter(group_of(pod) for pod in alive)
    return choose_group(groups, held, unavailable) or groups[0]
