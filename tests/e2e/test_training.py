"""End to end with real TensorFlow trainers: a job trains through preemptions of a worker and the chief.

Runs on the embedded local cluster (pods are real processes), or on the cluster in ``KUBECONFIG``
with the operator installed there. Assertions are on the job's status, its Events, the Lease,
the pods and the checkpoints — never on log text.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ttj.demo.stack import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.tensorflow, pytest.mark.timeout(900)]

TRAIN_STEPS = 4000
DEADLINE = 400.0


class Run:
    """One job on the stack, with the history of its status kept for assertions."""

    def __init__(self, stack: Stack, manifest: dict[str, Any]) -> None:
        self.stack = stack
        self.name: str = manifest["metadata"]["name"]
        self.namespace: str = manifest["metadata"]["namespace"]
        self.history: list[dict[str, Any]] = []
        stack.create_job(manifest)

    def status(self) -> dict[str, Any]:
        self.stack.check_alive()
        status: dict[str, Any] = self.stack.job(self.namespace, self.name).get("status") or {}
        self.history.append(status)
        return status

    def wait(self, what: str, test: Callable[[dict[str, Any]], bool], timeout: float = DEADLINE) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.status()
            if test(status):
                return status
            if status.get("phase") == "Failed":
                pytest.fail(f"job failed while waiting for {what}: {status.get('conditions')}")
            time.sleep(1)
        pytest.fail(f"timed out waiting for {what}; last status: {self.history[-1] if self.history else None}")

    def running_workers(self) -> list[dict[str, Any]]:
        return [
            p
            for p in self.stack.pods(self.namespace, self.name)
            if p["metadata"]["labels"].get("transient.training/role") == "worker"
            and p["status"].get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        ]

    def lease(self) -> dict[str, Any]:
        client = self.stack.client()
        lease = client.CoordinationV1Api().read_namespaced_lease(f"{self.name}-chief", self.namespace)
        return client.ApiClient().sanitize_for_serialization(lease)  # type: ignore[no-any-return]

    def event_reasons(self) -> set[str]:
        events = self.stack.client().CoreV1Api().list_namespaced_event(self.namespace)
        return {
            e.reason
            for e in events.items
            if e.involved_object.kind == "TransientTrainingJob" and e.involved_object.name == self.name
        }


def step(status: dict[str, Any]) -> int:
    return int((status.get("progress") or {}).get("globalStep") or 0)


def epoch(status: dict[str, Any]) -> int:
    return int((status.get("chief") or {}).get("epoch") or 0)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with Stack(tmp_path_factory.mktemp("stack"), gpu_nodes=4) as running:
        yield running


def job_manifest(name: str, checkpoints: Path, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "transient.training/v1alpha1",
        "kind": "TransientTrainingJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "model": "small-cnn",
            "dataset": "synthetic",
            "trainSteps": TRAIN_STEPS,
            "batchSize": 64,
            "learningRate": 0.05,
            "checkpoint": {"uri": str(checkpoints), "intervalSteps": 100, "intervalSeconds": 10},
            "workers": {"replicas": 3, "minReplicas": 1, "maxReplicas": 3},
            "backoffLimit": 1,
            "cleanPodPolicy": "None",
            **spec,
        },
    }


def test_training_survives_losing_a_worker_and_the_chief(stack: Stack, tmp_path: Path) -> None:
    checkpoints = tmp_path / "checkpoints"
    run = Run(stack, job_manifest(f"e2e-{uuid.uuid4().hex[:6]}", checkpoints))

    first = run.wait("training to start under the first chief", lambda s: step(s) >= 50 and epoch(s) >= 1)
    first_chief = first["chief"]["pod"]

    # A worker that is not the chief is preempted: it is replaced, and nothing else changes.
    victim = next(p["metadata"]["name"] for p in run.running_workers() if p["metadata"]["name"] != first_chief)
    stack.preempt_pod_node("default", victim)
    run.wait("the worker's preemption to be counted", lambda s: s.get("preemptions", 0) >= 1)
    assert run.status()["chief"]["pod"] == first_chief
    assert run.status().get("failures", 0) == 0, "a preemption must never count as a failure"

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

    latest = trainer_checkpoints.latest(str(checkpoints))
    assert latest is not None
    assert latest.step >= TRAIN_STEPS
    assert latest.epoch == epoch(final)

    reasons = run.event_reasons()
    assert {"WorkerPreempted", "ChiefElected"} <= reasons

    chiefs = [p for p in run.stack.pods("default", run.name) if p["metadata"]["labels"].get("transient.training/chief")]
    assert len(chiefs) <= 1, "never two chiefs"
