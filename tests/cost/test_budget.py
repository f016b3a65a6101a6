"""Budget decisions: how many workers may be added, and when the job must checkpoint and stop."""

from __future__ import annotations

import pytest

from ttj.api.models import CostStatus, TransientTrainingJobSpec
from ttj.cost.budget import budget_decision


def spec(max_cost: float | None) -> TransientTrainingJobSpec:
    raw: dict[str, object] = {"trainSteps": 1000, "checkpoint": {"uri": "/ckpt"}, "workers": {"replicas": 4}}
    if max_cost is not None:
        raw["budget"] = {"maxCostUSD": max_cost}
    return TransientTrainingJobSpec.model_validate(raw)


def spent(usd: float, per_hour: float) -> CostStatus:
    return CostStatus(usd=usd, usd_per_hour=per_hour)


def test_without_a_budget_everything_asked_for_is_allowed() -> None:
    decision = budget_decision(spec(None), spent(100, 10), requested_new_workers=3, worker_usd_per_hour=1)
    assert decision.allow_new_workers == 3
    assert not decision.exceeded
    assert decision.message == ""


@pytest.mark.parametrize(
    # budget $10, spent $8, running $2/h, new workers $1/h each, horizon 15 min → room for (10-8-0.5)/0.25 = 6
    ("requested", "pending", "allowed"),
    [(2, 0, 2), (6, 0, 6), (7, 0, 6), (10, 2, 4), (3, 6, 0)],
)
def test_new_workers_are_allowed_while_the_projection_stays_within_budget(
    requested: int, pending: int, allowed: int
) -> None:
    decision = budget_decision(
        spec(10), spent(8, 2), requested_new_workers=requested, worker_usd_per_hour=1, pending_workers=pending
    )
    assert decision.allow_new_workers == allowed
    assert not decision.exceeded
    assert decision.projected_usd <= 10 + 1e-9
    if allowed < requested:
        assert "budget.maxCostUSD $10.00" in decision.message
        assert f"adding {allowed}" in decision.message


def test_reaching_the_budget_stops_the_job() -> None:
    decision = budget_decision(spec(10), spent(10.004, 2), requested_new_workers=1, worker_usd_per_hour=1)
    assert decision.exceeded
    assert decision.allow_new_workers == 0
    assert decision.message == "cost $10.00 reached budget.maxCostUSD $10.00: checkpointing and stopping the job"


def test_stop_lead_leaves_time_for_the_final_checkpoint_within_budget() -> None:
    # $9.95 spent at $6/h: 30 s of checkpointing costs $0.05, so the stop starts now
    assert budget_decision(
        spec(10), spent(9.95, 6), requested_new_workers=0, worker_usd_per_hour=1, stop_lead_seconds=30
    ).exceeded
    assert not budget_decision(
        spec(10), spent(9.94, 6), requested_new_workers=0, worker_usd_per_hour=1, stop_lead_seconds=30
    ).exceeded
    assert not budget_decision(spec(10), spent(9.95, 6), requested_new_workers=0, worker_usd_per_hour=1).exceeded


def test_no_ledger_yet_means_nothing_spent() -> None:
    decision = budget_decision(spec(1), None, requested_new_workers=4, worker_usd_per_hour=1, horizon_seconds=900)
    assert decision.allow_new_workers == 4
    assert decision.projected_usd == pytest.approx(1.0)


def test_the_budget_counts_cross_zone_traffic_as_spent_and_its_rate_as_running() -> None:
    from ttj.api.models import CrossZoneStatus

    cost = CostStatus(usd=9.0, usd_per_hour=1.0)
    traffic = CrossZoneStatus(usd=4.0, step=1, priced_at="2026-11-26T03:00:00.000000Z", usd_per_hour=3.0)
    # 15 minutes ahead: $9 + $1/h leaves room for 3 workers at $1/h; with the traffic's $3/h, for none
    assert budget_decision(spec(10.0), cost, requested_new_workers=3, worker_usd_per_hour=1.0).allow_new_workers == 3
    with_traffic = cost.model_copy(update={"cross_zone": traffic})
    decision = budget_decision(spec(10.0), with_traffic, requested_new_workers=3, worker_usd_per_hour=1.0)
    assert decision.allow_new_workers == 0
