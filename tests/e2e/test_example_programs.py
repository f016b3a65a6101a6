"""End to end with the example programs of examples/programs/: each job manifest as a user applies it (the
training shrunk through ``spec.program.args``), its code found by the local cluster's pods in a directory
outside the repository (``ttj local-cluster --program-path``), trained through a worker and a chief
preemption to ``Succeeded``; then the final model is better than the fresh one on a batch none of the
workers read, and the exported model, loaded in a fresh process with plain Keras and TensorFlow, predicts
what the final checkpoint restored into the program's own model predicts.

ctr and custom_step run at once; the keras.applications network, whose first step and export alone take
longer than both together, runs in a test marked slow. Assertions are on the jobs' status, the trainers'
metrics, the checkpoints and the models, never on log text.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from tests.e2e.training_support import Run, condition, epoch, start_stack, step

from ttj_demo.stack import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.tensorflow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "programs"
NAMESPACE = "default"
WORKERS = 3
#: The seed of the batch the models are compared on: no worker reads it (workers' seeds derive from the job's).
HELD_OUT_SEED = 987_654


@dataclass(frozen=True)
class Example:
    """One example shrunk to train in a minute or two beside the others on two cores."""

    name: str
    args: dict[str, str]
    train_steps: int
    batch_size: int
    #: how close the exported model's predictions must be to the restored checkpoint's
    tolerance: float = 1e-5


EXAMPLE_RUNS = (
    Example("ctr", {"rows": "50000", "width": "8"}, train_steps=1000, batch_size=64),
    Example(
        "cifar_applications",
        {"network": "MobileNet", "alpha": "0.25", "data": "synthetic", "steps": "300", "learning_rate": "0.05"},
        train_steps=300,
        batch_size=16,
        tolerance=1e-4,
    ),
    Example("custom_step", {}, train_steps=6000, batch_size=64),
)


@pytest.fixture(scope="module")
def user_code(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each example's directory copied where a user keeps their code: outside the repository and any package."""
    home = tmp_path_factory.mktemp("my-models")
    return {e.name: Path(shutil.copytree(EXAMPLES / e.name, home / e.name)) for e in EXAMPLE_RUNS}


#: GPU nodes for two jobs' workers and no more: a preempted worker's replacement waits (as on a pool out of
#: spot capacity) instead of starting another TensorFlow process on the test's two cores.
@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, user_code: dict[str, Path]) -> Iterator[Stack]:
    if "KUBECONFIG" in os.environ:
        pytest.skip("the example programs' code reaches the pods through the local cluster's --program-path")
    yield from start_stack(tmp_path_factory, gpu_nodes=WORKERS * 2, program_path=list(user_code.values()))


def manifest(example: Example, checkpoints: Path) -> dict[str, Any]:
    """The example's own job manifest, shrunk: its program's args, steps, batch, workers and checkpoints."""
    job: dict[str, Any] = yaml.safe_load((EXAMPLES / example.name / "job.yaml").read_text())
    job["metadata"] = {"name": f"{job['metadata']['name']}-{uuid.uuid4().hex[:4]}", "namespace": NAMESPACE}
    spec = job["spec"]
    spec["program"]["args"] = example.args
    spec.update(
        trainSteps=example.train_steps,
        batchSize=example.batch_size,
        checkpoint={"uri": str(checkpoints), "intervalSteps": 0, "intervalSeconds": 30},
        workers={"replicas": WORKERS, "minReplicas": 1, "maxReplicas": WORKERS},
        backoffLimit=0,
        cleanPodPolicy="None",
    )
    return job


