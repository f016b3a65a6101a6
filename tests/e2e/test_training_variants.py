"""End to end with real TensorFlow trainers, issue 7's variants: the chief preempted gracefully, the PS pod
replaced, scaling with ``kubectl scale``, a missing dataset, and the new chief cut off from the API.

Runs on the embedded local cluster (pods are real processes with their own IPs), or on the cluster in
``KUBECONFIG`` with the operator installed there (checkpoints then go under $TTJ_E2E_CHECKPOINT_URI).
Assertions are on the job's status, its Events, the Lease, the pods, the trainers' metrics and the
checkpoints — never on log text.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.training_support import (
    Run,
    checkpoint_step,
    checkpoint_uri,
    condition,
    epoch,
    job_manifest,
    poll,
    start_stack,
    step,
)

from ttj_demo.stack import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.tensorflow, pytest.mark.timeout(900)]

NAMESPACE = "default"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from start_stack(tmp_path_factory, gpu_nodes=4)


@pytest.fixture
def new_run(stack: Stack, tmp_path: Path) -> Iterator[Any]:
    """Makes a job (name, checkpoint location and cleanup handled); restores the GPU pool afterwards."""
    runs: list[Run] = []

    def make(prefix: str, **spec: Any) -> Run:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        run = Run(stack, job_manifest(name, checkpoint_uri(stack, tmp_path / name, name), **spec))
        runs.append(run)
        return run

    yield make
    for run in runs:
        run.delete()
    stack.restore_gpu_pool()


def assert_step_never_went_back(run: Run, since: int = 0) -> None:
    """The job's global step, as the chief reported it over time, never decreased (from history entry ``since``)."""
    steps = [step(s) for s in run.history[since:] if (s.get("progress") or {}).get("globalStep") is not None]
    for earlier, later in itertools.pairwise(steps):
        assert later >= earlier, f"the global step went back from {earlier} to {later}: {steps}"


def ps_pods(run: Run) -> list[dict[str, Any]]:
    return [p for p in run.pods("ps") if not p["metadata"].get("deletionTimestamp")]


# -- 1. the chief preempted gracefully --------------------------------------------------------------------


@pytest.mark.slow
def test_chief_preempted_gracefully_loses_no_steps(stack: Stack, new_run: Any) -> None:
    # Checkpoints only when elected, on SIGTERM and at the end (and every 1000 steps), so each one is telling.
    run: Run = new_run(
        "e2e-chief", trainSteps=2500, checkpoint={"intervalSteps": 1000, "intervalSeconds": 0}, backoffLimit=0
    )
    first = run.wait("training under the first chief", lambda s: step(s) >= 150 and epoch(s) >= 1)
    chief, first_epoch = first["chief"]["pod"], epoch(first)
    parameter_servers = {p["metadata"]["name"]: p["metadata"]["uid"] for p in ps_pods(run)}

    before = step(run.status())
    stack.preempt_pod_node(NAMESPACE, chief)
    elected = run.wait("a new chief", lambda s: epoch(s) > first_epoch and s["chief"]["pod"] != chief)
    new_epoch = epoch(elected)
    assert new_epoch == first_epoch + 1, "one election, one epoch"

    # The old chief's SIGTERM checkpoint is at its current step: at least where it was when preempted.
    on_disk = poll(
        "the new chief's first checkpoint", lambda: [c for c in run.checkpoints_on_disk() if c[1] == new_epoch]
    )
    checkpoints = run.checkpoints_on_disk()
    sigterm_step = max(s for s, e in checkpoints if e == first_epoch)
    assert sigterm_step >= before, f"the SIGTERM checkpoint ({sigterm_step}) is behind the chief's step ({before})"
    # The new chief did not restore over the live PS: its first checkpoint is past the SIGTERM one (the
    # surviving workers kept training through the handover); a restore would have put it back at exactly it.
    first_of_new_chief = min(s for s, _ in on_disk)
    assert first_of_new_chief > sigterm_step, (
        f"the new chief's first checkpoint ({first_of_new_chief}) is not past the SIGTERM one ({sigterm_step}): "
        "the PS was restored"
    )

    stack.restore_gpu_pool()
    final = run.wait("the job to succeed", lambda s: s.get("phase") == "Succeeded")

    assert_step_never_went_back(run)
    assert step(final) >= 2500
    assert epoch(final) == new_epoch
    assert final.get("failures", 0) == 0
    assert final.get("preemptions") == 1, "only the chief was preempted; the PS never was"
    assert final.get("chiefElections") == 2
    assert condition(final, "Succeeded").get("status") == "True"
    # The same PS pod throughout, never restarted: its model state was never lost.
    assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in ps_pods(run)} == parameter_servers
    assert all(
        cs.get("restartCount", 0) == 0 for p in ps_pods(run) for cs in p["status"].get("containerStatuses") or []
    )
    lease = run.lease()
    assert lease["spec"]["holderIdentity"] == final["chief"]["pod"] == elected["chief"]["pod"]
    assert lease["spec"]["leaseTransitions"] == new_epoch
    latest = run.latest_checkpoint()
    assert latest is not None
    assert latest.step >= 2500
    assert latest.epoch == new_epoch
    assert {"WorkerPreempted", "ChiefElected"} <= run.event_reasons()
    assert "ParameterServerReplaced" not in run.event_reasons()


