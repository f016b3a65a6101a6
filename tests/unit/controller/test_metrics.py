"""The operator's metrics follow the status it writes: counters grow by what the status adds, gauges follow it."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from ttj.controller.metrics import Metrics


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, {"namespace": "ns", "job": "j", **labels})


def test_savings_losses_budget_phase_and_epoch_follow_the_status() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    first = {
        "phase": "Running",
        "chief": {"epoch": 1},
        "cost": {"usd": 1.0, "onDemandEquivalentUSD": 3.0},
        "savings": {"stepsLost": 0, "netUSD": 1.9, "preemptionLossUSD": 0.1},
        "preemptionCosts": [
            {"pod": "w-0-1", "lostAt": "t1", "recoveredAt": "t2", "slotEmptySeconds": 40.0},
            {"pod": "w-1-1", "lostAt": "t3"},
        ],
    }
    metrics.status_written("ns", "j", {}, first, {"budget": {"maxCostUSD": 5}})
    second = {
        **first,
        "phase": "Recovering",
        "chief": {"epoch": 2},
        "progress": {"globalStep": 500, "checkpointStep": 400, "checkpointTime": "2026-11-23T08:00:00Z"},
        "savings": {"stepsLost": 100, "netUSD": 1.5, "preemptionLossUSD": 0.3},
        "preemptionCosts": [
            {"pod": "w-0-1", "lostAt": "t1", "recoveredAt": "t2", "slotEmptySeconds": 40.0},
            {"pod": "w-1-1", "lostAt": "t3", "recoveredAt": "t4", "slotEmptySeconds": 30.0},
        ],
    }
    metrics.status_written("ns", "j", first, second, {"budget": {"maxCostUSD": 5}})
    assert value(registry, "ttj_steps_lost_total") == 100
    assert value(registry, "ttj_slot_empty_seconds_count") == 2, "each loss observed once, when it closes"
    assert value(registry, "ttj_slot_empty_seconds_sum") == 70.0
    assert value(registry, "ttj_job_net_savings_usd") == 1.5
    assert value(registry, "ttj_job_preemption_loss_usd") == 0.3
    assert value(registry, "ttj_job_on_demand_equivalent_usd") == 3.0
    assert value(registry, "ttj_job_budget_usd") == 5.0
    assert value(registry, "ttj_chief_epoch") == 2
    assert value(registry, "ttj_checkpoint_step") == 400
    assert value(registry, "ttj_checkpoint_timestamp_seconds") == 1795420800.0
    assert value(registry, "ttj_job_phase", phase="Recovering") == 1
    assert value(registry, "ttj_job_phase", phase="Running") == 0

    metrics.status_written("ns", "j", second, second, {})
    assert value(registry, "ttj_slot_empty_seconds_count") == 2
    assert value(registry, "ttj_job_budget_usd") is None, "a budget taken out of the spec is no longer reported"
    metrics.forget("ns", "j")
    assert value(registry, "ttj_job_phase", phase="Recovering") is None
    assert value(registry, "ttj_steps_lost_total") is None


def test_the_latest_evaluation_follows_the_status_and_goes_with_the_job() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    before = {"progress": {"globalStep": 400}}
    metrics.status_written("ns", "j", {}, before)
    assert value(registry, "ttj_job_evaluation_step") is None, "no evaluation, no series"
    first = {"progress": {"globalStep": 500, "evaluationStep": 500, "evaluation": {"loss": 1.5, "auc": 0.75}}}
    metrics.status_written("ns", "j", before, first)
    second = {"progress": {"globalStep": 1000, "evaluationStep": 1000, "evaluation": {"loss": 0.5}}}
    metrics.status_written("ns", "j", first, second)
    metrics.status_written("ns", "other", {}, first)
    found = {
        (s.labels["job"], s.labels.get("metric"), s.name): s.value
        for family in registry.collect()
        if family.name in ("ttj_job_evaluation", "ttj_job_evaluation_step")
        for s in family.samples
    }
    assert found == {
        ("j", "loss", "ttj_job_evaluation"): 0.5,
        ("j", None, "ttj_job_evaluation_step"): 1000.0,
        ("other", "loss", "ttj_job_evaluation"): 1.5,
        ("other", "auc", "ttj_job_evaluation"): 0.75,
        ("other", None, "ttj_job_evaluation_step"): 500.0,
    }, "a metric the latest evaluation no longer has is dropped"
    metrics.forget("ns", "j")
    assert value(registry, "ttj_job_evaluation", metric="loss") is None
    assert value(registry, "ttj_job_evaluation_step") is None
    assert registry.get_sample_value("ttj_job_evaluation", {"namespace": "ns", "job": "other", "metric": "auc"}) == 0.75


def test_the_deadlines_slack_follows_the_status_until_the_job_finishes() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)

    def slack() -> float | None:
        return registry.get_sample_value("ttj_deadline_slack_seconds", {"namespace": "ns", "name": "j"})

    running = {"phase": "Running", "deadline": {"state": "AtRisk", "slackSeconds": -120}}
    metrics.status_written("ns", "j", {}, running)
    assert slack() == -120.0
    metrics.status_written("ns", "j", running, {"phase": "Running"})
    assert slack() is None, "a deadline taken out of the spec is no longer reported"
    metrics.status_written("ns", "j", {}, running)
    metrics.status_written("ns", "j", running, {**running, "phase": "Succeeded"})
    assert slack() is None, "a finished job has no slack to watch"
    metrics.status_written("ns", "j", {}, running)
    metrics.forget("ns", "j")
    assert slack() is None
