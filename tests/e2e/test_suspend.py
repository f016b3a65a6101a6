"""End to end with real TensorFlow trainers: a job suspended mid-run (spec.suspend) checkpoints, ends with no pods
and its parameter servers at 0 replicas; resumed, it goes on from that checkpoint under a new chief and succeeds.

Runs on the embedded local cluster, or on the cluster in ``KUBECONFIG`` with the operator installed there.
Assertions are on the job's status, its Events, the Deployment, the pods and the checkpoints; every wait polls
a state, none a duration.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from pathlib import Path

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

from ttj_contract import GROUP, PLURAL, VERSION, ps_name
from ttj_demo.stack import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.tensorflow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from start_stack(tmp_path_factory, gpu_nodes=4)


def set_suspend(run: Run, value: bool) -> None:
    run.stack.client().CustomObjectsApi().patch_namespaced_custom_object(
        GROUP, VERSION, run.namespace, PLURAL, run.name, {"spec": {"suspend": value}}
    )


def ps_replicas(run: Run) -> tuple[int, int]:
    """The PS Deployment's spec.replicas and status.replicas."""
    deployment = run.stack.client().AppsV1Api().read_namespaced_deployment(ps_name(run.name, 0), run.namespace)
    return deployment.spec.replicas, deployment.status.replicas or 0


@pytest.mark.slow
def test_a_suspended_job_stops_its_pods_and_resumes_from_its_checkpoint(stack: Stack, tmp_path: Path) -> None:
    name = f"e2e-suspend-{uuid.uuid4().hex[:6]}"
    # Checkpoints only when elected, on SIGTERM and at the end (and every 1000 steps), so each one is telling.
    run = Run(
        stack,
        job_manifest(
            name,
            checkpoint_uri(stack, tmp_path / name, name),
            trainSteps=2500,
            checkpoint={"intervalSteps": 1000, "intervalSeconds": 0},
            backoffLimit=0,
        ),
    )
    try:
        first = run.wait("training under the first chief", lambda s: step(s) >= 150 and epoch(s) >= 1)
        first_epoch = epoch(first)
        before = step(run.status())

        set_suspend(run, True)
        suspended = run.wait(
            "the job suspended, its pods gone",
            lambda s: (
                s.get("phase") == "Suspended"
                and condition(s, "Suspended").get("message", "").startswith("no pods run")
                and not run.pods()
                and ps_replicas(run) == (0, 0)
                # the pass after the last pod went: nothing runs, nothing accrues
                and s["cost"]["usdPerHour"] == 0
            ),
        )
        assert condition(suspended, "Suspended")["status"] == "True"
        assert condition(suspended, "Suspended")["reason"] == "Suspended"
        assert suspended.get("preemptions", 0) == 0
        assert suspended.get("failures", 0) == 0
        assert suspended.get("chiefElections") == 1
        assert suspended["workers"]["active"] == 0
        usd = suspended["cost"]["usd"]
        poll("the Suspended Event", lambda: "Suspended" in run.event_reasons())
        # The chief's SIGTERM checkpoint: at least where training was when the job was suspended.
        sigterm_step = max(s for s, e in run.checkpoints_on_disk() if e == first_epoch)
        assert sigterm_step >= before, f"the SIGTERM checkpoint ({sigterm_step}) is behind the step ({before})"
        assert checkpoint_step(suspended) == sigterm_step

        assert run.status()["cost"]["usd"] == usd, "no cost accrued while suspended"

        set_suspend(run, False)
        # The new chief filled the empty parameter servers from the SIGTERM checkpoint: its first checkpoint
        # is exactly there, no step lost.
        restored = poll(
            "the new chief's first checkpoint",
            lambda: [s for s, e in run.checkpoints_on_disk() if e == first_epoch + 1],
        )
        assert min(restored) == sigterm_step
        final = run.wait("the resumed job to succeed", lambda s: s.get("phase") == "Succeeded")
        assert epoch(final) == first_epoch + 1, "one election after the resume, one epoch"
        steps = [step(s) for s in run.history if (s.get("progress") or {}).get("globalStep") is not None]
        assert all(later >= earlier for earlier, later in itertools.pairwise(steps)), steps
        assert step(final) >= 2500
        assert final.get("preemptions", 0) == 0
        assert final.get("failures", 0) == 0
        assert final.get("chiefElections") == 2
        assert condition(final, "Succeeded")["status"] == "True"
        poll("the Resumed Event", lambda: {"Suspended", "Resumed", "ChiefElected"} <= run.event_reasons())
        assert not run.warnings(), run.warnings()
    finally:
        run.delete()
