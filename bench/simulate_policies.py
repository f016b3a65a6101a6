"""Policy benchmark on the what-if simulator: ttj's planner vs a TFJob-like policy vs the paper's static cluster.

Every policy replays the SAME seeded preemption traces (K80 preemptible lifetimes fitted on ICAC'19),
for the paper's job (ResNet-32, 64K steps, about 1-2 h) and a 10x longer one (640K steps, 5-20 h, so
the 24 h limit of preemptible VMs and repeated revocations come into play). Run from the repository root:

    .venv/bin/python bench/simulate_policies.py [--runs 1000] [--seed 2026]

Prints, per configuration and policy: completion rate, time p50/p95, cost per completed job, steps
lost, the time overhead of a run with exactly one revocation (the paper's Table IV), and the ratios
of the other policies to ttj's.
"""

from __future__ import annotations

import argparse
import time

from ttj.api.models import TransientTrainingJobSpec
from ttj.simulate.engine import SimJob
from ttj.simulate.fit import fit
from ttj.simulate.icac19 import load_training_data
from ttj.simulate.report import Summary, hours, pct, render_table, usd
from ttj.simulate.study import POLICY_LABELS, Study


def job(steps: int) -> SimJob:
    spec = TransientTrainingJobSpec.model_validate(
        {
            "model": "resnet32",
            "dataset": "cifar10",
            "trainSteps": steps,
            "checkpoint": {"uri": "gs://bench/ckpt", "intervalSteps": 4000, "intervalSeconds": 600},
            "workers": {"replicas": 4, "acceleratorType": "nvidia-tesla-k80", "provisioning": "preemptible"},
        }
    )
    return SimJob(f"resnet32-{steps // 1000}k", spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    study = Study(fit(load_training_data()), runs=args.runs, seed=args.seed)
    for steps in (64_000, 640_000):
        rows: list[list[str]] = []
        ratios: list[str] = []
        started = time.perf_counter()
        for workers in (2, 4, 8):
            config = job(steps).with_cluster(
                workers=workers, accelerator="nvidia-tesla-k80", provisioning="preemptible"
            )
            by_policy: dict[str, Summary] = {key: study.summary(config, key) for key in POLICY_LABELS}
            for s in by_policy.values():
                rows.append(
                    [
                        s.config,
                        s.policy,
                        pct(s.completion_rate, signed=False),
                        hours(s.time_p50_s),
                        hours(s.time_p95_s),
                        usd(s.cost_per_completed_usd),
                        f"{s.revocations_mean:.2f}",
                        f"{s.steps_lost_mean:.0f}",
                        pct(s.r1_time_overhead),
                        pct(s.time_overhead_per_revocation),
                    ]
                )
            ours = by_policy["ttj"]
            for key in ("tfjob", "paper"):
                other = by_policy[key]
                cost_ratio = other.cost_per_completed_usd / ours.cost_per_completed_usd
                ratios.append(
                    f"  {config.label}: {other.policy} / ttj — failures {1 - other.completion_rate:.1%} vs "
                    f"{1 - ours.completion_rate:.1%}, $/done job x{cost_ratio:.3f}, "
                    f"p95 time x{other.time_p95_s / ours.time_p95_s:.3f}"
                )
        elapsed = time.perf_counter() - started
        print(f"\n== ResNet-32, {steps} steps, K80 preemptible, {args.runs} runs per row, seed {args.seed} ==")
        print(
            render_table(
                ["configuration", "policy", "done", "p50 h", "p95 h", "$/done job", "revocations", "steps lost",
                 "r=1 time", "time/revocation"],
                rows,
            )
        )  # fmt: skip
        print("\n".join(ratios))
        print(f"  ({elapsed:.1f} s for {len(rows) * args.runs} simulated runs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
