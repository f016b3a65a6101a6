"""Many seeded runs: configurations side by side, policies on the same traces, the check against ICAC'19."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ttj.simulate.engine import Policy, PreemptionTrace, RunResult, SimJob, simulate_run
from ttj.simulate.fit import FittedModel
from ttj.simulate.icac19 import ICAC19_TRAIN_STEPS, TrainingData
from ttj.simulate.planner_policy import PlannerPolicy
from ttj.simulate.policies import PaperStaticPolicy, TFJobLikePolicy
from ttj.simulate.prices import ICAC19_PRICE_TABLE, price_per_hour
from ttj.simulate.report import MeasuredSummary, Summary, measured_summaries, summarize, wilson_interval

#: Policy name on the command line → a fresh policy per run (the planner adapter keeps a picture).
POLICIES: dict[str, Callable[[], Policy]] = {
    "ttj": PlannerPolicy,
    "tfjob": TFJobLikePolicy,
    "paper": PaperStaticPolicy,
}

#: Policy name on the command line → the name its results carry.
POLICY_LABELS: dict[str, str] = {
    "ttj": PlannerPolicy.name,
    "tfjob": TFJobLikePolicy.name,
    "paper": PaperStaticPolicy.name,
}

ACCELERATOR_ALIASES: dict[str, str] = {
    "k80": "nvidia-tesla-k80",
    "p100": "nvidia-tesla-p100",
    "v100": "nvidia-tesla-v100",
    "t4": "nvidia-tesla-t4",
    "p4": "nvidia-tesla-p4",
    "l4": "nvidia-l4",
    "a100": "nvidia-tesla-a100",
}


def accelerator_name(text: str) -> str:
    return ACCELERATOR_ALIASES.get(text.lower(), text)


@dataclass(frozen=True)
class Study:
    fitted: FittedModel
    runs: int = 500
    seed: int = 1
    lifetimes: str = "pooled"  # or "measured"
    price_table: str = ICAC19_PRICE_TABLE
    #: what each periodic checkpoint costs the chief (seconds of not training); also what it reports
    checkpoint_write_s: float = 0.0
    #: runs at each end of an interval (the first of the same traces): the ends are ratios on paired runs
    interval_runs: int = 100

    def run(
        self, job: SimJob, policy: str, *, throughput: str = "central", band: str = "central", count: int | None = None
    ) -> list[RunResult]:
        """The first ``count`` (default ``runs``) seeded runs; ``throughput`` and ``band`` pick the ends of the
        model's intervals."""
        make = POLICIES[policy]
        distribution = self.fitted.lifetimes(job.accelerator, job.provisioning, self.lifetimes, band)
        sigma = self.fitted.throughput.noise_sigma
        model = self.fitted.throughput.with_bound(throughput)
        return [
            simulate_run(
                job,
                make(),
                PreemptionTrace(self.seed, index, distribution, sigma),
                model,
                startup_s=self.fitted.startup_s,
                price_table=self.price_table,
                checkpoint_write_s=self.checkpoint_write_s,
            )
            for index in range(self.runs if count is None else count)
        ]

    def summary(self, job: SimJob, policy: str, *, intervals: bool = True) -> Summary:
        """The runs' summary; with ``intervals`` also the time and cost at the ends of the throughput interval
        and the completion at the ends of the revocation band, on the same traces."""
        results = self.run(job, policy)
        central = summarize(job.label, job.workers, results)
        prediction = self.fitted.throughput.predict(job.workers, job.accelerator, job.ps_replicas)
        notes = list(prediction.why)
        if job.provisioning != "on-demand":
            revocations = self.fitted.revocation_summary(job.accelerator, self.lifetimes)
            if not revocations.trusted:
                notes.append(
                    f"revocation rates of {job.accelerator} rest on {revocations.revocations} revocations of "
                    f"{revocations.vms} VMs ({revocations.basis}): too few to trust"
                )
        extra: dict[str, Any] = {
            "throughput_steps_s": prediction.central,
            "throughput_low_steps_s": prediction.low,
            "throughput_high_steps_s": prediction.high,
            "extrapolated": prediction.extrapolated,
            "notes": tuple(notes),
        }
        if intervals:
            paired = min(self.interval_runs, self.runs)
            same = results[:paired]
            slow = self.run(job, policy, throughput="low", count=paired)
            fast = self.run(job, policy, throughput="high", count=paired)
            # each end as a ratio to the same traces at the central throughput, applied to the full means
            extra.update(
                time_low_s=central.time_mean_s * _ratio(fast, same, "time_s"),
                time_high_s=central.time_mean_s * _ratio(slow, same, "time_s"),
                cost_low_usd=central.cost_mean_usd
                * min(_ratio(fast, same, "cost_usd"), _ratio(slow, same, "cost_usd")),
                cost_high_usd=central.cost_mean_usd
                * max(_ratio(fast, same, "cost_usd"), _ratio(slow, same, "cost_usd")),
            )
            done = sum(1 for r in results if r.succeeded)
            low, high = wilson_interval(done, len(results))
            if job.provisioning != "on-demand":
                worse = self.run(job, policy, band="low", count=paired)
                better = self.run(job, policy, band="high", count=paired)
                low = min(low, wilson_interval(sum(1 for r in worse if r.succeeded), len(worse))[0])
                high = max(high, wilson_interval(sum(1 for r in better if r.succeeded), len(better))[1])
            extra.update(completion_low=low, completion_high=high)
        return dataclasses.replace(central, **extra)

    def compare(self, jobs: Sequence[SimJob], policies: Sequence[str]) -> list[Summary]:
        """Every configuration under every policy; policies of one configuration share its traces."""
        return [self.summary(job, policy) for job in jobs for policy in policies]

    def validate(self, template: SimJob, data: TrainingData) -> list[tuple[MeasuredSummary, Summary]]:
        """The paper's static policy on every measured configuration, next to the measured figures.

        Always at the paper's prices (Table II), whatever table the comparison uses.
        """
        paper_prices = dataclasses.replace(self, price_table=ICAC19_PRICE_TABLE)
        spec = template.spec.model_copy(deep=True)
        spec.train_steps = ICAC19_TRAIN_STEPS
        base = SimJob(template.name, spec)
        pairs = []
        k80_on_demand = price_per_hour("nvidia-tesla-k80", "on-demand", ICAC19_PRICE_TABLE)
        for measured in measured_summaries(data, k80_on_demand):
            job = base.with_cluster(
                workers=measured.workers, accelerator="nvidia-tesla-k80", provisioning=measured.provisioning
            )
            if measured.workers == 1:
                job = job.single_gpu()
            pairs.append((measured, paper_prices.summary(job, "paper", intervals=False)))
        return pairs


def grid(
    template: SimJob, workers: Sequence[int], accelerators: Sequence[str], provisionings: Sequence[str]
) -> list[SimJob]:
    return [
        template.with_cluster(workers=n, accelerator=a, provisioning=p)
        for a in accelerators
        for p in provisionings
        for n in workers
    ]


def _ratio(results: Sequence[RunResult], reference: Sequence[RunResult], field: str) -> float:
    """Mean of ``field`` over the completed ``results`` against the same over the completed ``reference``."""
    ours = [float(getattr(r, field)) for r in results if r.succeeded]
    theirs = [float(getattr(r, field)) for r in reference if r.succeeded]
    if not ours or not theirs:
        return math.nan
    return (sum(ours) / len(ours)) / (sum(theirs) / len(theirs))
