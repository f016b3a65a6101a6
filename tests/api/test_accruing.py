"""Which status fields grow with time alone is declared on the models, and read from them at any depth."""

from __future__ import annotations

from pydantic import BaseModel

from ttj.api.models import (
    ACCRUES,
    CostStatus,
    PodCost,
    SavingsStatus,
    TransientTrainingJobStatus,
    WorkerGroupStatus,
    without_accruing,
)


def marked(model: type[BaseModel]) -> list[str]:
    return [info.alias or name for name, info in model.model_fields.items() if ACCRUES in info.metadata]


def test_the_accruing_fields_are_the_cost_figures_and_what_is_made_of_them() -> None:
    assert {model.__name__: marked(model) for model in (CostStatus, SavingsStatus, PodCost, WorkerGroupStatus)} == {
        "CostStatus": ["usd", "onDemandEquivalentUSD", "summary", "accruedAt"],
        "SavingsStatus": ["onDemandUSD", "grossUSD", "netUSD", "netPercent"],
        "PodCost": ["usd", "onDemandEquivalentUSD"],
        "WorkerGroupStatus": ["usd"],
    }
    assert marked(TransientTrainingJobStatus) == []


def test_a_status_without_its_accruing_fields_keeps_everything_else_at_every_depth() -> None:
    status = {
        "phase": "Running",
        "cost": {
            "usd": 1.5,
            "summary": "$1.50",
            "settledUSD": 0.25,
            "pods": [{"name": "w", "uid": "u", "usd": 1.0, "usdPerHour": 0.35}],
        },
        "savings": {"netUSD": 3.0, "preemptionLossOnDemandUSD": 0.1},
        "workerGroups": [{"name": "spot", "usd": 1.0, "active": 2}],
        "unknownToTheModel": {"usd": 7},
    }
    assert without_accruing(TransientTrainingJobStatus, status) == {
        "phase": "Running",
        "cost": {"settledUSD": 0.25, "pods": [{"name": "w", "uid": "u", "usdPerHour": 0.35}]},
        "savings": {"preemptionLossOnDemandUSD": 0.1},
        "workerGroups": [{"name": "spot", "active": 2}],
        "unknownToTheModel": {"usd": 7},
    }
