"""The plan of ``ttj simulate --plan`` as JSON (``--json``): the target, the search, every candidate, the manifests."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ttj.simulate.fleet_manifests import GROUPS_NOTE, deadline_spec
from ttj.simulate.fleet_search import Evaluation, FleetPlan


def plan_document(plan: FleetPlan, grouped: dict[str, Any] | None, today: dict[str, Any] | None) -> dict[str, Any]:
    """What ``--json`` writes: the plan, and its manifests (none without a plan)."""
    deadline = deadline_spec(plan.best.mix, plan.target.deadline_s) if plan.best is not None else None
    return plan_json(plan) | {"manifest": grouped, "manifestToday": today, "deadline": deadline, "note": GROUPS_NOTE}


def evaluation_json(evaluation: Evaluation) -> dict[str, Any]:
    low, high = evaluation.odds_interval

    def finite(value: float) -> float | None:
        return None if math.isinf(value) or math.isnan(value) else value

    return {
        "mix": evaluation.mix.label,
        "groups": [dataclasses.asdict(g) for g in evaluation.mix.groups],
        "runs": evaluation.runs,
        "met": evaluation.met,
        "completed": evaluation.completed,
        "odds": evaluation.odds,
        "oddsWilson95": [low, high],
        "oddsModelRange": [finite(evaluation.odds_pessimistic), finite(evaluation.odds_optimistic)],
        "costPerDoneJobUsd": finite(evaluation.cost_per_done_usd),
        "runCostP5P95Usd": [evaluation.cost_p5_usd, evaluation.cost_p95_usd],
        "timeAtConfidenceS": finite(evaluation.time_at_confidence_s),
        "throughputStepsPerSecond": [
            evaluation.throughput.low,
            evaluation.throughput.central,
            evaluation.throughput.high,
        ],
        "extrapolated": evaluation.throughput.extrapolated,
        "notes": list(evaluation.throughput.why),
        "rejectedEarly": evaluation.rejected_early,
        "crossZoneUsdPerDoneJob": evaluation.cross_zone_usd,
    }


def plan_json(plan: FleetPlan) -> dict[str, Any]:
    def maybe(evaluation: Evaluation | None) -> dict[str, Any] | None:
        return evaluation_json(evaluation) if evaluation is not None else None

    return {
        "target": dataclasses.asdict(plan.target),
        "searchSpace": plan.space,
        "mixes": plan.mixes,
        "pruned": plan.pruned,
        "stopped": plan.stopped,
        "simulated": [evaluation_json(e) for e in plan.evaluated],
        "best": maybe(plan.best),
        "fastest": maybe(plan.fastest),
        "reference": maybe(plan.reference),
    }
