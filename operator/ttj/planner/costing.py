"""The planner's seam to ttj.cost: turn observed pods into cost observations, accrue, ask the budget."""

from __future__ import annotations

from datetime import datetime

from ttj.api.models import CostStatus, TransientTrainingJobSpec
from ttj.cost.budget import BudgetDecision, budget_decision
from ttj.cost.model import NodeShape, PodObservation, accrue, expected_worker_node, worker_hourly_rate
from ttj.cost.prices import PriceTable
from ttj.planner.classify import PodVerdict
from ttj.planner.observed import Observed, labels_of, meta, name_of
from ttj_contract import LABEL_ROLE, parse_time


def _ended_at(pod: dict, verdict: PodVerdict | None) -> datetime | None:  # type: ignore[type-arg]
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        finished = parse_time(((status.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        if finished is not None:
            return finished
    if verdict is not None and (verdict.lost or verdict.since is not None):
        return verdict.since
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return parse_time(meta(pod).get("deletionTimestamp")) or parse_time((pod.get("status") or {}).get("startTime"))
    return None


def observations(
    spec: TransientTrainingJobSpec, observed: Observed, verdicts: dict[str, PodVerdict]
) -> list[PodObservation]:
    """Every pod of the job that has run, with its node's shape, for :func:`ttj.cost.model.accrue`."""
    out = []
    for pod in observed.pods:
        role = labels_of(pod).get(LABEL_ROLE)
        if role not in ("ps", "worker"):
            continue
        status = pod.get("status") or {}
        started = parse_time(status.get("startTime")) if status.get("phase") != "Pending" else None
        node_name = (pod.get("spec") or {}).get("nodeName")
        node = observed.nodes.get(node_name) if node_name else None
        shape = None
        if node is not None:
            capacity = ((node.get("status") or {}).get("capacity") or {}).get("nvidia.com/gpu")
            gpus = int(str(capacity)) if str(capacity or "").isdigit() else None
            shape = NodeShape.from_labels(labels_of(node), gpus)
        out.append(
            PodObservation(
                name=name_of(pod),
                uid=str(meta(pod).get("uid") or name_of(pod)),
                role="ps" if role == "ps" else "worker",
                started_at=started,
                ended_at=_ended_at(pod, verdicts.get(name_of(pod))) if started is not None else None,
                node=shape,
                gpus=spec.workers.gpus_per_worker if role == "worker" else 0,
            )
        )
    return out


def accrue_and_decide(
    spec: TransientTrainingJobSpec,
    observed: Observed,
    verdicts: dict[str, PodVerdict],
    previous: CostStatus | None,
    *,
    now: datetime,
    prices: PriceTable,
    requested_new_workers: int,
    pending_workers: int,
    stop_lead_seconds: float = 0.0,
) -> tuple[CostStatus, BudgetDecision]:
    fallback = expected_worker_node(spec, prices)
    cost = accrue(previous, observations(spec, observed, verdicts), now, prices, fallback_worker_node=fallback)
    decision = budget_decision(
        spec,
        cost,
        requested_new_workers=requested_new_workers,
        worker_usd_per_hour=worker_hourly_rate(spec, prices),
        pending_workers=pending_workers,
        stop_lead_seconds=stop_lead_seconds,
    )
    return cost, decision
