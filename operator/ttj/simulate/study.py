"""Many seeded runs: configurations side by side, policies on the same traces, the check against ICAC'19."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ttj.simulate.engine import Policy, PreemptionTrace, RunResult, SimJob, simulate_run
from ttj.simulate.fit import FittedModel
from ttj.simulate.icac19 import ICAC19_TRAIN_STEPS, TrainingData
from ttj.simulate.planner_policy import PlannerPolicy
from ttj.simulate.policies import PaperStaticPolicy, TFJobLikePolicy
from ttj.simulate.prices import ICAC19_PRICE_TABLE
from ttj.simulate.report import MeasuredSummary, Summary, measured_summaries, summarize

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

    def run(self, job: SimJob, policy: str) -> list[RunResult]:
        make = POLICIES[policy]
        distribution = self.fitted.lifetimes(job.accelerator, job.provisioning, self.lifetimes)
        sigma = self.fitted.throughput.noise_sigma
        return [
            simulate_run(
                job,
                make(),
                PreemptionTrace(self.seed, index, distribution, sigma),
                self.fitted.throughput,
                startup_s=self.fitted.startup_s,
                price_table=self.price_table,
            )
            for index in range(self.runs)
        ]

    def summary(self, job: SimJob, policy: str) -> Summary:
        return summarize(job.label, job.workers, self.run(job, policy))

    def compare(self, jobs: Sequence[SimJob], policies: Sequence[str]) -> list[Summary]:
        """Every configuration under every policy; policies of one configuration share its traces."""
        return [self.summary(job, policy) for job in jobs for policy in policies]

    def validate(self, template: SimJob, data: TrainingData) -> list[tuple[MeasuredSummary, Summary]]:
        """The paper's static policy on every measured configuration, next to the measured figures.

        Always at the paper's prices (Table II), whatever table the comparison uses.
        """
        paper_prices = Study(self.fitted, self.runs, self.seed, self.lifetimes, ICAC19_PRICE_TABLE)
        spec = template.spec.model_copy(deep=True)
        spec.train_steps = ICAC19_TRAIN_STEPS
        base = SimJob(template.name, spec)
        pairs = []
        for measured in measured_summaries(data):
            job = base.with_cluster(
                workers=measured.workers, accelerator="nvidia-tesla-k80", provisioning=measured.provisioning
            )
            pairs.append((measured, paper_prices.summary(job, "paper")))
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
