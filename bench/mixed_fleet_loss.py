"""Loss vs global step of a mixed GPU fleet against a uniform one, on the local cluster with two GPU speeds.

    .venv/bin/python bench/mixed_fleet_loss.py [--steps 300] [--step-seconds 1.2] [--fast-speed 3]
        [--seed 7 | --seeds 7,8,9] [--learning-rate 0.01] [--momentum 0.9] [--batch 32]
        [--runs uniform,updateShare,activeWorkers,downWeight] [--png docs/img/mixed_fleet_loss.png] [--json FILE]
    .venv/bin/python bench/mixed_fleet_loss.py --draw FILE.json [FILE.json ...] [--merge] [--png ...]

One `ttj local-cluster` (an on-demand CPU pool for the parameter server, a spot T4 pool at speed 1 and a spot
L4 pool at ``--fast-speed``, both with ``--step-seconds`` of simulated GPU time per step at speed 1) and the
real operator (`ttj operator`); then, one after the other, jobs of four workers that train the built-in
small CNN on synthetic data (bench/programs/heldout_small_cnn.py: the built-in program plus a held-out
evaluation set) with the same batch, learning rate, momentum and step budget, every configuration once per
seed (the seed picks the initial weights and the classes; seed by seed, so a change of the machine's load
falls on every configuration alike):

  uniform        4 T4 workers (speed 1)
  updateShare    2 T4 + 2 L4 (worker groups l4 then t4), learningRateScaling: updateShare
  activeWorkers  the same mixed fleet, learningRateScaling: activeWorkers
  downWeight     updateShare with the share clamped to [0.25, 1]: slow workers take smaller steps, fast
                 ones never larger (the bench program's update_share_bounds argument)
  upAndDown      updateShare with the share clamped to [0.25, 4], whatever the trainer's clamp is

The chief checkpoints every ``--eval-every`` steps and evaluates the held-out set after each checkpoint; the
curves are those evaluations (read from the chief's log, at full precision). Also recorded: the job's and each
group's steps/s as status shows them (status.progress.stepsPerSecond, status.workerGroups[].stepsPerSecond),
and each worker's learning-rate factor as its log says it (every 100 global steps). Prints a table per run
and one per configuration (mean and min–max over the seeds), writes the JSON and draws the PNG (matplotlib,
the ``viz`` extra): the uniform fleet's band (min–max over the seeds) and each mixed configuration's mean and
band against global step; ``--draw`` draws saved JSON files, a panel each, two to a row (``--merge``: one
panel of all their runs, e.g. the seeds of two invocations).
"""

from __future__ import annotations

import argparse
import itertools
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

from ttj_contract import GROUP, LABEL_WORKER_GROUP, PLURAL, VERSION, job_selector

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "bench" / "programs"
NAMESPACE = "default"
WORKERS = 4


@dataclass
class Run:
    name: str
    scaling: str
    mixed: bool
    seed: int = 0
    #: updateShare's share clamp for this run ("LOW,HIGH"), or "" for the trainer's own
    share_bounds: str = ""
    seconds: float = 0.0
    phase: str = ""
    #: (global step, held-out loss, held-out accuracy) of every evaluation, in order
    evaluations: list[tuple[int, float, float]] = field(default_factory=list)
    #: status samples: (seconds since the job was created, global step, job steps/s, {group: steps/s})
    samples: list[tuple[float, int, float | None, dict[str, float]]] = field(default_factory=list)
    #: the factor each worker logged with its training lines: {pod: [(global step, factor)]}
    factors: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    #: each worker pod's group (its worker-group label; "" in the uniform fleet)
    groups: dict[str, str] = field(default_factory=dict)


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
        "metadata": {"name": f"lr-{run.name.lower()}-s{run.seed}", "namespace": NAMESPACE},
        "spec": {
            "program": {"entrypoint": "heldout_small_cnn:program", "args": program_args(run, args)},
            "trainSteps": args.steps,
            "batchSize": args.batch,
            "learningRateScaling": run.scaling,
            "checkpoint": {"uri": str(checkpoints), "intervalSteps": args.eval_every, "intervalSeconds": 0},
            "workers": workers,
            "backoffLimit": 0,
            "cleanPodPolicy": "None",
        },
    }