# -- 2. the PS pod replaced -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_parameter_server_replaced_restores_the_latest_checkpoint(stack: Stack, new_run: Any) -> None:
    run: Run = new_run(
        "e2e-ps",
        trainSteps=2500,
        workers={"replicas": 2, "maxReplicas": 2},
        checkpoint={"intervalSteps": 400, "intervalSeconds": 0},
        backoffLimit=0,
    )
    # Well past a periodic checkpoint, so that going back to it is visible.
    ready = run.wait(
        "a periodic checkpoint and training past it",
        lambda s: checkpoint_step(s) >= 400 and step(s) >= checkpoint_step(s) + 100,
    )
    first_epoch = epoch(ready)
    [old_ps] = ps_pods(run)
    stack.client().CoreV1Api().delete_namespaced_pod(old_ps["metadata"]["name"], NAMESPACE)
    at_loss = run.latest_checkpoint()
    loss_index = len(run.history)
    highest_before = max(step(s) for s in run.history)
    assert at_loss is not None
    assert at_loss.step < highest_before

    restored = run.wait("a new epoch after the PS loss", lambda s: epoch(s) > first_epoch)
    new_epoch = epoch(restored)
    [new_ps] = poll(
        "the new PS pod running", lambda: [p for p in ps_pods(run) if p["status"].get("phase") == "Running"]
    )
    assert new_ps["metadata"]["name"] != old_ps["metadata"]["name"], "the Deployment made a new PS pod"

    # The chief restored the latest checkpoint: the first checkpoint of the new epoch is back at its step
    # (never below; other workers may add a step or two between the restore and that checkpoint's read).
    first_restored = poll(
        "the restored checkpoint", lambda: [s for s, e in run.checkpoints_on_disk() if e == new_epoch]
    )
    restored_step = min(first_restored)
    assert at_loss.step <= restored_step < highest_before, (
        f"after the PS loss training went on from {restored_step}; the latest checkpoint was {at_loss.step}, "
        f"the step before the loss {highest_before}"
    )

    final = run.wait("the job to succeed", lambda s: s.get("phase") == "Succeeded")
    after_loss = [step(s) for s in run.history[loss_index:] if (s.get("progress") or {}).get("globalStep") is not None]
    assert min(after_loss) >= at_loss.step, "the global step went below the restored checkpoint"
    assert step(final) >= 2500
    assert final.get("failures", 0) == 0
    assert final.get("preemptions", 0) >= 1, "losing the PS counts as a preemption"
    assert epoch(final) >= new_epoch > first_epoch
    assert run.lease()["spec"]["leaseTransitions"] == epoch(final)
    # The job went Recovering (the Event comes with the Recovering condition turning True), then trained on.
    events = run.events()
    assert any(e.reason == "ParameterServerLost" and e.type == "Warning" for e in events), [e.reason for e in events]
    reasons = run.event_reasons()
    assert {"ParameterServerReplaced", "ParameterServerLost"} <= reasons, reasons
    latest = run.latest_checkpoint()
    assert latest is not None
    assert latest.step >= 2500
    assert latest.epoch == epoch(final)


# -- 3. scaling with kubectl scale -----------------------------------------------------------------------------


def scale(stack: Stack, run: Run, replicas: int) -> None:
    """``kubectl scale ttj/NAME --replicas=N`` (the real kubectl when there is one, else the scale subresource)."""
    kubectl = shutil.which("kubectl")
    if kubectl:
        subprocess.run(
            [kubectl, "scale", f"ttj/{run.name}", f"--replicas={replicas}", "-n", run.namespace],
            check=True,
            capture_output=True,
            env={**os.environ, "KUBECONFIG": str(stack.kubeconfig)},
            timeout=60,
        )
        return
    from ttj_contract import GROUP, PLURAL, VERSION

    stack.client().CustomObjectsApi().patch_namespaced_custom_object_scale(
        GROUP, VERSION, run.namespace, PLURAL, run.name, {"spec": {"replicas": replicas}}
    )


