"""The phase and condition rule table, and the events its changes raise."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from ttj.api.models import ChiefStatus, Condition, ConditionType, Phase, Reason
from ttj.cost.budget import BudgetDecision
from ttj.planner.conditions import (
    CONDITION_RULES,
    Ended,
    Ending,
    Finished,
    InProgress,
    InvalidSpec,
    Wanted,
    derive,
    phase_of,
    set_conditions,
    wanted_conditions,
)

NOW = "2026-11-21T12:00:00Z"
LATER = "2026-11-21T12:05:00Z"

TRAINING = InProgress(
    started=True,
    lost=True,
    chief=ChiefStatus(pod="job-worker-0-1", epoch=2),
    chief_healthy=True,
    parameter_servers_ready=True,
    active=3,
    desired=3,
    min_replicas=2,
    unschedulable="",
    budget=None,
    budget_limited=False,
)


def conditions(situation: Any) -> dict[str, tuple[str, str, str]]:
    return {w.type.value: (w.status, w.reason.value, w.message) for w in wanted_conditions(situation)}


def test_the_table_lists_every_condition_type_once_in_status_order() -> None:
    assert set(CONDITION_RULES) == set(ConditionType)
    assert list(CONDITION_RULES)[:3] == [ConditionType.INVALID, ConditionType.CREATED, ConditionType.RUNNING]


@pytest.mark.parametrize(
    ("changes", "phase"),
    [
        ({}, Phase.RUNNING),
        ({"started": False, "chief": None, "chief_healthy": False, "active": 0}, Phase.PENDING),
        ({"active": 2}, Phase.RECOVERING),
        ({"chief_healthy": False}, Phase.RECOVERING),
        ({"parameter_servers_ready": False}, Phase.RECOVERING),
    ],
)
def test_phase_of_a_job_in_progress(changes: dict[str, Any], phase: Phase) -> None:
    assert phase_of(replace(TRAINING, **changes)) == phase


def test_a_whole_job_is_training_and_not_recovering() -> None:
    assert conditions(TRAINING) == {
        "Created": ("True", "ChildrenCreated", ""),
        "Running": ("True", "Training", "3/3 workers"),
        "Recovering": ("False", "AtDesiredWorkers", ""),
        "ChiefElected": ("True", "Elected", "chief job-worker-0-1 at epoch 2"),
        "Stalled": ("False", "Progressing", ""),
    }


def test_a_stalled_job_says_so_with_a_warning_carrying_the_chiefs_error() -> None:
    why = "global step 0 has not advanced for 900s; the chief's last error: checkpoint storage: permission denied"
    stalled = replace(TRAINING, stalled=why)
    assert conditions(stalled)["Stalled"] == ("True", "ProgressStalled", why)
    derived = derive(stalled, derive(TRAINING, None, NOW, 1).conditions, NOW, 1)
    assert [(e.type, e.reason, e.message) for e in derived.events] == [("Warning", "ProgressStalled", why)]


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"parameter_servers_ready": False, "chief_healthy": False, "unschedulable": "x"}, "ParameterServerLost"),
        ({"chief_healthy": False, "unschedulable": "x"}, "ChiefLost"),
        ({"active": 2, "unschedulable": "1 worker(s) unschedulable: no GPU"}, "WorkersUnschedulable"),
        ({"active": 2}, "WorkersLost"),
    ],
)
def test_the_first_missing_piece_names_the_recovery(changes: dict[str, Any], reason: str) -> None:
    assert conditions(replace(TRAINING, **changes))["Recovering"][:2] == ("True", reason)


def test_below_min_replicas_stops_training() -> None:
    found = conditions(replace(TRAINING, active=1))
    assert found["Running"] == ("False", "BelowMinReplicas", "1 active, at least 2 needed")


def test_a_job_that_never_started_waits_for_workers_without_a_recovering_condition() -> None:
    waiting = replace(TRAINING, started=False, chief=None, chief_healthy=False, active=0)
    assert conditions(waiting) == {
        "Created": ("True", "ChildrenCreated", ""),
        "Running": ("False", "WaitingForWorkers", ""),
        "ChiefElected": ("False", "NoRunningWorkers", ""),
    }
    stuck = replace(waiting, unschedulable="no pool has T4 GPUs")
    assert conditions(stuck)["Running"] == ("False", "WorkersUnschedulable", "no pool has T4 GPUs")


@pytest.mark.parametrize(
    ("budget", "expected"),
    [
        (None, ("False", "WithinBudget", "")),
        (BudgetDecision(0, True, "cost reached", 10, 10, 10), ("True", "BudgetExceeded", "cost reached")),
        (BudgetDecision(1, False, "adding 1", 5, 10, 9), ("False", "ScaleOutLimited", "adding 1")),
        (BudgetDecision(None, False, "", 5, 10, 5), ("False", "WithinBudget", "")),
    ],
)
def test_budget_condition(budget: BudgetDecision | None, expected: tuple[str, str, str]) -> None:
    assert conditions(replace(TRAINING, budget=budget, budget_limited=True))["BudgetExceeded"] == expected


def test_no_budget_condition_without_a_budget() -> None:
    assert "BudgetExceeded" not in conditions(TRAINING)


def test_an_ending_sets_its_terminal_condition_and_the_budget_verdict() -> None:
    done = Ending(Phase.SUCCEEDED, Reason.TRAINING_COMPLETE, "chief finished at global step 1000")
    assert phase_of(Ended(done, budget_limited=False)) == Phase.SUCCEEDED
    assert conditions(Ended(done, budget_limited=True)) == {
        "Created": ("True", "ChildrenCreated", ""),
        "BudgetExceeded": ("False", "WithinBudget", ""),
        "Succeeded": ("True", "TrainingComplete", "chief finished at global step 1000"),
    }
    broke = Ending(Phase.FAILED, Reason.BUDGET_EXCEEDED, "cost $10.00 reached budget.maxCostUSD $10.00")
    found = conditions(Ended(broke, budget_limited=True))
    assert found["BudgetExceeded"] == found["Failed"] == ("True", "BudgetExceeded", broke.message)


@pytest.mark.parametrize(("previous", "phase"), [(None, Phase.FAILED), (Phase.SUCCEEDED, Phase.SUCCEEDED)])
def test_an_invalid_spec_fails_the_job_unless_it_had_finished(previous: Phase | None, phase: Phase) -> None:
    invalid = InvalidSpec("spec.trainSteps: must be at least 1", previous)
    assert phase_of(invalid) == phase
    assert conditions(invalid) == {
        "Invalid": ("True", "InvalidSpec", invalid.message),
        "Failed": ("True", "InvalidSpec", invalid.message),
    }


def test_a_finished_job_keeps_its_conditions_and_says_nothing() -> None:
    previous = [Condition(type="Succeeded", status="True", reason="TrainingComplete", observed_generation=1)]
    derived = derive(Finished(Phase.SUCCEEDED), previous, NOW, generation=2)
    assert (derived.phase, derived.conditions, derived.events) == (Phase.SUCCEEDED, previous, ())


def test_events_warn_for_trouble_and_note_progress() -> None:
    first = derive(TRAINING, None, NOW, 1)
    assert [(e.type, e.reason) for e in first.events] == [("Normal", "ChildrenCreated"), ("Normal", "Training")]
    lost = derive(replace(TRAINING, chief_healthy=False), first.conditions, LATER, 1)
    assert [(e.type, e.reason, e.message) for e in lost.events] == [
        ("Warning", "ChiefLost", "waiting for a running worker to become chief")
    ]


STARTING = replace(TRAINING, lost=False, active=2, desired=4, parameter_servers_ready=False)


def test_a_job_short_of_workers_before_any_loss_is_starting_not_recovering() -> None:
    found = conditions(STARTING)
    assert found["Recovering"] == (
        "False",
        "Starting",
        "2/4 workers active; waiting for the parameter servers to start",
    )
    assert phase_of(STARTING) == Phase.PENDING
    assert phase_of(replace(STARTING, parameter_servers_ready=True)) == Phase.RUNNING
    assert phase_of(replace(STARTING, lost=True)) == Phase.RECOVERING


def test_start_up_events_say_starting_and_never_lost() -> None:
    events = derive(STARTING, None, NOW, 1).events
    assert [(e.type, e.reason, e.message) for e in events] == [
        ("Normal", "ChildrenCreated", "Created"),
        ("Normal", "Starting", "2/4 workers active; waiting for the parameter servers to start"),
    ]
    assert not [e for e in events if "Lost" in e.reason or "lost" in e.message]


def test_an_election_is_announced_once_by_the_chief_stage_not_by_the_condition() -> None:
    before = derive(replace(TRAINING, chief=None, chief_healthy=False), None, NOW, 1).conditions
    events = derive(TRAINING, before, LATER, 1).events
    assert [e.reason for e in events if "Elect" in e.reason] == []


def test_unschedulable_workers_warn_even_while_the_condition_is_false() -> None:
    waiting = replace(TRAINING, started=False, chief=None, chief_healthy=False, active=0, unschedulable="no GPUs")
    events = derive(waiting, None, NOW, 1).events
    assert ("Warning", "WorkersUnschedulable", "no GPUs") in [(e.type, e.reason, e.message) for e in events]
    assert not [e for e in events if e.reason in ("WaitingForWorkers", "NoRunningWorkers")]


def test_a_condition_without_a_message_is_announced_by_its_type() -> None:
    events = derive(replace(TRAINING, budget=BudgetDecision(0, True, "", 1, 1, 1), budget_limited=True), None, NOW, 1)
    assert ("Warning", "BudgetExceeded", "BudgetExceeded") in [(e.type, e.reason, e.message) for e in events.events]


def test_transition_time_moves_only_when_the_status_flips() -> None:
    running = Wanted(ConditionType.RUNNING, "True", Reason.TRAINING, "3/3 workers")
    before, _ = set_conditions(None, [running], NOW, 1)
    after, changed = set_conditions(before, [replace(running, message="2/3 workers")], LATER, 2)
    assert changed == []
    assert (after[0].last_transition_time, after[0].message, after[0].observed_generation) == (NOW, "2/3 workers", 2)
    stopped = Wanted(ConditionType.RUNNING, "False", Reason.BELOW_MIN_REPLICAS)
    after, changed = set_conditions(before, [stopped], LATER, 2)
    assert (changed, after[0].last_transition_time) == ([stopped], LATER)


def test_a_new_reason_without_a_flip_is_a_change_and_unwanted_conditions_go() -> None:
    old = [
        Condition(type="Recovering", status="True", reason="WorkersLost", last_transition_time=NOW),
        Condition(type="Invalid", status="True", reason="InvalidSpec", last_transition_time=NOW),
    ]
    chief_lost = Wanted(ConditionType.RECOVERING, "True", Reason.CHIEF_LOST)
    after, changed = set_conditions(old, [chief_lost], LATER, 1)
    assert changed == [chief_lost]
    assert [(c.type, c.reason, c.last_transition_time) for c in after] == [("Recovering", "ChiefLost", NOW)]


def test_a_condition_this_operator_does_not_know_is_dropped_and_the_rest_of_the_status_stands() -> None:
    """Another version's condition type (or reason) must not reset the counters, the chief or the records."""
    from tests.unit.planner.builders import T0, job
    from ttj.planner import Observed, plan

    manifest = job()
    manifest["status"] = {
        "phase": "Running",
        "preemptions": 7,
        "chief": {"pod": "mnist-worker-0-1", "epoch": 3},
        "conditions": [
            {"type": "FromTheFuture", "status": "True", "reason": "Whatever"},
            {"type": "Created", "status": "True", "reason": "NotYetInvented"},
            {"type": "Running", "status": "False", "reason": "WaitingForWorkers"},
        ],
    }
    status = plan(manifest, Observed(), T0).status
    assert (status.get("preemptions"), (status.get("chief") or {}).get("epoch")) == (7, 3)
    assert "FromTheFuture" not in {c.get("type") for c in status.get("conditions") or []}