def program_args(run: Run, args: argparse.Namespace) -> dict[str, str]:
    values = {
        "model": "small-cnn",
        "dataset": "synthetic",
        "learning_rate": str(args.learning_rate),
        "momentum": str(args.momentum),
        "seed": str(run.seed),
    }
    if run.share_bounds:
        values["update_share_bounds"] = run.share_bounds
    return values


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
        body = manifest(run, args, self.workdir / "checkpoints" / f"{run.name}-s{run.seed}")
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
        core = self.client.CoreV1Api()
        for pod in core.list_namespaced_pod(NAMESPACE, label_selector=job_selector(name)).items:
            run.groups[pod.metadata.name] = (pod.metadata.labels or {}).get(LABEL_WORKER_GROUP, "")
        custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)
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
    """The held-out loss at ``step``, interpolated linearly between the evaluations either side (the chief
    evaluates at the first global step it sees past each interval, a few steps late under asynchronous
    updates, so the runs' evaluations fall on different steps); None outside the evaluated steps."""
    for (before, low, _), (after, high, _) in itertools.pairwise(run.evaluations):
        if before <= step <= after:
            return low + (high - low) * (step - before) / (after - before) if after > before else high
    return next((loss for at, loss, _ in run.evaluations if at == step), None)


def median_rate(run: Run) -> float:
    rates = [sample[2] for sample in run.samples if sample[2]]
    return sorted(rates)[len(rates) // 2] if rates else 0.0


def group_rates(run: Run) -> str:
    """Each group's median steps/s as status showed it."""
    names = sorted({name for sample in run.samples for name in sample[3]})
    medians = []
    for name in names:
        rates = sorted(sample[3][name] for sample in run.samples if sample[3].get(name))
        medians.append(f"{name} {rates[len(rates) // 2]:.2f}")
    return ", ".join(medians) or "-"


def factor_range(run: Run) -> str:
    """The logged factors, min–max, of each group's workers."""
    by_group: dict[str, list[float]] = {}
    for pod, logged in run.factors.items():
        by_group.setdefault(run.groups.get(pod, "?"), []).extend(factor for _, factor in logged)
    cells = [f"{group or 'all'} {min(v):.2f}–{max(v):.2f}" for group, v in sorted(by_group.items()) if v]
    return ", ".join(cells) or "-"


def table(runs: list[Run], marks: list[int]) -> str:
    head = f"{'run':<14}{'seed':>5}{'phase':>11}{'seconds':>8}{'steps/s':>9}" + "".join(
        f"{'@' + str(m):>8}" for m in marks
    )
    lines = [head + f"{'final':>8}{'acc':>7}  groups steps/s; factors"]
    for run in runs:
        cells = "".join(f"{v:>8.4f}" if (v := loss_at(run, m)) is not None else f"{'-':>8}" for m in marks)
        final = run.evaluations[-1] if run.evaluations else (0, float("nan"), float("nan"))
        lines.append(
            f"{run.name:<14}{run.seed:>5}{run.phase:>11}{run.seconds:>8.0f}{median_rate(run):>9.2f}{cells}"
            f"{final[1]:>8.4f}{final[2]:>7.3f}  {group_rates(run)}; {factor_range(run)}"
        )
    return "\n".join(lines)


def by_configuration(runs: list[Run]) -> dict[str, list[Run]]:
    configurations: dict[str, list[Run]] = {}
    for run in runs:
        configurations.setdefault(run.name, []).append(run)
    return configurations


def final_loss(run: Run) -> float | None:
    return run.evaluations[-1][1] if run.evaluations else None


def spread(values: list[float | None]) -> str:
    """mean (min–max) of the known values."""
    known = [v for v in values if v is not None]
    if not known:
        return "-"
    return f"{sum(known) / len(known):.3f} ({min(known):.3f}–{max(known):.3f})"


def summary(runs: list[Run], marks: list[int], every: int) -> str:
    """Per configuration: the held-out loss at each mark and the final one, mean (min–max) over the seeds, and
    the mean absolute gap of its mean curve to the uniform fleet's (every evaluation mark)."""
    configurations = by_configuration(runs)
    grid = curve_marks(runs, every)
    uniform = mean_curve(configurations.get("uniform", []), grid)
    lines = []
    for name, group in configurations.items():
        cells = [f"@{m} {spread([loss_at(run, m) for run in group])}" for m in marks]
        gap = curve_gap(mean_curve(group, grid), uniform)
        lines.append(
            f"{name} (seeds {','.join(str(run.seed) for run in group)}): "
            + "; ".join(cells)
            + f"; final {spread([final_loss(run) for run in group])}"
            + (f"; mean |gap| to uniform's mean curve {gap:.3f}" if gap is not None and name != "uniform" else "")
        )
    return "\n".join(lines)


def curve_marks(runs: list[Run], every: int) -> list[int]:
    """The multiples of the evaluation interval between the first and the last step every run evaluated at."""
    evaluated = [run.evaluations for run in runs if run.evaluations]
    if not evaluated:
        return []
    first = max(evaluations[0][0] for evaluations in evaluated)
    return [m for m in range(every, min(e[-1][0] for e in evaluated) + 1, every) if m >= first]


def mean_curve(group: list[Run], grid: list[int]) -> list[float | None]:
    curve: list[float | None] = []
    for mark in grid:
        values = [v for run in group if (v := loss_at(run, mark)) is not None]
        curve.append(sum(values) / len(values) if values else None)
    return curve


def curve_gap(curve: list[float | None], reference: list[float | None]) -> float | None:
    pairs = [(a, b) for a, b in zip(curve, reference, strict=False) if a is not None and b is not None]
    return sum(abs(a - b) for a, b in pairs) / len(pairs) if pairs else None


def settings_title(settings: dict[str, Any]) -> str:
    seeds = settings.get("seeds") or [settings["seed"]]
    return (
        f"lr {settings['learning_rate']}, momentum {settings.get('momentum', 0.9)}, batch {settings['batch']}, "
        f"seeds {','.join(str(seed) for seed in seeds)}, {settings['step_seconds']} s/step at speed 1"
    )


STYLES = {
    "uniform": ("black", "-"),
    "updateShare": ("tab:blue", "-"),
    "activeWorkers": ("tab:orange", "--"),
    "downWeight": ("tab:green", "-."),
    "upAndDown": ("tab:purple", ":"),
}


def draw(panels: list[tuple[dict[str, Any], list[Run]]], path: Path) -> None:
    """One panel per set of runs (its settings above it), held-out loss vs global step, two to a row: the
    uniform fleet's band (min–max over its seeds, grey), each mixed configuration's mean over the seeds
    (a line) and its band (its colour, light); a configuration of one seed is its curve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(2, len(panels))
    rows = -(-len(panels) // columns)
    figure, grid = plt.subplots(rows, columns, figsize=(6.6 * columns, 4.6 * rows), squeeze=False, sharey=True)
    axes = [axis for row in grid for axis in row]
    for spare in axes[len(panels) :]:
        spare.set_visible(False)
    for axis, (settings, runs) in zip(axes, panels, strict=False):
        fast = settings["fast_speed"]
        labels = {
            "uniform": f"uniform: {WORKERS} × speed 1",
            "updateShare": f"mixed 2 × 1 + 2 × {fast:g}, updateShare",
            "activeWorkers": f"mixed 2 × 1 + 2 × {fast:g}, activeWorkers",
            "downWeight": f"mixed 2 × 1 + 2 × {fast:g}, share ≤ 1 (down-weight only)",
            "upAndDown": f"mixed 2 × 1 + 2 × {fast:g}, share in [0.25, 4]",
        }
        steps = curve_marks(runs, settings["eval_every"])
        for name, group in by_configuration(runs).items():
            color, line = STYLES.get(name, ("gray", ":"))
            per_run = [[loss_at(run, m) for m in steps] for run in group]
            known = [(m, [c[i] for c in per_run if c[i] is not None]) for i, m in enumerate(steps)]
            known = [(m, values) for m, values in known if values]
            xs = [m for m, _ in known]
            seeds = f" ({len(group)} seeds)" if len(group) > 1 else ""
            if len(group) > 1:
                low = [min(values) for _, values in known]
                high = [max(values) for _, values in known]
                if name == "uniform":
                    axis.fill_between(
                        xs, low, high, color="0.6", alpha=0.45, lw=0, label=f"{labels[name]}, min–max{seeds}"
                    )
                else:
                    axis.fill_between(xs, low, high, color=color, alpha=0.12, lw=0)
            means = [sum(values) / len(values) for _, values in known]
            label = labels.get(name, name) + (", mean" if len(group) > 1 else "") + seeds
            axis.plot(xs, means, line, color=color, marker="o", markersize=2.5, lw=1.4, label=label)
        axis.set_xlabel("global step")
        axis.set_yscale("log")
        axis.set_title(f"small CNN, synthetic data; {settings_title(settings)}", fontsize=8.5)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7.5)
    for row in grid:
        row[0].set_ylabel("held-out loss (cross-entropy)")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)


def load_runs(path: Path) -> tuple[dict[str, Any], list[Run]]:
    """A --json file of an earlier invocation: its settings and runs (a file of one seed: that seed's runs)."""
    saved = json.loads(path.read_text(encoding="utf-8"))
    runs = []
    for entry in saved["runs"]:
        run = Run(**{"seed": saved["settings"]["seed"], **entry})
        run.evaluations = [(int(step), float(loss), float(accuracy)) for step, loss, accuracy in run.evaluations]
        runs.append(run)
    return saved["settings"], runs


def merged(panels: list[tuple[dict[str, Any], list[Run]]]) -> tuple[dict[str, Any], list[Run]]:
    """Several invocations' runs as one set: the first one's settings, every seed."""
    settings = dict(panels[0][0])
    runs = [run for _, each in panels for run in each]
    settings["seeds"] = sorted({run.seed for run in runs})
    return settings, runs


KINDS = {
    "uniform": ("activeWorkers", False, ""),
    "updateShare": ("updateShare", True, ""),
    "activeWorkers": ("activeWorkers", True, ""),
    "downWeight": ("updateShare", True, "0.25,1"),
    "upAndDown": ("updateShare", True, "0.25,4"),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="trainSteps of every job")
    parser.add_argument("--seed", type=int, default=7, help="the jobs' seed (initial weights, the data's classes)")
    parser.add_argument("--seeds", default=None, help="several seeds, comma-separated (instead of --seed)")
    parser.add_argument("--eval-every", type=int, default=20, help="checkpoint (and evaluate) every this many steps")
    parser.add_argument("--batch", type=int, default=32, help="per-worker batch size")
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--momentum", type=float, default=0.9, help="the SGD optimizer's momentum")
    parser.add_argument("--step-seconds", type=float, default=1.2, help="simulated GPU seconds a step at speed 1")
    parser.add_argument("--fast-speed", type=float, default=3.0)
    parser.add_argument("--runs", default="uniform,updateShare,activeWorkers", help=f"of {', '.join(KINDS)}")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a job may take")
    parser.add_argument("--png", type=Path, default=ROOT / "docs" / "img" / "mixed_fleet_loss.png")
    parser.add_argument("--json", type=Path, default=None, help="write the settings and the runs here")
    parser.add_argument("--draw", type=Path, nargs="+", default=None, help="only draw these --json files, a panel each")
    parser.add_argument("--merge", action="store_true", help="with --draw: the files' runs in one panel (more seeds)")
    args = parser.parse_args()
    if args.draw:
        panels = [load_runs(path) for path in args.draw]
        if args.merge:
            panels = [merged(panels)]
        for settings, runs in panels:
            marks = [m for m in (100, 200, 300, 400, 600) if m < settings["steps"]]
            print(f"{settings_title(settings)}\n{table(runs, marks)}\n{summary(runs, marks, settings['eval_every'])}\n")
        draw(panels, args.png)
        print(f"figure: {args.png}")
        return 0
    seeds = [int(seed) for seed in args.seeds.split(",")] if args.seeds else [args.seed]
    names = args.runs.split(",")
    unknown = [name for name in names if name not in KINDS]
    if unknown:
        parser.error(f"unknown runs {', '.join(unknown)}; known: {', '.join(KINDS)}")
    runs = [
        Run(name, KINDS[name][0], KINDS[name][1], seed=seed, share_bounds=KINDS[name][2])
        for seed in seeds
        for name in names
    ]
    settings = {
        "steps": args.steps,
        "seed": seeds[0],
        "seeds": seeds,
        "eval_every": args.eval_every,
        "batch": args.batch,
        "learning_rate": args.learning_rate,
        "momentum": args.momentum,
        "step_seconds": args.step_seconds,
        "fast_speed": args.fast_speed,
    }
    workdir = Path(tempfile.mkdtemp(prefix="ttj-mixed-fleet-"))
    cluster = Cluster(workdir, args)
    done: list[Run] = []
    try:
        for run in runs:
            load = os.getloadavg()[0]
            cluster.run(run, args)
            done.append(run)
            print(
                f"{run.name} seed {run.seed}: {run.phase} in {run.seconds} s, {len(run.evaluations)} evaluations, "
                f"final loss {final_loss(run)}, load at start {load:.1f}",
                flush=True,
            )
            if args.json is not None:  # after every run, so an interrupted set keeps what it measured
                saved = {"settings": settings, "runs": [asdict(each) for each in done]}
                args.json.write_text(json.dumps(saved, indent=1), encoding="utf-8")
    finally:
        cluster.stop()
        print(f"work directory (logs, checkpoints): {workdir}")
    marks = [m for m in (100, 200, 300, 400, 600) if m < args.steps]
    print(table(done, marks))
    print(summary(done, marks, args.eval_every))
    draw([(settings, done)], args.png)
    print(f"figure: {args.png}")
    return 0 if all(run.phase == "Succeeded" for run in done) else 1


if __name__ == "__main__":
    sys.exit(main())
