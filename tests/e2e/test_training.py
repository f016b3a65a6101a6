"""End to end with real TensorFlow trainers: a job trains through preemptions of a worker and the chief.

Runs on the embedded local cluster (pods are real processes), or on the cluster in ``KUBECONFIG``
with the operator installed there. Assertions are on the job's status, its Events, the Lease,
the pods and the checkpoints — never on log text.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.e2e.training_support import Run, checkpoint_uri, epoch, job_manifest, start_stack, step

from ttj_demo.stack import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.tensorflow, pytest.mark.timeout(900)]

TRAIN_STEPS = 4000


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from start_stack(tmp_path_factory, gpu_nodes=4)


def test_training_survives_losing_a_worker_and_the_chief(stack: Stack, tmp_path: Path) -> None:
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    checkpoints = checkpoint_uri(stack, tmp_path, name)
    run = Run(stack, job_manifest(name, checkpoints, trainSteps=TRAIN_STEPS))

    first = run.wait("training to start under the first chief", lambda s: step(s) >= 50 and epoch(s) >= 1)
    first_chief = first["chief"]["pod"]

    # A worker that is not the chief is preempted: it is replaced, and nothing else changes.
    victim = next(p["metadata"]["name"] for p in run.running_workers() if p["metadata"]["name"] != first_chief)
    stack.preempt_pod_node("default", victim)
    run.wait("the worker's preemption to be counted", lambda s: s.get("preemptions", 0) >= 1)
    assert run.status()["chief"]["pod"] == first_chief
    assert run.status().get("failures", 0) == 0, f"a preemption must never count as a failure: {run.warnings()}"

    # The chief is preempted: a survivor is elected at a later epoch and training goes on.
    before = step(run.status())
    stack.preempt_pod_node("default", first_chief)
    elected = run.wait("a new chief", lambda s: epoch(s) >= 2 and s["chief"]["pod"] != first_chief)
    stack.restore_gpu_pool()
    run.wait("training to go on under the new chief", lambda s: step(s) > before)

    final = run.wait("the job to succeed", lambda s: s.get("phase") == "Succeeded")

    assert step(final) >= TRAIN_STEPS
    assert final.get("preemptions", 0) >= 2
    assert final.get("replacements", 0) >= 1
    assert final.get("chiefElections", 0) >= 2
    assert final.get("failures", 0) == 0
    assert epoch(final) >= epoch(elected) >= 2
    conditions = {c["type"]: c["status"] for c in final.get("conditions") or []}
    assert conditions.get("Succeeded") == "True"

    lease = run.lease()
    assert lease["spec"]["holderIdentity"] == final["chief"]["pod"]
    assert lease["spec"]["leaseTransitions"] == epoch(final)

    # The global step never went back beyond the last checkpoint the chief had reported.
    checkpoint_seen = 0
    for status in run.history:
        assert step(status) >= checkpoint_seen or step(status) == 0
        checkpoint_seen = max(checkpoint_seen, int((status.get("progress") or {}).get("checkpointStep") or 0))

    # The final checkpoint is on disk, at the last step, written by the last chief's epoch.
    from ttj_trainer import checkpoints as trainer_checkpoints

    latest = trainer_checkpoints.latest(checkpoints)
    assert latest is not None
    assert latest.step >= TRAIN_STEPS
    assert latest.epoch == epoch(final)

    reasons = run.event_reasons()
    assert {"WorkerPreempted", "ChiefElected"} <= reasons

    chiefs = [p for p in run.pods() if p["metadata"]["labels"].get("transient.training/chief")]
    assert len(chiefs) <= 1, "never two chiefs"
