"""Loss vs global step of a mixed GPU fleet against a uniform one, on the local cluster with two GPU speeds.

    .venv/bin/python bench/mixed_fleet_loss.py [--steps 300] [--step-seconds 1.2] [--fast-speed 3] [--seed 7]
        [--learning-rate 0.01] [--runs uniform,updateShare,activeWorkers] [--png docs/img/mixed_fleet_loss.png]
        [--json FILE]
    .venv/bin/python bench/mixed_fleet_loss.py --draw FILE.json [FILE.json ...] [--png ...]

One `ttj local-cluster` (an on-demand CPU pool for the parameter server, a spot T4 pool at speed 1 and a spot
L4 pool at ``--fast-speed``, both with ``--step-seconds`` of simulated GPU time per step at speed 1) and the
real operator (`ttj operator`); then, one after the other, three jobs of four workers that train the built-in
small CNN on synthetic data (bench/programs/heldout_small_cnn.py: the built-in program plus a held-out
evaluation set) with the same seed, batch, learning rate and step budget:

  uniform        4 T4 workers (speed 1)
  updateShare    2 T4 + 2 L4 (worker groups l4 then t4), learningRateScaling: updateShare
  activeWorkers  the same mixed fleet, learningRateScaling: activeWorkers

The chief checkpoints every ``--eval-every`` steps and evaluates the held-out set after each checkpoint; the
curves are those evaluations (read from the chief's log, at full precision). Also recorded: the job's and each
group's steps/s as status shows them (status.progress.stepsPerSecond, status.workerGroups[].stepsPerSecond),
and each worker's learning-rate factor as its log says it (every 100 global steps). Prints a table, writes
the JSON and draws the PNG (matplotlib, the ``viz`` extra); ``--draw`` draws saved JSON files, two to a row.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

from ttj_contract import GROUP, PLURAL, VERSION, job_selector

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "bench" / "programs"
NAMESPACE = "default"
WORKERS = 4


@dataclass
class Run:
    name: str
    scaling: str
    mixed: bool
    seconds: float = 0.0
    phase: str = ""
    #: (global step, held-out loss, held-out accuracy) of every evaluation, in order
    evaluations: list[tuple[int, float, float]] = field(default_factory=list)
    #: status samples: (seconds since the job was created, global step, job steps/s, {group: steps/s})
    samples: list[tuple[float, int, float | None, dict[str, float]]] = field(default_factory=list)
    #: the factor each worker logged with its training lines: {pod: [(global step, factor)]}
    factors: dict[str, list[tuple[int, float]]] = field(default_factory=dict)


def pools(step_seconds: float, fast_speed: float) -> list[str]:
    gpu = f"provisioning=spot,gpus=1,cpu=8,memory=30Gi,step-seconds={step_seconds},restore-after=never"
    return [
        "name=default-pool,nodes=2,cpu=4,memory=15Gi,machine-type=n1-standard-4",
        f"name=t4-spot,nodes={WORKERS},accelerator=nvidia-tesla-t4,machine-type=n1-standard-8,speed=1,{gpu}",
        f"name=l4-spot,nodes=2,accelerator=nvidia-l4,machine-type=g2-standard-8,speed={fast_speed},{gpu}",
    ]


def manifest(run: Run, args: argparse.Namespace, checkpoints: Path) -> dict[str, Any]:
    workers: dict[str, Any] = {"replicas": WORKERS, "minReplicas": WORKERS, "maxReplicas": WORKERS}
    if run.mixed:
        workers["groups"] = [
            {"name": "l4", "acceleratorType": "nvidia-l4", "maxReplicas": 2},
            {"name": "t4", "acceleratorType": "nvidia-tesla-t4"},
        ]
    else:
        workers["acceleratorType"] = "nvidia-tesla-t4"
    return {
        "apiVersion": "transient.training/v1alpha1",
        "kind": "TransientTrainingJob",
        "metadata": {"name": f"lr-{run.name.lower()}", "namespace": NAMESPACE},
        "spec": {
            "program": {
                "entrypoint": "heldout_small_cnn:program",
                "args": {
                    "model": "small-cnn",
                    "dataset": "synthetic",
                    "learning_rate": str(args.learning_rate),
                    "momentum": "0.9",
                    "seed": str(args.seed),
                },
            },
            "trainSteps": args.steps,
            "batchSize": args.batch,
            "learningRateScaling": run.scaling,
            "checkpoint": {"uri": str(checkpoints), "intervalSteps": args.eval_every, "intervalSeconds": 0},
            "workers": workers,
            "backoffLimit": 0,
            "cleanPodPolicy": "None",
        },
    }


class Cluster:
    """`ttj local-cluster` and `ttj operator` as processes, and the official client on the cluster."""

    def __init__(self, workdir: Path, args: argparse.Namespace) -> None:
        self.workdir = workdir
        self.kubeconfig = workdir / "kubeconfig"
        self.processes: list[subprocess.Popen[bytes]] = []
        options = [option for pool in pools(args.step_seconds, args.fast_speed) for option in ("--pool", pool)]
        self._spawn(
            "local-cluster",
            "local-cluster",
            "--kubeconfig",
            str(self.kubeconfig),
            "--state-dir",
            str(workdir / "state"),
            "--program-path",
            str(PROGRAMS),
            *options,
        )
        deadline = time.monotonic() + 120
        while not self.kubeconfig.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the local cluster did not start; see {workdir / 'local-cluster.log'}")
            time.sleep(0.2)
        from kubernetes import client, config

        from ttj.api import crd

        config.load_kube_config(config_file=str(self.kubeconfig))
        self.client = client
        client.ApiextensionsV1Api().create_custom_resource_definition(crd.crd())
        deadline = time.monotonic() + 30
        while True:
            try:
                client.CustomObjectsApi().list_cluster_custom_object(GROUP, VERSION, PLURAL)
                break
            except client.ApiException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self._spawn(
            "operator",
            "operator",
            "--all-namespaces",
            "--metrics-port",
            "0",
            "--liveness",
            "none",
            "--lease-duration",
            "15",
            "--node-grace",
            "10",
        )

    def _spawn(self, log: str, *argv: str) -> None:
        out = open(self.workdir / f"{log}.log", "wb")  # noqa: SIM115 - lives as long as the process
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1"}
        self.processes.append(
            subprocess.Popen(
                [sys.executable, "-m", "ttj", *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        )

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()

    def alive(self) -> None:
        for process in self.processes:
            if process.poll() is not None:
                raise RuntimeError(f"{process.args!r} exited with {process.returncode}; logs in {self.workdir}")

    def job(self, name: str) -> dict[str, Any]:
        custom = self.client.CustomObjectsApi()
        return cast(dict[str, Any], custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name))

    def run(self, run: Run, args: argparse.Namespace) -> None:
        body = manifest(run, args, self.workdir / "checkpoints" / run.name)
        name = body["metadata"]["name"]
        custom = self.client.CustomObjectsApi()
        custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, body)
        started = time.monotonic()
        while time.monotonic() - started < args.timeout:
            self.alive()
            status = self.job(name).get("status") or {}
            progress = status.get("progress") or {}
            groups = {g["name"]: g["stepsPerSecond"] for g in status.get("workerGroups") or [] if "stepsPerSecond" in g}
            at = round(time.monotonic() - started, 2)
            run.samples.append((at, progress.get("globalStep", 0), progress.get("stepsPerSecond"), groups))
            run.phase = status.get("phase", "")
            if run.phase in ("Succeeded", "Failed"):
                break
            time.sleep(1.0)
        run.seconds = round(time.monotonic() - started, 1)
        run.evaluations, run.factors = read_logs(self.workdir / "state" / "pods", name)
        custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)
        core = self.client.CoreV1Api()
        deadline = time.monotonic() + 120
        while core.list_namespaced_pod(NAMESPACE, label_selector=job_selector(name)).items:
            if time.monotonic() > deadline:
                break
            time.sleep(1.0)


def read_logs(pods: Path, job: str) -> tuple[list[tuple[int, float, float]], dict[str, list[tuple[int, float]]]]:
    """The chief's evaluations and every worker's logged learning-rate factors, from the pods' logs."""
    evaluations: dict[int, tuple[int, float, float]] = {}
    factors: dict[str, list[tuple[int, float]]] = {}
    for log in sorted(pods.glob(f"{NAMESPACE}_{job}-worker-*/trainer.log")):
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if entry.get("msg") == "evaluated":
                metrics = entry["metrics"]
                evaluations[int(entry["step"])] = (int(entry["step"]), metrics["loss"], metrics.get("accuracy", 0.0))
            elif entry.get("msg") == "training" and "scale" in entry:
                factors.setdefault(entry["pod"], []).append((int(entry["global_step"]), float(entry["scale"])))
    return [evaluations[step] for step in sorted(evaluations)], factors


