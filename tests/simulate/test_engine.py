"""The event engine: determinism with a seed, and how the three policies fare on the same fixed trace."""

from __future__ import annotations

import math

import pytest

from ttj.api.models import TransientTrainingJobSpec
from ttj.simulate.engine import Policy, PreemptionTrace, RunResult, RunView, SimAction, SimJob, simulate_run
from ttj.simulate.fit import FittedModel, fit
from ttj.simulate.icac19 import load_training_data
from ttj.simulate.planner_policy import PlannerPolicy
from ttj.simulate.policies import PaperStaticPolicy, TFJobLikePolicy
from ttj.simulate.study import Study


@pytest.fixture(scope="module")
def fitted() -> FittedModel:
    return fit(load_training_data())


def make_job(workers: int = 4, provisioning: str = "preemptible", backoff_limit: int = 3) -> SimJob:
    spec = TransientTrainingJobSpec.model_validate(
        {
            "trainSteps": 64000,
            "backoffLimit": backoff_limit,
            "checkpoint": {"uri": "gs://ttj-test/ckpt", "intervalSteps": 4000, "intervalSeconds": 600},
            "workers": {"replicas": workers, "acceleratorType": "nvidia-tesla-k80", "provisioning": provisioning},
        }
    )
    return SimJob("sim-test", spec)


def run_fixed(
    fitted: FittedModel, policy: Policy, lifetimes: dict[tuple[int, int], float], workers: int = 4
) -> RunResult:
    trace = PreemptionTrace(seed=0, run=0, lifetimes=None, noise_sigma=0.0, fixed=lifetimes)
    return simulate_run(make_job(workers), policy, trace, fitted.throughput, startup_s=fitted.startup_s)


def test_same_seed_same_results_other_seed_other_results(fitted: FittedModel) -> None:
    job = make_job()
    first = Study(fitted, runs=40, seed=7).run(job, "ttj")
    again = Study(fitted, runs=40, seed=7).run(job, "ttj")
    other = Study(fitted, runs=40, seed=8).run(job, "ttj")
    assert first == again
    assert [r.time_s for r in first] != [r.time_s for r in other]
    assert any(r.revocations for r in first)  # the seed does produce revocations to compare


def test_policies_replay_the_same_revocations(fitted: FittedModel) -> None:
    study = Study(fitted, runs=60, seed=3)
    job = make_job()
    ours, tfjob = study.run(job, "ttj"), study.run(job, "tfjob")
    # both replace every lost worker, so they see the very same VM lifetimes
    assert [r.revocations for r in ours] == [r.revocations for r in tfjob]


def test_on_demand_runs_are_never_revoked(fitted: FittedModel) -> None:
    results = Study(fitted, runs=20, seed=1).run(make_job(provisioning="on-demand"), "paper")
    assert all(r.succeeded and r.revocations == 0 for r in results)
    assert all(r.time_s == pytest.approx(r.baseline_time_s) for r in results)


def test_policy_ordering_when_the_chief_is_revoked(fitted: FittedModel) -> None:
    # the chief's VM (slot 0) goes 40 min into training; its replacement and every other VM live on
    chief_gone = {(0, 0): fitted.startup_s + 2400.0}
    ours = run_fixed(fitted, PlannerPolicy(), chief_gone)
    tfjob = run_fixed(fitted, TFJobLikePolicy(), chief_gone)
    paper = run_fixed(fitted, PaperStaticPolicy(), chief_gone)

    assert paper.outcome == "Failed"
    assert paper.reason == "MasterRevoked"
    assert paper.steps_lost > 0
    assert ours.succeeded
    assert tfjob.succeeded
    assert ours.chief_elections == 1
    assert ours.replacements == 1
    assert ours.steps_lost == 0  # checkpoint on SIGTERM, and the PS keeps the global step
    assert tfjob.steps_lost > 0  # back to the last periodic checkpoint
    assert ours.time_s < tfjob.time_s
    assert ours.cost_usd < tfjob.cost_usd


class ViewsSeen:
    """A policy as it is, keeping every view the simulator showed it."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.name = policy.name
        self.checkpoint_on_sigterm = policy.checkpoint_on_sigterm
        self.views: list[RunView] = []

    def decide(self, view: RunView) -> list[SimAction]:
        self.views.append(view)
        return self.policy.decide(view)

    def published_checkpoint_interval_s(self) -> float | None:
        return self.policy.published_checkpoint_interval_s()


def test_a_revoked_chief_writes_its_checkpoint_on_sigterm(fitted: FittedModel) -> None:
    # the chief's VM (slot 0) goes 25 min into training, 5 min after its last periodic checkpoint (every 10 min)
    chief_gone = {(0, 0): fitted.startup_s + 1500.0}
    ours = ViewsSeen(PlannerPolicy())
    result = run_fixed(fitted, ours, chief_gone)
    told = next(view for view in ours.views if 0 in view.lost_slots)
    assert (told.checkpoint_step, told.checkpoint_time) == (told.global_step, told.now)
    assert told.global_step > 0
    assert result.succeeded
    assert result.steps_lost == 0  # and the PS, which lives, keeps the global step


def test_a_single_gpu_chief_loses_nothing_with_its_sigterm_checkpoint(fitted: FittedModel) -> None:
    # one worker and no PS: the model state dies with the VM, 25 min into training
    single = make_job().single_gpu()
    trace = PreemptionTrace(seed=0, run=0, lifetimes=None, noise_sigma=0.0, fixed={(0, 0): fitted.startup_s + 1500.0})
    ours = simulate_run(single, PlannerPolicy(), trace, fitted.throughput, startup_s=fitted.startup_s)
    tfjob = simulate_run(single, TFJobLikePolicy(), trace, fitted.throughput, startup_s=fitted.startup_s)
    assert ours.succeeded
    assert tfjob.succeeded
    assert ours.revocations == tfjob.revocations == 1
    assert ours.steps_lost == 0  # the chief checkpointed on SIGTERM
    assert tfjob.steps_lost > 0  # back to the last periodic checkpoint


def test_preemptions_never_exhaust_our_backoff_limit(fitted: FittedModel) -> None:
    # slot 1 loses five VMs in a row, one every 10 minutes of its life
    churn = {(1, k): 600.0 + (fitted.startup_s if k == 0 else 0.0) for k in range(5)}
    ours = run_fixed(fitted, PlannerPolicy(), churn)
    tfjob = run_fixed(fitted, TFJobLikePolicy(), churn)
    paper = run_fixed(fitted, PaperStaticPolicy(), churn)
    assert ours.succeeded
    assert ours.revocations == 5
    assert ours.replacements == 5
    assert tfjob.outcome == "Failed"
    assert tfjob.reason == "BackoffLimitExceeded"
    assert paper.succeeded
    assert paper.revocations == 1
    assert ours.time_s < paper.time_s


def test_the_planner_sees_what_the_simulator_did(fitted: FittedModel) -> None:
    policy = PlannerPolicy()
    result = run_fixed(fitted, policy, {(0, 0): fitted.startup_s + 1200.0, (2, 0): fitted.startup_s + 3000.0})
    assert result.succeeded
    status = policy.job["status"]
    assert status["preemptions"] == result.revocations == 2
    assert status["replacements"] == 2
    assert status["chiefElections"] == 2  # the first election, and the one after the chief's loss
    assert status["chief"]["epoch"] == 2
    # the planner's last look was at the last cluster event, before the final stretch of training
    assert 0 < status["cost"]["usd"] < result.cost_usd
    assert not math.isnan(result.baseline_time_s)