def wait_for_workers(run: Run, desired: int, active: int) -> None:
    run.wait(
        f"{active}/{desired} workers",
        lambda s: (
            (s.get("workers") or {}).get("desired") == desired and (s.get("workers") or {}).get("active") == active
        ),
    )
    poll(f"the Lease to announce {active} active workers", lambda: run.active_workers_annotation() == active)


def wait_for_learning_rate(run: Run, expected: float, count: int) -> None:
    """Every one of ``count`` running workers reports ``expected`` as the rate of its latest step."""

    def rates() -> dict[str, float] | None:
        seen = {}
        for pod in run.running_workers():
            try:
                seen[pod["metadata"]["name"]] = run.trainer_metrics(pod).get("ttj_trainer_learning_rate", -1.0)
            except (OSError, run.stack.client().ApiException):
                return None  # a trainer still starting serves no metrics yet
        if len(seen) == count and all(abs(rate - expected) < 1e-9 for rate in seen.values()):
            return seen
        return None

    poll(f"{count} workers training at learning rate {expected}", rates, interval=2.0)


@pytest.mark.slow
def test_scale_workers_down_and_up(stack: Stack, new_run: Any) -> None:
    base = 0.08
    run: Run = new_run(
        "e2e-scale",
        trainSteps=1_000_000,  # runs until the test deletes it
        learningRate=base,
        workers={"replicas": 4, "minReplicas": 1, "maxReplicas": 4},
        checkpoint={"intervalSteps": 0, "intervalSeconds": 60},
    )
    run.wait("training with 4 workers", lambda s: step(s) >= 20 and (s.get("workers") or {}).get("active") == 4)
    wait_for_workers(run, desired=4, active=4)
    wait_for_learning_rate(run, base, count=4)
    chief = run.status()["chief"]["pod"]

    if stack.local:
        # A worker preempted with no spare GPU node: 3 of 4 train, at 3/4 of the rate, until capacity returns.
        victim = next(p["metadata"]["name"] for p in run.running_workers() if p["metadata"]["name"] != chief)
        stack.preempt_pod_node(NAMESPACE, victim)
        wait_for_workers(run, desired=4, active=3)
        wait_for_learning_rate(run, base * 3 / 4, count=3)
        stack.restore_gpu_pool()
        wait_for_workers(run, desired=4, active=4)
        wait_for_learning_rate(run, base, count=4)

    scale(stack, run, 2)
    wait_for_workers(run, desired=2, active=2)
    assert run.job()["spec"]["workers"]["replicas"] == 2
    poll("the scaled-down workers to stop", lambda: len(run.running_workers()) == 2)
    survivors = {
        p["metadata"]["name"]: p["metadata"]["labels"]["transient.training/slot"] for p in run.running_workers()
    }
    assert chief in survivors, "scaling down never removes the chief"

    scale(stack, run, 4)
    wait_for_workers(run, desired=4, active=4)
    slots = sorted(int(p["metadata"]["labels"]["transient.training/slot"]) for p in run.running_workers())
    assert slots == [0, 1, 2, 3], "the freed slots are filled again"
    wait_for_learning_rate(run, base, count=4)

    final = run.status()
    assert final.get("phase") == "Running"
    assert final.get("failures", 0) == 0
    assert final["chief"]["pod"] == chief
    assert run.lease()["spec"]["holderIdentity"] == chief
    assert_step_never_went_back(run)


@pytest.mark.slow
def test_scaling_down_keeps_the_base_learning_rate(stack: Stack, new_run: Any) -> None:
    base = 0.08
    run: Run = new_run(
        "e2e-lr",
        trainSteps=1_000_000,
        learningRate=base,
        workers={"replicas": 2, "minReplicas": 1, "maxReplicas": 2},
        checkpoint={"intervalSteps": 0, "intervalSeconds": 60},
    )
    wait_for_workers(run, desired=2, active=2)
    wait_for_learning_rate(run, base, count=2)
    scale(stack, run, 1)
    wait_for_workers(run, desired=1, active=1)

    def survivor_rate() -> float | None:
        workers = run.running_workers()
        if len(workers) != 1:
            return None
        # A step taken after the Lease said 1 active worker (the gauge holds the latest step's rate).
        before = run.trainer_metrics(workers[0]).get("ttj_trainer_local_steps_total", 0.0)
        time.sleep(3)
        after = run.trainer_metrics(workers[0])
        return after["ttj_trainer_learning_rate"] if after.get("ttj_trainer_local_steps_total", 0.0) > before else None

    rate = poll("the surviving worker to train on", survivor_rate)
    assert rate == pytest.approx(base), "1 of 1 desired workers active: the base learning rate"