class Preempted:
    """One job driven through its preemptions: as soon as it trains under its first chief with every worker, a
    worker that is not the chief and then the chief lose their nodes, back to back (the third worker is
    elected and trains on alone: the preempted spot capacity does not come back); then it must elect a new
    chief and succeed. Each job is preempted the moment it is ready, not when all are: a small one can
    finish its steps in the time a large one takes to start."""

    def __init__(self, stack: Stack, run: Run) -> None:
        self.stack = stack
        self.run = run
        self.first_chief: str | None = None
        self.elected: dict[str, Any] | None = None
        self.final: dict[str, Any] | None = None
        #: The exchanges with its PS by transport of the worker that had taken the most, looked at each round from
        #: the preemptions until the job succeeded (at one look only, a worker might have taken just its first).
        self.exchanges: dict[str, float] = {}

    def trains(self) -> bool:
        """A worker's own metrics show a global step (the job's status says so only at its next report). Any
        worker's: the chief's first step comes after it initialised the PS and wrote the first checkpoint, and
        a small model's other workers can take most of the job's steps by then."""
        for pod in self.run.running_workers():
            try:
                metrics = self.run.trainer_metrics(pod)
            except OSError:
                continue  # not serving its metrics yet
            if metrics.get("ttj_trainer_global_step", 0.0) >= 1:
                return True
        return False

    def count_exchanges(self) -> None:
        """The exchanges of the worker that took the most, by transport."""
        for pod in self.run.running_workers():
            try:
                metrics = self.run.trainer_metrics(pod)
            except OSError:
                continue
            counts = {
                transport: metrics.get(f'ttj_trainer_exchanges_total{{transport="{transport}"}}', 0.0)
                for transport in ("wire", "tensorflow")
            }
            if sum(counts.values()) > sum(self.exchanges.values()):
                self.exchanges = counts

    def advance(self) -> bool:
        """One look at the job, acting on what it shows; True once it has succeeded."""
        status = self.run.status()
        if status.get("phase") == "Failed":
            pytest.fail(f"{self.run.name} failed: {status.get('conditions')}; {self.run.warnings()}")
        if self.first_chief is None:
            workers = [p["metadata"]["name"] for p in self.run.running_workers()]
            chief = (status.get("chief") or {}).get("pod")
            if epoch(status) == 1 and len(workers) == WORKERS and chief in workers and self.trains():
                assert status.get("phase") == "Running", (self.run.name, status)
                self.first_chief = chief
                self.stack.preempt_pod_node(NAMESPACE, next(w for w in workers if w != chief))
                self.stack.preempt_pod_node(NAMESPACE, chief)
        elif self.elected is None:
            if epoch(status) >= 2 and status["chief"]["pod"] != self.first_chief:
                self.elected = status
        elif status.get("phase") == "Succeeded":
            self.final = status
        if self.first_chief is not None and self.final is None:
            self.count_exchanges()
        return self.final is not None