def loss_at(run: Run, step: int) -> float | None:
    """The held-out loss of the first evaluation at or after ``step``."""
    return next((loss for at, loss, _ in run.evaluations if at >= step), None)


def table(runs: list[Run], marks: list[int]) -> str:
    head = f"{'run':<14}{'phase':<11}{'seconds':>8}{'steps/s':>9}" + "".join(f"{'@' + str(m):>8}" for m in marks)
    lines = [head + f"{'final':>8}{'acc':>7}"]
    for run in runs:
        rates = [s[2] for s in run.samples if s[2]]
        rate = sorted(rates)[len(rates) // 2] if rates else 0.0
        cells = "".join(f"{v:>8.4f}" if (v := loss_at(run, m)) is not None else f"{'-':>8}" for m in marks)
        final = run.evaluations[-1] if run.evaluations else (0, float("nan"), float("nan"))
        lines.append(
            f"{run.name:<14}{run.phase:<11}{run.seconds:>8.0f}{rate:>9.2f}{cells}{final[1]:>8.4f}{final[2]:>7.3f}"
        )
    return "\n".join(lines)


def settings_title(settings: dict[str, Any]) -> str:
    return (
        f"lr {settings['learning_rate']}, seed {settings['seed']}, batch {settings['batch']}, "
        f"{settings['step_seconds']} s/step at speed 1"
    )


def draw(panels: list[tuple[dict[str, Any], list[Run]]], path: Path) -> None:
    """One panel per set of runs (its settings above it), loss vs global step, two to a row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(2, len(panels))
    rows = -(-len(panels) // columns)
    figure, grid = plt.subplots(rows, columns, figsize=(6.2 * columns, 4.2 * rows), squeeze=False, sharey=True)
    axes = [axis for row in grid for axis in row]
    for spare in axes[len(panels) :]:
        spare.set_visible(False)
    styles = {"uniform": ("black", "-"), "updateShare": ("tab:blue", "-"), "activeWorkers": ("tab:orange", "--")}
    for axis, (settings, runs) in zip(axes, panels, strict=False):
        fast = settings["fast_speed"]
        labels = {
            "uniform": f"uniform: {WORKERS} × speed 1",
            "updateShare": f"mixed 2 × 1 + 2 × {fast:g}, updateShare",
            "activeWorkers": f"mixed 2 × 1 + 2 × {fast:g}, activeWorkers",
        }
        for run in runs:
            color, line = styles.get(run.name, ("gray", ":"))
            steps = [step for step, _, _ in run.evaluations]
            losses = [loss for _, loss, _ in run.evaluations]
            axis.plot(steps, losses, line, color=color, marker="o", markersize=3, label=labels.get(run.name, run.name))
        axis.set_xlabel("global step")
        axis.set_yscale("log")
        axis.set_title(f"small CNN, synthetic data; {settings_title(settings)}", fontsize=9)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    for row in grid:
        row[0].set_ylabel("held-out loss (cross-entropy)")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)


def load_runs(path: Path) -> tuple[dict[str, Any], list[Run]]:
    """A --json file of an earlier invocation: its settings and runs."""
    saved = json.loads(path.read_text(encoding="utf-8"))
    runs = []
    for entry in saved["runs"]:
        run = Run(**entry)
        run.evaluations = [(int(step), float(loss), float(accuracy)) for step, loss, accuracy in run.evaluations]
        runs.append(run)
    return saved["settings"], runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="trainSteps of every job")
    parser.add_argument("--seed", type=int, default=7, help="the jobs' seed (initial weights, the data's classes)")
    parser.add_argument("--eval-every", type=int, default=20, help="checkpoint (and evaluate) every this many steps")
    parser.add_argument("--batch", type=int, default=32, help="per-worker batch size")
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--step-seconds", type=float, default=1.2, help="simulated GPU seconds a step at speed 1")
    parser.add_argument("--fast-speed", type=float, default=3.0)
    parser.add_argument("--runs", default="uniform,updateShare,activeWorkers")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a job may take")
    parser.add_argument("--png", type=Path, default=ROOT / "docs" / "img" / "mixed_fleet_loss.png")
    parser.add_argument("--json", type=Path, default=None, help="write the settings and the runs here")
    parser.add_argument("--draw", type=Path, nargs="+", default=None, help="only draw these --json files, a panel each")
    args = parser.parse_args()
    if args.draw:
        draw([load_runs(path) for path in args.draw], args.png)
        print(f"figure: {args.png}")
        return 0
    kinds = {
        "uniform": Run("uniform", "activeWorkers", mixed=False),
        "updateShare": Run("updateShare", "updateShare", mixed=True),
        "activeWorkers": Run("activeWorkers", "activeWorkers", mixed=True),
    }
    runs = [kinds[name] for name in args.runs.split(",")]
    workdir = Path(tempfile.mkdtemp(prefix="ttj-mixed-fleet-"))
    cluster = Cluster(workdir, args)
    try:
        for run in runs:
            cluster.run(run, args)
            print(f"{run.name}: {run.phase} in {run.seconds} s, {len(run.evaluations)} evaluations", flush=True)
    finally:
        cluster.stop()
        print(f"work directory (logs, checkpoints): {workdir}")
    marks = [m for m in (100, 200, 300, 400, 600) if m < args.steps]
    print(table(runs, marks))
    settings = {
        "steps": args.steps,
        "seed": args.seed,
        "eval_every": args.eval_every,
        "batch": args.batch,
        "learning_rate": args.learning_rate,
        "step_seconds": args.step_seconds,
        "fast_speed": args.fast_speed,
    }
    if args.json is not None:
        saved = {"settings": settings, "runs": [asdict(run) for run in runs]}
        args.json.write_text(json.dumps(saved, indent=1), encoding="utf-8")
    draw([(settings, runs)], args.png)
    print(f"figure: {args.png}")
    return 0 if all(run.phase == "Succeeded" for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
