"""Adaptive vs fixed checkpoint interval on the what-if simulator, on the same preemption traces.

A chief lost without a checkpoint on SIGTERM (the TFJob-like restart: no preemption notice used) rolls
training back to its last periodic checkpoint, and every checkpoint keeps the chief from training while
it is written. The fixed interval is the spec's (intervalSeconds, intervalSteps); the adaptive one is the
operator's planner stage (``ttj.planner.stages.checkpoint_interval.choose_interval``: Young-Daly from the chief
node's hazard at its age, from the ICAC'19 lifetimes, and the write time), recomputed as the chief's VM
ages or changes. Same seeded traces for every variant. Run from the repository root:

    .venv/bin/python bench/checkpoint_interval.py [--runs 400] [--seed 2026] [--write-seconds 2]

Prints, per job and interval: completion, steps lost to rollbacks, steps spent writing checkpoints,
checkpoints written, time overhead (mean T/T0 - 1, T0 the same run without revocations or checkpoints),
and adaptive / fixed ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence

from ttj.api.models import TransientTrainingJobSpec
from ttj.planner.stages.checkpoint_interval import choose_interval
from ttj.simulate.engine import CheckpointIntervalChoice, PreemptionTrace, RunResult, SimJob, simulate_run
from ttj.simulate.fit import FittedModel, fit
from ttj.simulate.icac19 import load_training_data
from ttj.simulate.policies import TFJobLikePolicy
from ttj.simulate.report import pct, render_table
from ttj_contract import Provisioning


def job(steps: int, workers: int, interval_steps: int, interval_seconds: int) -> SimJob:
    spec = TransientTrainingJobSpec.model_validate(
        {
            "model": "resnet32",
            "dataset": "cifar10",
            "trainSteps": steps,
            "backoffLimit": 1000,
            "checkpoint": {
                "uri": "gs://bench/ckpt",
                "intervalSteps": interval_steps,
                "intervalSeconds": interval_seconds,
                "adaptive": True,
                "minIntervalSeconds": 30,
                "maxIntervalSeconds": 3600,
            },
            "workers": {"replicas": workers, "acceleratorType": "nvidia-tesla-k80", "provisioning": "preemptible"},
        }
    )
    return SimJob(f"resnet32-{steps // 1000}k", spec)


def adaptive(spec: TransientTrainingJobSpec) -> CheckpointIntervalChoice:
    def interval(chief_age_s: float, provisioning: str, accelerator: str, write_s: float) -> float:
        chosen = choose_interval(
            spec,
            write_seconds=write_s,
            provisioning=Provisioning(provisioning),
            accelerator=accelerator,
            node_age_s=chief_age_s,
            active_workers=spec.workers.replicas,
        )
        return float(chosen.seconds)

    return interval


def runs(
    fitted: FittedModel, sim: SimJob, n: int, seed: int, *, write_s: float, choice: CheckpointIntervalChoice | None
) -> list[RunResult]:
    lifetimes = fitted.lifetimes(sim.accelerator, sim.provisioning)
    return [
        simulate_run(
            sim,
            TFJobLikePolicy(),
            PreemptionTrace(seed, index, lifetimes, fitted.throughput.noise_sigma),
            fitted.throughput,
            startup_s=fitted.startup_s,
            checkpoint_write_s=write_s,
            checkpoint_interval=choice,
        )
        for index in range(n)
    ]


def figures(results: Sequence[RunResult]) -> dict[str, float]:
    done = [r for r in results if r.succeeded]
    return {
        "done": len(done) / len(results),
        "lost": statistics.fmean(r.steps_lost for r in results),
        "writing": statistics.fmean(r.checkpoint_overhead_steps for r in results),
        "checkpoints": statistics.fmean(r.checkpoints for r in results),
        "overhead": statistics.fmean(r.time_s / r.baseline_time_s - 1 for r in done),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument(
        "--write-seconds",
        default="2,20",
        help="checkpoint write times to compare, comma-separated [2 s (ResNet-32 to GCS), 20 s (a large model)]",
    )
    args = parser.parse_args()
    started = time.perf_counter()
    fitted = fit(load_training_data())
    rows: list[list[str]] = []
    for write_s, steps, workers in (
        (float(w), steps, 4) for w in args.write_seconds.split(",") for steps in (64_000, 640_000)
    ):
        variants = {
            "fixed 500 steps / 300 s (spec defaults)": (job(steps, workers, 500, 300), None),
            "fixed 300 s": (job(steps, workers, 0, 300), None),
        }
        base = job(steps, workers, 0, 300)
        adaptive_figures = figures(
            runs(fitted, base, args.runs, args.seed, write_s=write_s, choice=adaptive(base.spec))
        )
        for label, (sim, choice) in variants.items():
            fixed = figures(runs(fitted, sim, args.runs, args.seed, write_s=write_s, choice=choice))
            for name, f in ((label, fixed), ("adaptive (Young-Daly, 30-3600 s)", adaptive_figures)):
                rows.append(
                    [
                        f"{steps // 1000}K steps, K80 preemptible x{workers}, write {write_s:g} s",
                        name,
                        pct(f["done"], signed=False),
                        f"{f['lost']:.0f}",
                        f"{f['writing']:.0f}",
                        f"{f['lost'] + f['writing']:.0f}",
                        f"{f['checkpoints']:.1f}",
                        pct(f["overhead"]),
                    ]
                )
            ratio = {k: adaptive_figures[k] / fixed[k] if fixed[k] else float("nan") for k in fixed}
            total = (adaptive_figures["lost"] + adaptive_figures["writing"]) / (fixed["lost"] + fixed["writing"])
            rows.append(
                [
                    "",
                    f"ratio adaptive / {label}",
                    "",
                    f"{ratio['lost']:.2f}",
                    f"{ratio['writing']:.2f}",
                    f"{total:.2f}",
                    f"{ratio['checkpoints']:.2f}",
                    f"{ratio['overhead']:.2f}",
                ]
            )
    headers = ["job", "interval", "done", "steps lost", "steps writing", "lost+writing", "checkpoints", "time overhead"]
    print(f"tfjob-like restarts (no SIGTERM checkpoint), {args.runs} runs, seed {args.seed}")
    print(render_table(headers, rows))
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
