"""``ttj timeline`` end to end: a job on the local cluster (real operator process, simulated pods) taken
through a worker's and the chief's preemption, then read back by the command from what the cluster keeps.

The chief's progress reports, which a trainer would publish, are written to the Lease by the test.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from tests.e2e.operator_support import (
    ChiefHeartbeat,
    OperatorProcess,
    cluster_with_nodes,
    e2e_pools,
    install_crd,
    wait_for,
)
from tests.e2e.test_operator_recovery import create_job, job_events, job_status, needs_control, running, workers

from ttj_contract import ANNOTATION_PROGRESS, LeaseProgress, format_time

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

#: Seconds a preempted GPU node takes to come back: a replacement waits for it, so its slot stands empty.
RESTORE_AFTER = 6.0


def pools() -> list[Any]:
    """A CPU pool for the parameter server and exactly three spot T4 nodes for three workers."""
    return e2e_pools(cpu_nodes=1, gpu_nodes=3, restore_after=RESTORE_AFTER)


class Progress(threading.Thread):
    """What a chief trainer publishes on the Lease: the global step (10 per second while at least one
    worker runs), and a checkpoint every 10 s, evaluated as it is written."""

    def __init__(self, api: Any, namespace: str) -> None:
        super().__init__(name="progress", daemon=True)
        self.leases = client.CoordinationV1Api(api)
        self.namespace = namespace
        self.stop = threading.Event()
        self.step = self.checkpoint = 0

    def run(self) -> None:
        last = time.monotonic()
        while not self.stop.wait(1.0):
            now = time.monotonic()
            self.step += int(10 * (now - last))
            last = now
            if self.step - self.checkpoint >= 100:
                self.checkpoint = self.step
            report = LeaseProgress(
                self.step,
                self.checkpoint,
                "/tmp/ck/ckpt",
                format_time(datetime.now(UTC)),
                evaluation_step=self.checkpoint or None,
                evaluation={"loss": 100 / (100 + self.checkpoint), "accuracy": 0.5} if self.checkpoint else None,
            )
            patch = {"metadata": {"annotations": {ANNOTATION_PROGRESS: report.to_annotation()}}}
            try:
                self.leases.patch_namespaced_lease("train-chief", self.namespace, patch)
            except ApiException:
                continue  # no Lease yet


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, Any]]:
    with cluster_with_nodes(pools()) as (kubeconfig, control, _access):
        api = config.new_client_from_config(config_file=kubeconfig)
        install_crd(api)
        namespace = f"timeline-{os.getpid()}"
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": namespace}})
        operator = OperatorProcess(kubeconfig, namespace, tmp_path)
        operator.start()
        progress = Progress(api, namespace)
        progress.start()
        try:
            with ChiefHeartbeat(api):
                yield {
                    "api": api,
                    "kubeconfig": kubeconfig,
                    "control": control,
                    "operator": operator,
                    "logs": tmp_path,
                    "ns": namespace,
                    "core": core,
                }
        finally:
            progress.stop.set()
            operator.kill()
            with contextlib.suppress(ApiException):
                core.delete_namespace(namespace)  # on a shared cluster (KUBECONFIG) leave nothing behind
            api.close()


def recovered(env: dict[str, Any], count: int) -> dict[str, Any] | None:
    status = job_status(env)
    return status if (status.get("savings") or {}).get("recovered") == count else None


def ttj(env: dict[str, Any], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ttj", "timeline", *argv],
        env={**os.environ, "KUBECONFIG": env["kubeconfig"]},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_timeline_of_a_job_taken_through_preemptions(env: dict[str, Any], tmp_path: Path) -> None:
    control = needs_control(env)
    create_job(env, trainSteps=100_000)
    chief = running(env, epoch=1)["chief"]["pod"]
    time.sleep(8)
    worker = next(p.metadata.name for p in workers(env) if p.metadata.name != chief)
    control.preempt_pod(env["ns"], worker)
    status = wait_for("the worker's replacement ready and its loss costed", lambda: recovered(env, 1), timeout=90)
    time.sleep(8)
    chief = running(env, epoch=1)["chief"]["pod"]
    control.preempt_pod(env["ns"], chief)
    running(env, epoch=2)
    status = wait_for("the chief's replacement ready and its loss costed", lambda: recovered(env, 2), timeout=90)
    time.sleep(8)

    records = {r["pod"]: r for r in status["preemptionCosts"]}
    assert (records[worker]["role"], records[chief]["role"]) == ("worker", "chief")
    for record in records.values():
        assert record["stepsLost"] == 0
        assert record["slotEmptySeconds"] >= RESTORE_AFTER - 1, "the replacement waited for a new node"
        assert record["startupUSD"] >= 0
        assert record["replacement"] != record["pod"]
    savings = status["savings"]
    assert (savings["losses"], savings["recovered"]) == (2, 2)
    assert savings["netUSD"] == pytest.approx(savings["onDemandUSD"] - status["cost"]["usd"])
    costed = [e for e in job_events(env) if e.reason == "PreemptionCost"]
    assert {worker, chief} <= {m for e in costed for m in (worker, chief) if m in e.message}
    evaluated = status["progress"]["evaluationStep"]
    assert evaluated > 0
    assert status["progress"]["evaluation"] == {"accuracy": 0.5, "loss": pytest.approx(100 / (100 + evaluated))}
    told = [e.message for e in job_events(env) if e.reason == "Evaluated"]
    assert len(told) == len(set(told)) >= 2, "one Event per evaluation step"
    assert (
        f'ttj_job_evaluation{{job="train",metric="accuracy",namespace="{env["ns"]}"}} 0.5' in env["operator"].metrics()
    )

    text = ttj(env, f"{env['ns']}/train")
    assert text.returncode == 0, text.stderr
    assert "train (Running)" in text.stdout
    assert f"worker {worker} (slot" in text.stdout
    assert f"chief {chief} (slot" in text.stdout
    assert "saved $" in text.stdout
    assert "evaluation and the exported model:" in text.stdout
    assert f"evaluated at global step {evaluated}: accuracy=0.5, loss=" in text.stdout
    pods_section = text.stdout.split("pods (seconds since the job was applied):")[1]
    assert worker in pods_section, "a lost and deleted pod is still drawn, from the status"

    picture = tmp_path / "timeline.png"
    drawn = ttj(env, f"{env['ns']}/train", "-o", str(picture), "--text")
    assert drawn.returncode == 0, drawn.stderr
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "what each loss cost:" in drawn.stdout
    if os.environ.get("TTJ_TIMELINE_EXAMPLE"):  # refresh docs/img/timeline-example.png from this run
        Path(os.environ["TTJ_TIMELINE_EXAMPLE"]).write_bytes(picture.read_bytes())
        Path(os.environ["TTJ_TIMELINE_EXAMPLE"]).with_suffix(".txt").write_text(drawn.stdout)
        Path(os.environ["TTJ_TIMELINE_EXAMPLE"]).with_suffix(".json").write_text(json.dumps(status, indent=2))

    missing = ttj(env, f"{env['ns']}/nothing")
    assert missing.returncode == 1
    assert f"no TransientTrainingJob {env['ns']}/nothing" in missing.stderr
