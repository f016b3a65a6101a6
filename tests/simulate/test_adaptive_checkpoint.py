"""An adaptive job in the simulator: the operator's planner publishes the interval on the Lease from the chief
node's hazard and the write time the chief reports, and the simulated chief checkpoints at that interval."""

from __future__ import annotations

import pytest

from ttj.api.models import TransientTrainingJobSpec
from ttj.simulate.engine import PreemptionTrace, RunResult, SimJob, simulate_run
from ttj.simulate.fit import FittedModel, fit
from ttj.simulate.icac19 import load_training_data
from ttj.simulate.planner_policy import PlannerPolicy


@pytest.fixture(scope="module")
def fitted() -> FittedModel:
    return fit(load_training_data())


def run(fitted: FittedModel, *, adaptive: bool, write_s: float) -> tuple[RunResult, PlannerPolicy]:
    spec = TransientTrainingJobSpec.model_validate(
        {
            "trainSteps": 20_000,
            "checkpoint": {
                "uri": "gs://ttj-test/ckpt",
                "intervalSteps": 0,
                "intervalSeconds": 300,
                "adaptive": adaptive,
                "minIntervalSeconds": 30,
                "maxIntervalSeconds": 3600,
            },
            "workers": {"replicas": 2, "acceleratorType": "nvidia-tesla-k80", "provisioning": "on-demand"},
        }
    )
    policy = PlannerPolicy()
    trace = PreemptionTrace(1, 0, None, 0.0)
    result = simulate_run(
        SimJob("adaptive", spec),
        policy,
        trace,
        fitted.throughput,
        startup_s=fitted.startup_s,
        checkpoint_write_s=write_s,
    )
    return result, policy


def test_fixed_interval_without_adaptive(fitted: FittedModel) -> None:
    result, policy = run(fitted, adaptive=False, write_s=2.0)
    assert result.succeeded
    assert policy.published_checkpoint_interval_s() is None
    assert result.checkpoints == pytest.approx(result.time_s / 300, abs=1)


def test_on_demand_chief_gets_the_longest_interval_allowed(fitted: FittedModel) -> None:
    result, policy = run(fitted, adaptive=True, write_s=2.0)
    assert result.succeeded
    # never preempted: the spec's upper bound, published once the chief reported a write time
    assert policy.published_checkpoint_interval_s() == 3600
    status = policy.job["status"]["checkpointInterval"]
    assert status["seconds"] == 3600
    assert status["hazardPerHour"] == 0
    fixed, _ = run(fitted, adaptive=False, write_s=2.0)
    assert result.checkpoints < fixed.checkpoints
    assert result.checkpoint_overhead_steps < fixed.checkpoint_overhead_steps
