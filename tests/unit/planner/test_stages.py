"""The planner's stages one by one: each takes values and returns a value."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.unit.planner.builders import T0, job, node, pods, start, terminate
from ttj.api.models import ChiefStatus, CostStatus, JobRef, Phase, ProgressStatus, TransientTrainingJobSpec
from ttj.cost.budget import BudgetDecision
from ttj.planner import CreateChild, DeleteChild, LabelPod, Observed, PlannerConfig, RemoveFinalizer, UpdateLease
from ttj.planner.classify import PodState, PodVerdict
from ttj.planner.groups import groups_of
from ttj.planner.lease import lease_holder, lease_write, reported_progress
from ttj.planner.stages.assess import assess_workers
from ttj.planner.stages.chief import ChiefInputs, keep_chief
from ttj.planner.stages.costing import cost_and_budget
from ttj.planner.stages.ending import clean_up, ending
from ttj.planner.stages.parameter_servers import parameter_servers
from ttj.planner.stages.slots import SlotInputs, fill_worker_slots
from ttj.planner.world import World
from ttj_contract import FINALIZER, LeaseProgress, format_micro_time, format_time

S = timedelta(seconds=1)
GRACE = timedelta(seconds=30)
JOB = job()
REF = JobRef.of(JOB)
SPEC = TransientTrainingJobSpec.model_validate(JOB["spec"])  # 3 replicas in 4 slots, at least 2


def worker(slot: int, incarnation: int = 1, phase: str = "Running", **meta: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {
            "name": f"mnist-worker-{slot}-{incarnation}",
            "labels": {"transient.training/role": "worker", "transient.training/slot": str(slot)},
            "finalizers": [FINALIZER],
            **meta,
        },
        "spec": {"nodeName": f"gpu-{slot}"},
        "status": {"phase": phase, "startTime": format_time(T0)},
    }
    return pod


def preempted(slot: int, incarnation: int = 1) -> dict[str, Any]:
    pod = worker(slot, incarnation, phase="Failed")
    pod["status"]["reason"] = "NodeShutdown"
    return pod


def ps(name: str, index: int = 0, template: str = "") -> dict[str, Any]:
    labels = {"transient.training/role": "ps", "transient.training/ps-index": str(index)}
    if template:
        labels["pod-template-hash"] = template
    return {"metadata": {"name": name, "labels": labels}, "status": {"phase": "Running"}}


def verdicts(*pods: dict[str, Any]) -> dict[str, PodVerdict]:
    states = {"Running": PodState.RUNNING, "Pending": PodState.PENDING, "Succeeded": PodState.SUCCEEDED}
    return {p["metadata"]["name"]: PodVerdict(states[p["status"]["phase"]]) for p in pods}


def lease(holder: str | None, epoch: int, acquired: Any = T0, renewed: Any = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"leaseDurationSeconds": 30, "leaseTransitions": epoch}
    if holder:
        spec.update(holderIdentity=holder, acquireTime=format_micro_time(acquired))
    if renewed is not None:
        spec["renewTime"] = format_micro_time(renewed)
    annotations = {"transient.training/active-workers": "3", "transient.training/desired-workers": "3"}
    return {"metadata": {"name": "mnist-chief", "resourceVersion": "7", "annotations": annotations}, "spec": spec}


# -- assessing the workers -------------------------------------------------------------------------
def test_a_loss_is_counted_once_and_released_only_after_the_count_was_written() -> None:
    observed = Observed(pods=[worker(0), preempted(1)], nodes={"gpu-0": node("gpu-0")})
    first = assess_workers(observed, [], T0, GRACE)
    assert (first.preemptions, first.failures, first.replacements, first.accounted) == (1, 0, 1, ("mnist-worker-1-1",))
    assert [e.reason for e in first.events] == ["WorkerPreempted"]
    assert first.releases == ()
    again = assess_workers(observed, first.accounted, T0 + S, GRACE)
    assert (again.preemptions, again.events, again.accounted) == (0, (), first.accounted)
    assert again.releases == (
        DeleteChild("Pod", "mnist-worker-1-1", force=True, reason="LostWorker"),
        RemoveFinalizer("mnist-worker-1-1"),
    )


def test_a_failure_of_the_code_is_named_for_the_backoff_limit() -> None:
    failed = worker(2, phase="Failed")
    failed["status"]["containerStatuses"] = [{"state": {"terminated": {"exitCode": 1, "message": "bad"}}}]
    assessed = assess_workers(Observed(pods=[failed], nodes={"gpu-2": node("gpu-2")}), [], T0, GRACE)
    assert (assessed.failures, assessed.last_failure) == (1, "worker mnist-worker-2-1 failed: exit code 1: bad")


def test_a_node_not_ready_wakes_the_planner_when_its_grace_ends() -> None:
    since = T0 - 10 * S
    observed = Observed(pods=[worker(0)], nodes={"gpu-0": node("gpu-0", ready=False, ready_since=since)})
    assert assess_workers(observed, [], T0, GRACE).wake == (since + GRACE,)


# -- cost and budget -------------------------------------------------------------------------------
def test_a_cost_function_stops_the_job_at_its_budget_without_limiting_new_workers() -> None:
    spec = TransientTrainingJobSpec.model_validate({**JOB["spec"], "budget": {"maxCostUSD": 10.0}})

    def spent(usd: float) -> PlannerConfig:
        return PlannerConfig(cost=lambda *_: CostStatus(usd=usd))

    under = cost_and_budget(spec, Observed(), {}, None, now=T0, groups=groups_of(spec), config=spent(4.0))
    assert under.cost == CostStatus(usd=4.0)
    assert under.budget is not None
    assert (under.budget.allow_new_workers, under.budget.exceeded, under.budget.cap(5)) == (None, False, 5)
    over = cost_and_budget(spec, Observed(), {}, None, now=T0, groups=groups_of(spec), config=spent(10.0))
    assert over.budget is not None
    assert over.budget.exceeded
    assert over.budget.message == "cost $10.00 reached budget.maxCostUSD $10.00"
    assert (
        cost_and_budget(SPEC, Observed(), {}, None, now=T0, groups=groups_of(SPEC), config=spent(10.0)).budget is None
    )


def test_without_prices_the_cost_stays_as_it_was() -> None:
    previous = CostStatus(usd=1.5)
    costing = cost_and_budget(SPEC, Observed(), {}, previous, now=T0, groups=groups_of(SPEC), config=PlannerConfig())
    assert (costing.cost, costing.budget) == (previous, None)


# -- the end ---------------------------------------------------------------------------------------
def test_the_first_ending_that_applies_wins() -> None:
    chief = worker(0, phase="Succeeded")
    final = ProgressStatus(global_step=SPEC.train_steps, checkpoint_step=SPEC.train_steps, epoch=2)
    found = ending(
        SPEC.model_copy(update={"active_deadline_seconds": 60}),
        holder="mnist-worker-0-1",
        epoch=2,
        renewed=True,
        verdicts=verdicts(chief),
        failures=SPEC.backoff_limit + 1,
        last_failure="",
        progress=final,
        started_at=T0 - 3600 * S,
        now=T0,
        budget=None,
    )
    assert found is not None
    assert (found.phase, found.reason.value) == (Phase.SUCCEEDED, "TrainingComplete")


def test_the_budget_ends_the_job_only_once_no_worker_is_alive() -> None:
    stop = BudgetDecision(0, True, "cost reached", 10, 10, 10)
    common: dict[str, Any] = {
        "holder": None,
        "epoch": 0,
        "renewed": False,
        "failures": 0,
        "last_failure": "",
        "progress": None,
        "started_at": T0,
        "now": T0,
        "budget": stop,
    }
    assert ending(SPEC, verdicts=verdicts(worker(0)), **common) is None
    found = ending(SPEC, verdicts={}, **common)
    assert found is not None
    assert (found.phase, found.reason.value, found.message) == (Phase.FAILED, "BudgetExceeded", "cost reached")


def test_a_finished_job_is_deleted_after_its_ttl() -> None:
    spec = SPEC.model_copy(update={"ttl_seconds_after_finished": 60})
    observed = Observed(pods=[worker(0)], children={("Deployment", "mnist-ps-0"): {}})
    waiting = clean_up(spec, observed, T0, T0 + 10 * S)
    assert (waiting.delete_job, waiting.wake) == (False, T0 + 60 * S)
    assert waiting.writes == (
        RemoveFinalizer("mnist-worker-0-1"),
        DeleteChild("Pod", "mnist-worker-0-1", mark_deliberate=True, reason="CleanPodPolicy"),
        DeleteChild("Deployment", "mnist-ps-0", reason="CleanPodPolicy"),
    )
    assert clean_up(spec, observed, T0, T0 + 60 * S).delete_job


# -- parameter servers -----------------------------------------------------------------------------
def test_the_first_parameter_server_seen_is_recorded_without_a_replacement() -> None:
    found = parameter_servers("mnist", 2, [ps("mnist-ps-0-aaa-1")], [])
    assert (found.pods, found.all_running, found.replaced, found.ready) == (
        ("mnist-ps-0-aaa-1", ""),
        False,
        False,
        False,
    )


def test_a_new_parameter_server_pod_is_a_preemption_unless_the_template_changed() -> None:
    lost = parameter_servers("mnist", 1, [ps("mnist-ps-0-aaa-2", template="aaa")], ["mnist-ps-0-aaa-1"])
    assert (lost.pods, lost.replaced, lost.ready, lost.preemptions) == (("mnist-ps-0-aaa-2",), True, False, 1)
    assert [(e.type, e.reason) for e in lost.events] == [("Warning", "ParameterServerReplaced")]
    rolled = parameter_servers("mnist", 1, [ps("mnist-ps-0-bbb-1", template="bbb")], ["mnist-ps-0-aaa-1"])
    assert (rolled.replaced, rolled.preemptions) == (True, 0)
    assert [(e.type, e.reason) for e in rolled.events] == [("Normal", "ParameterServerReplaced")]


# -- worker slots ----------------------------------------------------------------------------------
def test_two_pods_in_one_slot_keep_the_chief_and_empty_slots_are_filled_lowest_first() -> None:
    pods = [worker(0, 1), worker(0, 2), worker(3, 1)]
    slots = fill_worker_slots(
        SlotInputs(
            REF,
            SPEC,
            tuple(pods),
            verdicts(*pods),
            holder="mnist-worker-0-1",
            budget=None,
            placement=None,
            groups=groups_of(SPEC),
        )
    )
    assert [(type(w).__name__, getattr(w, "name", "")) for w in slots.writes] == [
        ("DeleteChild", "mnist-worker-0-2"),
        ("CreateChild", "mnist-worker-1-1"),
    ]
    assert (slots.active, slots.pending, slots.unschedulable) == (2, 1, "")


def test_scale_down_spares_the_chief_and_running_pods() -> None:
    pods = [worker(0), worker(1), worker(2, phase="Pending"), worker(3)]
    slots = fill_worker_slots(
        SlotInputs(
            REF,
            SPEC,
            tuple(pods),
            verdicts(*pods),
            holder="mnist-worker-3-1",
            budget=None,
            placement=None,
            groups=groups_of(SPEC),
        )
    )
    assert slots.writes == (DeleteChild("Pod", "mnist-worker-2-1", mark_deliberate=True, reason="ScaledDown"),)


@pytest.mark.parametrize(("allow", "created"), [(None, 2), (1, 1), (0, 0)])
def test_the_budget_caps_new_workers(allow: int | None, created: int) -> None:
    budget = BudgetDecision(allow, False, "", 0, None, 0)
    pods = [worker(0)]
    slots = fill_worker_slots(
        SlotInputs(
            REF, SPEC, tuple(pods), verdicts(*pods), holder=None, budget=budget, placement=None, groups=groups_of(SPEC)
        )
    )
    assert len([w for w in slots.writes if isinstance(w, CreateChild)]) == created


def test_an_exceeded_budget_stops_every_worker() -> None:
    budget = BudgetDecision(0, True, "over", 10, 10, 10)
    pods = [worker(0), worker(1, phase="Pending")]
    slots = fill_worker_slots(
        SlotInputs(
            REF, SPEC, tuple(pods), verdicts(*pods), holder=None, budget=budget, placement=None, groups=groups_of(SPEC)
        )
    )
    assert [w.name for w in slots.writes if isinstance(w, DeleteChild) and w.reason == "BudgetExceeded"] == [
        "mnist-worker-0-1",
        "mnist-worker-1-1",
    ]
    assert (slots.active, slots.pending) == (0, 0)


# -- the chief and the Lease -----------------------------------------------------------------------
def chief_of(pods: list[dict[str, Any]], **given: Any) -> Any:
    args: dict[str, Any] = {
        "lease": None,
        "holder": None,
        "recorded": None,
        "ps_replaced": False,
        "active": len(pods),
        "desired": 3,
        "now": T0,
        "config": PlannerConfig(),
        **given,
    }
    nodes = {f"gpu-{i}": node(f"gpu-{i}", "on-demand" if i == 1 else "spot") for i in range(4)}
    return keep_chief(ChiefInputs(REF, tuple(pods), verdicts(*pods), nodes, **args))


def test_the_first_chief_is_the_least_likely_to_be_preempted() -> None:
    found = chief_of([worker(0), worker(1)], lease=lease(None, 0))
    assert found.chief == ChiefStatus(
        pod="mnist-worker-1-1",
        epoch=1,
        elected_at=format_time(T0),
        renew_time=format_micro_time(T0),
        renew_observed_at=format_time(T0),
    )
    assert (found.elections, found.healthy) == (1, True)
    update, label = found.writes
    assert isinstance(update, UpdateLease)
    assert (update.holder, update.epoch, update.resource_version) == ("mnist-worker-1-1", 1, "7")
    assert label == LabelPod("mnist-worker-1-1", {"transient.training/chief": "true"})


def test_a_chief_that_stopped_renewing_is_replaced_and_its_loss_remembered() -> None:
    holder = "mnist-worker-1-1"
    stale = lease(holder, 1, acquired=T0 - 600 * S, renewed=T0 - 60 * S)
    # The operator saw that renewal 60 s ago (its clock; the stamp's own value does not matter).
    recorded = ChiefStatus(
        pod=holder,
        epoch=1,
        elected_at=format_time(T0 - 600 * S),
        renew_time=format_micro_time(T0 - 60 * S),
        renew_observed_at=format_time(T0 - 60 * S),
    )
    found = chief_of([worker(0), worker(1)], lease=stale, holder=holder, recorded=recorded)
    assert found.chief == ChiefStatus(
        pod="mnist-worker-0-1",
        epoch=2,
        elected_at=format_time(T0),
        lost_at=format_time(T0 - 30 * S),
        renew_time=format_micro_time(T0),
        renew_observed_at=format_time(T0),
    )
    assert "stopped renewing the lease" in found.events[0].message


def test_a_renewing_chief_is_kept_and_the_planner_wakes_when_its_lease_would_expire() -> None:
    holder = "mnist-worker-1-1"
    fresh = lease(holder, 1, acquired=T0 - 600 * S, renewed=T0 - 10 * S)
    recorded = ChiefStatus(pod=holder, epoch=1, elected_at=format_time(T0 - 600 * S), lost_at=format_time(T0 - 700 * S))
    found = chief_of([worker(0), worker(1)], lease=fresh, holder=holder, recorded=recorded)
    # First seen renewed now (the operator's clock), so the lease runs a full duration from now.
    assert found.chief == ChiefStatus(
        pod=holder,
        epoch=1,
        elected_at=recorded.elected_at,
        renew_time=format_micro_time(T0 - 10 * S),
        renew_observed_at=format_time(T0),
    )
    assert [(o.metric, o.seconds) for o in found.observations] == [("chief_handover_seconds", 700.0)]
    assert (found.elections, found.healthy, found.wake) == (0, True, T0 + 30 * S)


def test_a_holder_change_the_operator_did_not_make_is_refused_and_its_choice_restored() -> None:
    """A pod patched the Lease to make itself chief: not adopted; the operator's chief is restored at a new
    epoch (fencing the usurper's) and a Warning says so."""
    usurped = lease("mnist-worker-0-1", 3, acquired=T0 - 5 * S, renewed=T0 - 1 * S)
    recorded = ChiefStatus(pod="mnist-worker-1-1", epoch=2, elected_at=format_time(T0 - 60 * S))
    found = chief_of([worker(0), worker(1)], lease=usurped, holder="mnist-worker-1-1", recorded=recorded)
    assert found.elections == 0
    assert found.chief.pod == "mnist-worker-1-1"
    assert found.chief.epoch == 4
    update = next(w for w in found.writes if isinstance(w, UpdateLease))
    assert (update.holder, update.epoch, update.resource_version) == ("mnist-worker-1-1", 4, "7")
    [warning] = [e for e in found.events if e.reason == "ChiefChangeRefused"]
    assert warning.type == "Warning"
    assert "mnist-worker-0-1" in warning.message
    assert "mnist-worker-1-1" in warning.message
    assert LabelPod("mnist-worker-1-1", {"transient.training/chief": "true"}) in found.writes


def test_a_pod_that_made_itself_chief_before_any_election_is_not_adopted() -> None:
    usurped = lease("mnist-worker-0-1", 1, acquired=T0 - 5 * S, renewed=T0 - 1 * S)
    found = chief_of([worker(0), worker(1)], lease=usurped, holder=None, recorded=None)
    assert found.chief.pod == "mnist-worker-1-1"  # the operator's own choice (on-demand node)
    assert found.chief.epoch == 2
    assert any(e.reason == "ChiefChangeRefused" for e in found.events)
    update = next(w for w in found.writes if isinstance(w, UpdateLease))
    assert (update.holder, update.epoch) == ("mnist-worker-1-1", 2)


def test_a_usurper_that_succeeds_does_not_end_the_job() -> None:
    world = World(job())
    start(world, [node(f"gpu-{i}") for i in range(3)])
    chief = world.job["status"]["chief"]["pod"]
    other = next(p["metadata"]["name"] for p in pods(world) if p["metadata"]["name"] != chief)
    lease_now = world.observed.lease
    assert lease_now is not None
    lease_now["spec"].update(holderIdentity=other, leaseTransitions=lease_now["spec"]["leaseTransitions"] + 1)
    terminate(world, other, 0)
    result = world.reconcile(T0 + S)
    assert world.job["status"]["phase"] != "Succeeded"
    assert world.job["status"]["chief"]["pod"] == chief
    assert any(e.reason == "ChiefChangeRefused" for e in result.events)
    assert world.observed.lease is not None
    assert world.observed.lease["spec"]["holderIdentity"] == chief


def test_a_missing_lease_is_recreated_as_the_status_says() -> None:
    recorded = ChiefStatus(pod="mnist-worker-0-1", epoch=4)
    assert lease_holder(None, recorded) == "mnist-worker-0-1"
    write = lease_write(
        REF,
        None,
        PlannerConfig(),
        T0,
        holder_before="mnist-worker-0-1",
        holder="mnist-worker-0-1",
        epoch=4,
        elected=False,
        active=1,
        desired=3,
    )
    assert isinstance(write, CreateChild)
    assert write.manifest["spec"]["holderIdentity"] == "mnist-worker-0-1"
    assert write.manifest["spec"]["leaseTransitions"] == 4


def test_a_lease_as_it_should_be_is_left_alone_and_new_counts_are_published() -> None:
    current = lease("mnist-worker-0-1", 1)
    same: dict[str, Any] = {"holder_before": "mnist-worker-0-1", "holder": "mnist-worker-0-1", "epoch": 1}
    assert lease_write(REF, current, PlannerConfig(), T0, elected=False, active=3, desired=3, **same) is None
    update = lease_write(REF, current, PlannerConfig(), T0, elected=False, active=2, desired=3, **same)
    assert update == UpdateLease(name="mnist-chief", annotations={"transient.training/active-workers": "2"})


def test_progress_comes_from_the_lease_and_a_malformed_report_keeps_the_last() -> None:
    current = lease("mnist-worker-0-1", 1)
    current["metadata"]["annotations"]["transient.training/progress"] = LeaseProgress(
        global_step=120, checkpoint_step=100, loss=0.75
    ).to_annotation()
    found = reported_progress(current, None)
    assert found is not None
    assert (found.global_step, found.checkpoint_step, found.loss) == (120, 100, 0.75)
    current["metadata"]["annotations"]["transient.training/progress"] = "{not json"
    assert reported_progress(current, found) is found