def test_the_ctr_and_custom_step_examples_train_through_preemptions_to_a_model_that_serves(
    stack: Stack, user_code: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    train_through_preemptions_and_serve(stack, user_code, tmp_path, monkeypatch, ("ctr", "custom_step"))


@pytest.mark.slow
def test_the_keras_applications_example_trains_through_preemptions_to_a_model_that_serves(
    stack: Stack, user_code: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slow: the MobileNet's first step (tracing 28 layers over the PS-resident variables) and its export take
    minutes on two busy cores; the other two examples together take less than this one alone."""
    train_through_preemptions_and_serve(stack, user_code, tmp_path, monkeypatch, ("cifar_applications",))


def train_through_preemptions_and_serve(
    stack: Stack, user_code: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, names: tuple[str, ...]
) -> None:
    """The named examples' jobs at once, each through its preemptions to Succeeded; then their models."""
    examples = [e for e in EXAMPLE_RUNS if e.name in names]
    jobs = [Preempted(stack, Run(stack, manifest(e, tmp_path / e.name / "checkpoints"))) for e in examples]
    try:
        deadline = time.monotonic() + 600
        while not all(done := [job.advance() for job in jobs]):  # every job looked at each round
            if time.monotonic() > deadline:
                pytest.fail(f"timed out; done: {done}; last: {[(j.run.name, j.run.history[-1]) for j in jobs]}")
            time.sleep(0.2)
    finally:
        stack.restore_gpu_pool()  # for the next test of the module

    for example, job in zip(examples, jobs, strict=True):
        run, final, elected = job.run, job.final, job.elected
        assert final is not None
        assert elected is not None
        assert step(final) >= example.train_steps, run.name
        assert final.get("preemptions", 0) >= 2, (run.name, final)
        # With one PS a worker's exchanges go over its wire (the first of a connection traces through
        # TensorFlow); with more, through TensorFlow's call.
        if run.job()["spec"]["parameterServers"]["replicas"] == 1:
            assert job.exchanges["wire"] > job.exchanges["tensorflow"], (run.name, job.exchanges)
        else:
            assert job.exchanges["wire"] == 0 < job.exchanges["tensorflow"], (run.name, job.exchanges)
        assert final.get("failures", 0) == 0, (run.name, run.warnings())
        assert final.get("chiefElections", 0) >= 2, (run.name, final)
        assert epoch(final) >= epoch(elected) >= 2, run.name
        assert condition(final, "Succeeded").get("status") == "True", run.name
        assert {"WorkerPreempted", "ChiefElected"} <= run.event_reasons(), run.name
        latest = run.latest_checkpoint()
        assert latest is not None, run.name
        assert latest.step >= example.train_steps, run.name
        assert latest.epoch == epoch(final), run.name

    for directory in user_code.values():
        monkeypatch.syspath_prepend(str(directory))
    checked = [
        restored_predictions(e, job.run.checkpoint_uri, tmp_path / e.name)
        for e, job in zip(examples, jobs, strict=True)
    ]
    served = served_predictions([(where, features) for where, features, _ in checked])
    for example, (_, _, restored), by in zip(examples, checked, served, strict=True):
        for form in ("keras", "saved_model"):
            np.testing.assert_allclose(
                np.asarray(by[form]),
                restored,
                rtol=example.tolerance,
                atol=example.tolerance,
                err_msg=f"{example.name} {form}",
            )


def restored_predictions(example: Example, checkpoint_uri: str, workdir: Path) -> tuple[str, Path, np.ndarray]:
    """Loss on a held-out batch: the final checkpoint restored into the program's model is below the fresh model
    (the job's initial weights: the trainer seeds Keras with the job's seed, 0). Returns where the final model
    was exported, the batch's features (an .npz) and what the restored model predicts for them."""
    import keras

    from ttj_trainer import checkpoints, export, program
    from ttj_trainer.program import InputContext

    entrypoint = f"{example.name}:program"

    def fresh_model() -> tuple[program.Program, Any]:
        keras.utils.set_random_seed(0)
        p = program.load(entrypoint, example.args)
        return p, program.built_model(p)

    p, model = fresh_model()
    features, labels = next(iter(p.train_input(InputContext(0, 1, 256, HELD_OUT_SEED))))
    loss_at_start = float(p.loss(labels, model(features, training=False)))
    p, model = fresh_model()
    program.restore(model, checkpoint_uri)
    restored = np.asarray(model(features, training=False))
    loss_at_end = float(p.loss(labels, restored))
    assert loss_at_end < loss_at_start, (
        f"{example.name}: loss {loss_at_start:.4f} at the start, {loss_at_end:.4f} at the end"
    )

    final = checkpoints.latest(checkpoint_uri)
    assert final is not None
    arrays = (
        {k: np.asarray(v) for k, v in features.items()}
        if isinstance(features, dict)
        else {"features": np.asarray(features)}
    )
    workdir.mkdir(parents=True, exist_ok=True)
    np.savez(workdir / "features.npz", **arrays)
    return export.location(checkpoint_uri, final.step), workdir / "features.npz", restored


def served_predictions(exports: list[tuple[str, Path]]) -> list[dict[str, Any]]:
    """What each exported model predicts for its features, loaded in one fresh process (export_probe.py)."""
    result = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("export_probe.py"))]
        + [str(part) for pair in exports for part in pair],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    served: list[dict[str, Any]] = json.loads(result.stdout.strip().splitlines()[-1])
    return served