# -- 4. a missing dataset -----------------------------------------------------------------------------------------


def test_a_missing_dataset_fails_the_job_at_once_and_a_preemption_is_not_a_failure(
    stack: Stack, new_run: Any, tmp_path: Path
) -> None:
    # spec.data names a path with no CIFAR-10: every worker exits 3 with a message right after starting.
    missing = str(tmp_path / "no-cifar10-here")
    run: Run = new_run(
        "e2e-fail",
        dataset="cifar10",
        data={"uri": missing},
        workers={"replicas": 1, "maxReplicas": 1},
        backoffLimit=2,
    )
    outcomes: dict[str, int] = {}  # pod → exit code, as seen while it existed
    preempted: set[str] = set()

    def observe() -> bool:
        for pod in run.pods("worker"):
            name = pod["metadata"]["name"]
            for container in pod["status"].get("containerStatuses") or []:
                terminated = (container.get("state") or {}).get("terminated")
                if terminated:
                    outcomes[name] = int(terminated["exitCode"])
            # Preempt the node of a worker while it starts up (until one preemption lands before the failure).
            if (
                not preempted
                and name not in outcomes
                and pod["status"].get("phase") == "Running"
                and not pod["metadata"].get("deletionTimestamp")
            ):
                stack.preempt_pod_node(NAMESPACE, name)
                preempted.add(name)
        return run.status().get("phase") == "Failed"

    poll("the job to fail", observe, interval=0.3)
    final = run.status()

    assert set(outcomes.values()) <= {3, 137, 143}, outcomes
    assert final.get("failures") == 1, "no retry loop: the first missing-dataset exit ends the job"
    if preempted and outcomes.get(next(iter(preempted))) in (137, 143):
        assert final.get("preemptions", 0) >= 1
    failed = condition(final, "Failed")
    assert failed.get("status") == "True"
    assert failed.get("reason") == "DataUnavailable"
    # The pod's termination message, naming the spec field (not an environment variable).
    assert f"spec.data.uri {missing!r}" in failed.get("message", ""), failed
    assert "TTJ_" not in failed.get("message", "")
    assert final.get("completionTime")
    events = run.events()
    assert any(e.reason == "DataUnavailable" and e.type == "Warning" for e in events), [e.reason for e in events]


# -- 5. the new chief cut off from the API around a chief preemption ---------------------------------------------


def test_a_new_chief_cut_off_from_the_api_still_ends_the_job_with_a_final_checkpoint(
    stack: Stack, new_run: Any
) -> None:
    if not stack.local:
        pytest.skip("cutting one pod off the API needs the local cluster's per-client fault rules")
    train_steps = 1200
    run: Run = new_run(
        "e2e-cut", trainSteps=train_steps, checkpoint={"intervalSteps": 1000, "intervalSeconds": 0}, backoffLimit=0
    )
    first = run.wait("training under the first chief", lambda s: step(s) >= 150 and epoch(s) >= 1)
    chief, first_epoch = first["chief"]["pod"], epoch(first)
    # Whoever is elected next is one of the other workers: cut them all off, then take the chief's node.
    others = [p["status"]["podIP"] for p in run.running_workers() if p["metadata"]["name"] != chief]
    assert others
    stack.cut_api_access(others)
    try:
        stack.preempt_pod_node(NAMESPACE, chief)
        elected = run.wait("a new chief", lambda s: epoch(s) > first_epoch and s["chief"]["pod"] != chief)
        # The new chief cannot read the Lease that names it: hold the cut a few seconds longer.
        time.sleep(5)
    finally:
        refused = stack.restore_api_access()
    assert refused > 0, "the cut refused the other workers' API requests"
    stack.restore_gpu_pool()

    final = run.wait("the job to succeed", lambda s: s.get("phase") == "Succeeded")
    assert_step_never_went_back(run)
    assert epoch(final) >= epoch(elected)
    assert final.get("failures", 0) == 0
    # Succeeded only with the model: a checkpoint at trainSteps, reported by the chief of the current epoch.
    assert checkpoint_step(final) >= train_steps
    assert (final.get("progress") or {}).get("epoch") == epoch(final)
    latest = run.latest_checkpoint()
    assert latest is not None
    assert latest.step >= train_steps
    assert latest.epoch == epoch(final)
    assert condition(final, "Succeeded").get("reason") == "TrainingComplete"
