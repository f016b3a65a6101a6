"""The simulated cluster is what the operator would observe: the shared interpreter's rules, ttj's vocabulary."""

from __future__ import annotations

import pytest

from ttj.api.models import TransientTrainingJobSpec
from ttj.planner.observed import annotations_of, labels_of, meta, name_of
from ttj.simulate.engine import PreemptionTrace, SimJob, simulate_run
from ttj.simulate.fit import FittedModel, fit
from ttj.simulate.icac19 import load_training_data
from ttj.simulate.planner_policy import PlannerPolicy
from ttj_contract import ANNOTATION_PROGRESS, LABEL_CHIEF, LABEL_ROLE, LABEL_SLOT, LeaseProgress, Role, provisioning_of


@pytest.fixture(scope="module")
def fitted() -> FittedModel:
    return fit(load_training_data())


@pytest.mark.parametrize("provisioning", ["spot", "preemptible"])
def test_the_simulated_cluster_after_a_chief_handover(fitted: FittedModel, provisioning: str) -> None:
    spec = TransientTrainingJobSpec.model_validate(
        {
            "trainSteps": 64000,
            "checkpoint": {"uri": "gs://ttj-test/ckpt", "intervalSteps": 4000},
            "workers": {"replicas": 3, "acceleratorType": "nvidia-tesla-k80", "provisioning": provisioning},
        }
    )
    policy = PlannerPolicy()
    trace = PreemptionTrace(0, 0, None, 0.0, fixed={(0, 0): fitted.startup_s + 1200.0})
    result = simulate_run(SimJob("sim", spec), policy, trace, fitted.throughput, startup_s=fitted.startup_s)
    assert result.succeeded
    assert result.chief_elections == 1
    world = policy.world
    assert world is not None

    workers = [p for p in world.observed.pods if labels_of(p).get(LABEL_ROLE) == Role.WORKER]
    assert sorted(name_of(p) for p in workers) == ["sim-worker-0-2", "sim-worker-1-1", "sim-worker-2-1"]
    assert not any(meta(p).get("deletionTimestamp") for p in workers)  # the lost one was released and is gone
    assert {labels_of(p)[LABEL_SLOT] for p in workers} == {"0", "1", "2"}
    for pod in workers:
        node = world.observed.nodes[pod["spec"]["nodeName"]]
        assert provisioning_of(labels_of(node)) == provisioning

    lease = world.observed.lease
    assert lease is not None
    holder = lease["spec"]["holderIdentity"]
    assert [name_of(p) for p in workers if labels_of(p).get(LABEL_CHIEF)] == [holder]
    assert lease["spec"]["leaseTransitions"] == world.job["status"]["chief"]["epoch"] == 2
    progress = LeaseProgress.from_annotation(annotations_of(lease)[ANNOTATION_PROGRESS])
    assert progress is not None
    assert progress.global_step == world.job["status"]["progress"]["globalStep"] > 0
