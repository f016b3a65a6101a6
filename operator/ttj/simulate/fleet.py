"""``ttj simulate --plan``: the cheapest fleet (GPU types, counts, spot or on-demand) that meets a deadline.

The search space is every mix of at most ``max_gpus`` workers over ``groups`` = GPU type x provisioning,
using at most ``max_groups`` of them at once. It is bounded in three steps, each said in the output:

1. **Screen** (no simulation): each mix's throughput (the fitted model; a mixed fleet's per-type rates
   summed behind the PS, :meth:`ThroughputModel.predict_mix`) and price give its time and cost without a
   revocation. A mix that misses the deadline or the budget even so, at the fast end of the run noise, is
   dropped; so is a mix the PS saturates (one GPU fewer is within :data:`SATURATION_GAIN` as fast: more
   money, no speed).
2. **Branch and bound**: the rest are simulated in the order of that bound (cheapest first; fastest
   first when only a budget is given) until the next bound cannot beat the best plan found, or
   ``max_simulated`` candidates. The bound of a mix is its cost without revocations at the fast end of
   the noise, less :data:`BOUND_SLACK` (a revoked worker of a saturated fleet can save a little).
3. **Early rejection**: a candidate is simulated in batches; once the 95 % Wilson interval of its odds
   lies wholly below the confidence, it is rejected without the remaining runs.

A candidate meets the target when, over the seeded runs, the share of runs that succeed within the
deadline and the budget is at least the confidence; its Wilson interval is printed beside it. Runs go
through the discrete-event engine with the chosen policy (the operator's real planner by default); a
mixed fleet gives each slot its own GPU type, provisioning, price and lifetimes, and a replacement stays
in its slot's group. Groups pinned to another zone than the parameter servers (``--zones``, ``--ps-zone``) pay
for their cross-zone traffic on top (:mod:`ttj.simulate.zones`): in every run's cost, so in the screen, the
budget and the cost per done job.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

from ttj.preemption.lifetimes import LifetimeDistribution
from ttj.simulate.engine import PreemptionTrace, RunResult, SimJob, simulate_run
from ttj.simulate.fit import FittedModel, ThroughputPrediction
from ttj.simulate.prices import price_note, price_per_hour, price_table, ps_price_per_hour
from ttj.simulate.report import percentile, wilson_interval
from ttj.simulate.zones import RESNET32_PARAMETER_BYTES, GroupRate, Zones, cross_zone_usd_per_step, parse_zones

#: A GPU that adds less than this share of throughput is dominated: the PS is saturated.
SATURATION_GAIN = 0.01
#: The branch-and-bound's cost bound is the revocation-free cost less this share (see the module docstring).
BOUND_SLACK = 0.05
#: Runs per batch of the early rejection.
BATCH_RUNS = 25
#: The run noise's fast end used by the screen: this many standard deviations.
_NOISE_SIGMAS = 2.0

GROUPS_NOTE = (
    "each group holds its planned count (maxReplicas); slots fill in the groups' order, so raise a group's "
    "maxReplicas to let it take slots another cannot fill"
)


@dataclass(frozen=True, order=True)
class Group:
    """``count`` workers of one GPU type bought one way."""

    accelerator: str
    provisioning: str
    count: int

    @property
    def name(self) -> str:
        return f"{short_gpu(self.accelerator).lower()}-{self.provisioning}"

    @property
    def label(self) -> str:
        return f"{self.count} {short_gpu(self.accelerator)} {self.provisioning}"


def short_gpu(accelerator: str) -> str:
    return accelerator.removeprefix("nvidia-tesla-").removeprefix("nvidia-").upper()


@dataclass(frozen=True)
class Mix:
    groups: tuple[Group, ...]  # sorted, counts > 0

    @property
    def workers(self) -> int:
        return sum(g.count for g in self.groups)

    @property
    def label(self) -> str:
        return " + ".join(g.label for g in self.groups)

    @property
    def uniform(self) -> bool:
        return len(self.groups) == 1

    def counts_by_type(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for group in self.groups:
            counts[group.accelerator] = counts.get(group.accelerator, 0) + group.count
        return counts


@dataclass(frozen=True)
class Target:
    deadline_s: float | None
    budget_usd: float | None
    confidence: float

    def met_by(self, run: RunResult) -> bool:
        return (
            run.succeeded
            and (self.deadline_s is None or run.time_s <= self.deadline_s)
            and (self.budget_usd is None or run.cost_usd <= self.budget_usd)
        )

    def describe(self) -> str:
        parts = []
        if self.deadline_s is not None:
            parts.append(f"done within {self.deadline_s / 3600:.2f} h")
        if self.budget_usd is not None:
            parts.append(f"for at most ${self.budget_usd:.2f}")
        return f"{' and '.join(parts) or 'done'} with {self.confidence:.0%} confidence"


@dataclass(frozen=True)
class Screened:
    """A mix before simulation: its throughput and what it costs without a revocation."""

    mix: Mix
    throughput: ThroughputPrediction
    price_h: float  # workers and parameter servers
    ideal_time_s: float
    ideal_cost_usd: float


@dataclass(frozen=True)
class Evaluation:
    """A simulated candidate against the target."""

    mix: Mix
    runs: int
    met: int
    completed: int
    #: every run's cost, failed ones too, over the runs that succeed (a failed run has to be run again)
    cost_per_done_usd: float
    cost_p5_usd: float
    cost_p95_usd: float
    time_at_confidence_s: float  # the confidence-quantile of the time (a failed run counts as never)
    throughput: ThroughputPrediction
    rejected_early: bool = False
    #: the part of cost_per_done_usd that is cross-zone traffic (0 when no group is pinned away from the PS)
    cross_zone_usd: float = 0.0
    #: P(meet) on the first interval runs with the model at its slow end and revocations at the early end of
    #: their band, and at the fast and late ends
    odds_pessimistic: float = math.nan
    odds_optimistic: float = math.nan

    @property
    def odds(self) -> float:
        return self.met / self.runs if self.runs else math.nan

    @property
    def odds_interval(self) -> tuple[float, float]:
        return wilson_interval(self.met, self.runs)


@dataclass
class FleetPlan:
    target: Target
    space: str
    mixes: int
    pruned: dict[str, int]
    evaluated: list[Evaluation]
    best: Evaluation | None
    fastest: Evaluation | None
    reference: Evaluation | None
    stopped: str  # why the search stopped
    notes: list[str] = field(default_factory=list)


# --- the search space -------------------------------------------------------------------------------


def enumerate_mixes(
    accelerators: Sequence[str],
    provisionings: Sequence[str],
    max_gpus: int,
    max_groups: int,
    available: Mapping[tuple[str, str | None], int] | None = None,
) -> Iterator[Mix]:
    """Every mix of 1..``max_gpus`` workers over at most ``max_groups`` (type, provisioning) groups, with at
    most ``available[(type, provisioning)]`` workers of a group and ``available[(type, None)]`` of a type."""
    caps = dict(available or {})
    kinds = [
        (a, p) for a in accelerators for p in provisionings if caps.get((a, p), 1) > 0 and caps.get((a, None), 1) > 0
    ]
    for used in range(1, min(max_groups, len(kinds)) + 1):
        for chosen in combinations(kinds, used):
            for counts in _compositions(max_gpus, used):
                mix = Mix(tuple(sorted(Group(a, p, n) for (a, p), n in zip(chosen, counts, strict=True))))
                if _within(mix, caps):
                    yield mix


def _within(mix: Mix, caps: Mapping[tuple[str, str | None], int]) -> bool:
    if any(g.count > caps.get((g.accelerator, g.provisioning), g.count) for g in mix.groups):
        return False
    return all(n <= caps.get((a, None), n) for a, n in mix.counts_by_type().items())


def parse_available(text: str, resolve: Callable[[str], str]) -> dict[tuple[str, str | None], int]:
    """``t4:spot=2,l4=4`` → {(nvidia-tesla-t4, spot): 2, (nvidia-l4, None): 4}."""
    caps: dict[tuple[str, str | None], int] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        kind, _, count = part.partition("=")
        accelerator, _, provisioning = kind.partition(":")
        if not count.strip().isdigit() or provisioning not in ("", "spot", "preemptible", "on-demand"):
            raise ValueError(f"--available: expected TYPE[:PROVISIONING]=COUNT, e.g. t4:spot=2, not {part!r}")
        caps[(resolve(accelerator.strip()), provisioning or None)] = int(count)
    return caps


def _compositions(limit: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Tuples of ``parts`` positive integers summing to at most ``limit``."""
    if parts == 0:
        yield ()
        return
    for first in range(1, limit - parts + 2):
        for rest in _compositions(limit - first, parts - 1):
            yield (first, *rest)


# --- the planner's job for a mix -----------------------------------------------------------------


def preference_order(mix: Mix, context: PlanContext) -> list[Group]:
    """The groups as slots should be filled: transient before on-demand, each by dollars per step."""

    def dollars_per_step(group: Group) -> float:
        rate = context.fitted.throughput.predict(1, group.accelerator).central
        return price_per_hour(group.accelerator, group.provisioning, context.price_table) / rate

    return sorted(mix.groups, key=lambda g: (g.provisioning == "on-demand", dollars_per_step(g), g.name))


def mix_job(template: SimJob, mix: Mix, context: PlanContext) -> SimJob:
    """The job on ``mix``. A uniform mix is exactly ``with_cluster`` (the same runs as ``ttj simulate``);
    a mixed fleet starts its chief on an on-demand group if it has one, the safest place for it."""
    if mix.uniform:
        group = mix.groups[0]
        return template.with_cluster(
            workers=group.count, accelerator=group.accelerator, provisioning=group.provisioning
        )
    ordered = preference_order(mix, context)
    chief_first = sorted(ordered, key=lambda g: g.provisioning != "on-demand")
    hardware = tuple((g.accelerator, g.provisioning) for g in chief_first for _ in range(g.count))
    base = template.with_cluster(workers=mix.workers, accelerator=hardware[0][0], provisioning=hardware[0][1])
    return SimJob(base.name, base.spec, slot_hardware=hardware)


@dataclass
class PlanContext:
    template: SimJob
    fitted: FittedModel
    policy: str = "ttj"
    runs: int = 200
    seed: int = 1
    lifetimes: str = "pooled"
    price_table: str = "icac19-table2"
    interval_runs: int = 100
    zones: Zones = field(default_factory=Zones)
    _lifetime_cache: dict[tuple[str, str, str], LifetimeDistribution | None] = field(default_factory=dict)
    _results: dict[tuple[Mix, str, str], list[RunResult]] = field(default_factory=dict)

    def distribution(self, accelerator: str, provisioning: str, band: str) -> LifetimeDistribution | None:
        key = (accelerator, provisioning, band)
        if key not in self._lifetime_cache:
            self._lifetime_cache[key] = self.fitted.lifetimes(accelerator, provisioning, self.lifetimes, band)
        return self._lifetime_cache[key]

    def results(self, mix: Mix, count: int, *, throughput: str = "central", band: str = "central") -> list[RunResult]:
        """The first ``count`` seeded runs of ``mix`` (kept, so a longer look only adds runs)."""
        from ttj.simulate.study import POLICIES

        key = (mix, throughput, band)
        done = self._results.setdefault(key, [])
        job = mix_job(self.template, mix, self)
        model = self.fitted.throughput.with_bound(throughput)
        sigma = self.fitted.throughput.noise_sigma
        if job.slot_hardware:
            uniform = None
            per_slot = {slot: self.distribution(a, p, band) for slot, (a, p) in enumerate(job.slot_hardware)}
        else:
            uniform, per_slot = self.distribution(job.accelerator, job.provisioning, band), {}
        per_step = self.cross_zone_usd_per_step(mix)
        for index in range(len(done), count):
            trace = PreemptionTrace(self.seed, index, uniform, sigma, slot_lifetimes=per_slot)
            run = simulate_run(
                job,
                POLICIES[self.policy](),
                trace,
                model,
                startup_s=self.fitted.startup_s,
                price_table=self.price_table,
            )
            done.append(
                dataclasses.replace(
                    run,
                    cost_usd=run.cost_usd + self.traffic_usd(run, per_step),
                    baseline_cost_usd=run.baseline_cost_usd + self.template.train_steps * per_step,
                )
            )
        return done[:count]

    def cross_zone_usd_per_step(self, mix: Mix) -> float:
        """What a step of ``mix`` costs in cross-zone traffic: its groups share the steps by their fitted rates."""
        groups = [
            GroupRate(
                g.name,
                g.accelerator,
                g.provisioning,
                g.count * self.fitted.throughput.predict(1, g.accelerator).central,
            )
            for g in mix.groups
        ]
        return cross_zone_usd_per_step(
            groups,
            self.zones,
            ps_replicas=self.template.ps_replicas,
            usd_per_gib=price_table(self.price_table).inter_zone_usd_per_gib,
            steps=self.template.train_steps,
        )

    def traffic_usd(self, run: RunResult, per_step: float) -> float:
        """The cross-zone traffic of ``run``: every step trained, the ones trained again and those of a run that
        failed included."""
        trained = run.steps_lost + (self.template.train_steps if run.succeeded else 0)
        return trained * per_step

    def screen(self, mix: Mix) -> Screened:
        prediction = self.fitted.throughput.predict_mix(mix.counts_by_type(), self.template.ps_replicas)
        price_h = sum(price_per_hour(g.accelerator, g.provisioning, self.price_table) * g.count for g in mix.groups)
        price_h += ps_price_per_hour(self.price_table) * self.template.ps_replicas
        time_s = self.template.train_steps / prediction.central
        traffic = self.template.train_steps * self.cross_zone_usd_per_step(mix)
        return Screened(mix, prediction, price_h, time_s, time_s * price_h / 3600.0 + traffic)


def evaluate(context: PlanContext, mix: Mix, target: Target, *, early_rejection: bool = True) -> Evaluation:
    """Simulate ``mix`` in batches; stop early once its odds are surely below the confidence."""
    count = 0
    rejected = False
    while count < context.runs:
        count = min(context.runs, count + BATCH_RUNS)
        runs = context.results(mix, count)
        met = sum(1 for r in runs if target.met_by(r))
        if early_rejection and count < context.runs and wilson_interval(met, count)[1] < target.confidence:
            rejected = True
            break
    runs = context.results(mix, count)
    per_step = context.cross_zone_usd_per_step(mix)
    traffic = sum(context.traffic_usd(run, per_step) for run in runs)
    return _evaluation(mix, runs, target, context.screen(mix).throughput, rejected, traffic_usd=traffic)


def _evaluation(
    mix: Mix,
    runs: Sequence[RunResult],
    target: Target,
    throughput: ThroughputPrediction,
    rejected: bool,
    *,
    traffic_usd: float = 0.0,
) -> Evaluation:
    costs = [r.cost_usd for r in runs]
    times = [r.time_s if r.succeeded else math.inf for r in runs]
    completed = sum(1 for r in runs if r.succeeded)
    return Evaluation(
        mix=mix,
        runs=len(runs),
        met=sum(1 for r in runs if target.met_by(r)),
        completed=completed,
        cost_per_done_usd=sum(costs) / completed if completed else math.inf,
        cost_p5_usd=percentile(costs, 0.05),
        cost_p95_usd=percentile(costs, 0.95),
        time_at_confidence_s=percentile(times, target.confidence),
        throughput=throughput,
        rejected_early=rejected,
        cross_zone_usd=traffic_usd / completed if completed else 0.0,
    )


def with_model_range(context: PlanContext, evaluation: Evaluation, target: Target) -> Evaluation:
    """The odds at both ends of the model's uncertainty, on the first interval runs of the same traces."""
    count = min(context.interval_runs, context.runs)
    slow = context.results(evaluation.mix, count, throughput="low", band="low")
    fast = context.results(evaluation.mix, count, throughput="high", band="high")
    return dataclasses.replace(
        evaluation,
        odds_pessimistic=sum(1 for r in slow if target.met_by(r)) / count,
        odds_optimistic=sum(1 for r in fast if target.met_by(r)) / count,
    )


def _objective(evaluation: Evaluation, target: Target) -> float:
    """Cheapest when a deadline is asked for; with only a budget, the fastest at that confidence."""
    return evaluation.cost_per_done_usd if target.deadline_s is not None else evaluation.time_at_confidence_s


def _bound(screened: Screened, target: Target, noise_sigma: float) -> float:
    fast = math.exp(-_NOISE_SIGMAS * noise_sigma)
    if target.deadline_s is not None:
        return screened.ideal_cost_usd * fast * (1 - BOUND_SLACK)
    return screened.ideal_time_s * fast


def search(
    context: PlanContext,
    target: Target,
    accelerators: Sequence[str],
    provisionings: Sequence[str],
    *,
    max_gpus: int = 8,
    max_groups: int = 2,
    max_simulated: int = 30,
    reference: Mix | None = None,
    available: Mapping[tuple[str, str | None], int] | None = None,
) -> FleetPlan:
    """The cheapest mix meeting ``target`` (see the module docstring for how the space is bounded)."""
    noise = context.fitted.throughput.noise_sigma
    mixes = enumerate_mixes(accelerators, provisionings, max_gpus, max_groups, available)
    screened = [context.screen(m) for m in mixes]
    candidates, pruned = _screen_out(screened, target, noise)
    candidates.sort(key=lambda s: (_bound(s, target, noise), s.mix.workers, s.mix.label))
    evaluated, best, stopped = _branch_and_bound(context, candidates, target, noise, max_simulated)
    if best is not None:
        best = with_model_range(context, best, target)
    fastest = _fastest(context, screened, evaluated, target) if best is None and screened else None
    reference_result = _reference(context, reference, evaluated, target) if reference is not None else None
    space = _space(
        accelerators, provisionings, max_gpus=max_gpus, max_groups=max_groups, available=available, mixes=len(screened)
    )
    return FleetPlan(target, space, len(screened), pruned, evaluated, best, fastest, reference_result, stopped)


def _screen_out(screened: Sequence[Screened], target: Target, noise: float) -> tuple[list[Screened], dict[str, int]]:
    """Step 1: the mixes left to simulate, and how many were pruned for each reason."""
    fast = math.exp(-_NOISE_SIGMAS * noise)
    by_mix = {s.mix: s for s in screened}
    saturated = f"PS-saturated (a GPU fewer is within {SATURATION_GAIN:.0%} as fast)"
    pruned = {"cannot meet the deadline without revocations": 0, "over budget without revocations": 0, saturated: 0}
    candidates: list[Screened] = []
    for item in screened:
        if target.deadline_s is not None and item.ideal_time_s * fast > target.deadline_s:
            pruned["cannot meet the deadline without revocations"] += 1
        elif target.budget_usd is not None and item.ideal_cost_usd * fast > target.budget_usd:
            pruned["over budget without revocations"] += 1
        elif _saturated(item, by_mix):
            pruned[saturated] += 1
        else:
            candidates.append(item)
    return candidates, pruned


def _branch_and_bound(
    context: PlanContext, candidates: Sequence[Screened], target: Target, noise: float, max_simulated: int
) -> tuple[list[Evaluation], Evaluation | None, str]:
    """Step 2: simulate the candidates in bound order; what was simulated, the best, and why the search stopped."""
    evaluated: list[Evaluation] = []
    best: Evaluation | None = None
    stopped = f"every one of the {len(candidates)} candidates left" if candidates else "no candidate left"
    for index, item in enumerate(candidates):
        if best is not None and _bound(item, target, noise) > _objective(best, target):
            stopped = (
                f"bound reached after {index} of {len(candidates)} candidates: no other can beat the best "
                "(their revocation-free figure is already worse)"
            )
            break
        if index >= max_simulated:
            stopped = f"stopped at --max-simulated {max_simulated} of {len(candidates)} candidates"
            break
        result = evaluate(context, item.mix, target)
        evaluated.append(result)
        if result.odds >= target.confidence and (best is None or _objective(result, target) < _objective(best, target)):
            best = result
    return evaluated, best, stopped


def _fastest(
    context: PlanContext, screened: Sequence[Screened], evaluated: Sequence[Evaluation], target: Target
) -> Evaluation | None:
    """The cheapest of the mixes within SATURATION_GAIN of the top speed: past the PS's knee more GPUs buy
    nothing."""
    top = max(s.throughput.central for s in screened)
    quickest = min(
        (s for s in screened if s.throughput.central >= top * (1 - SATURATION_GAIN)),
        key=lambda s: (s.price_h, s.mix.label),
    )
    return next((e for e in evaluated if e.mix == quickest.mix), None) or evaluate(
        context, quickest.mix, target, early_rejection=False
    )


def _reference(context: PlanContext, reference: Mix, evaluated: Sequence[Evaluation], target: Target) -> Evaluation:
    """The manifest's own fleet, evaluated in full (its early-rejected evaluation is not enough)."""
    found = next((e for e in evaluated if e.mix == reference and not e.rejected_early), None)
    return found or evaluate(context, reference, target, early_rejection=False)


def _space(
    accelerators: Sequence[str],
    provisionings: Sequence[str],
    *,
    max_gpus: int,
    max_groups: int,
    available: Mapping[tuple[str, str | None], int] | None,
    mixes: int,
) -> str:
    kinds = len(accelerators) * len(provisionings)
    limits = "".join(
        f", at most {n} {short_gpu(a)}{' ' + p if p else ''}"
        for (a, p), n in sorted((available or {}).items(), key=str)
    )
    return (
        f"{', '.join(short_gpu(a) for a in accelerators)} x {', '.join(provisionings)} ({kinds} groups), "
        f"1-{max_gpus} GPUs in total, at most {max_groups} groups per mix{limits}: {mixes} mixes"
    )


def _saturated(item: Screened, by_mix: dict[Mix, Screened]) -> bool:
    for group in item.mix.groups:
        fewer = tuple(g if g != group else Group(g.accelerator, g.provisioning, g.count - 1) for g in item.mix.groups)
        smaller = Mix(tuple(g for g in fewer if g.count > 0))
        if (
            smaller.groups
            and smaller in by_mix
            and by_mix[smaller].throughput.central >= item.throughput.central * (1 - SATURATION_GAIN)
        ):
            return True
    return False


def deadline_of(context: PlanContext, mix: Mix, confidence: float) -> float:
    """The time ``mix`` finishes within at ``confidence`` (nearest rank; a failed run never finishes)."""
    runs = context.results(mix, context.runs)
    return percentile([r.time_s if r.succeeded else math.inf for r in runs], confidence)


def mix_of(job: SimJob) -> Mix:
    return Mix((Group(job.accelerator, job.provisioning, job.workers),))


# --- manifests --------------------------------------------------------------------------------------


def manifests(plan_mix: Mix, context: PlanContext, name: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(the job with worker groups in order of preference, the single-group job if the mix is uniform); both
    checked against the API model, so what is printed applies."""
    from ttj.api.models import TransientTrainingJob
    from ttj_contract import API_VERSION, KIND

    job = mix_job(context.template, plan_mix, context)
    spec = job.spec.model_dump(by_alias=True, exclude_none=True, mode="json")
    metadata = {"name": name}
    today = {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec} if plan_mix.uniform else None
    workers = {k: v for k, v in spec["workers"].items() if k not in ("acceleratorType", "provisioning", "maxReplicas")}
    workers["groups"] = [
        {
            "name": group.name,
            "acceleratorType": group.accelerator,
            "provisioning": group.provisioning,
            **({"zone": zone} if (zone := context.zones.zone_of(group.accelerator, group.provisioning)) else {}),
            "maxReplicas": group.count,
        }
        for group in preference_order(plan_mix, context)
    ]
    grouped = {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": {**spec, "workers": workers}}
    for manifest in (grouped, today):
        if manifest is not None:
            TransientTrainingJob.model_validate(manifest)
    return grouped, today


# --- the command ------------------------------------------------------------------------------------


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    plan = parser.add_argument_group("fleet planning (--plan)")
    plan.add_argument(
        "--plan",
        action="store_true",
        help="search GPU mixes and provisioning for the cheapest fleet that meets --deadline/--budget at "
        "--confidence (neither: the manifest's own time at that confidence) over --accelerators and --provisioning",
    )
    plan.add_argument("--confidence", type=float, default=0.9, help="share of runs that must meet the target [0.9]")
    plan.add_argument("--max-gpus", type=int, default=8, help="most workers in a mix [8, the most the paper ran]")
    plan.add_argument("--max-groups", type=int, default=2, help="most (type, provisioning) groups in a mix [2]")
    plan.add_argument(
        "--available",
        default="",
        help="GPUs to be had, e.g. t4:spot=2,l4=4 (a spot stock-out: t4:spot=0) [no limit]",
    )
    plan.add_argument(
        "--zones",
        default="",
        help="zones groups are pinned to, e.g. t4:spot=us-central1-b,l4=us-central1-c (with --ps-zone, their "
        "cross-zone traffic is priced) [the manifest's groups' zones]",
    )
    plan.add_argument("--ps-zone", default=None, help="the parameter servers' zone [unknown: traffic not priced]")
    plan.add_argument(
        "--parameter-bytes",
        type=int,
        default=RESNET32_PARAMETER_BYTES,
        help="bytes of the model's variables on all parameter servers (ttj_trainer --self-check's "
        f"step_bytes_per_ps, summed) [{RESNET32_PARAMETER_BYTES}, ResNet-32, the fitted model]",
    )
    plan.add_argument("--max-simulated", type=int, default=30, help="most candidates simulated [30]")
    plan.add_argument("--plan-runs", type=int, default=200, help="seeded runs per candidate [200]")
    plan.add_argument("--plan-out", type=Path, default=None, help="also write the proposed manifest(s) here")


@dataclass(frozen=True)
class _Request:
    """What ``--plan`` was asked, checked: the job, the groups to search and the fitted model."""

    name: str
    template: SimJob
    policy: str
    accelerators: list[str]
    provisionings: list[str]
    available: dict[tuple[str, str | None], int]
    fitted: FittedModel
    zones: Zones


def plan_main(args: argparse.Namespace) -> int:
    from ttj.simulate.study import POLICY_LABELS

    request = _request(args)
    if isinstance(request, str):
        return _fail(request)
    context = PlanContext(
        request.template,
        request.fitted,
        policy=request.policy,
        runs=args.plan_runs,
        seed=args.seed,
        lifetimes=args.lifetimes,
        price_table=args.price_table,
        interval_runs=max(1, args.interval_runs),
        zones=request.zones,
    )
    reference = mix_of(request.template)
    asked = _target(args, context, reference)
    if isinstance(asked, str):
        return _fail(asked)
    target, derived = asked
    plan = search(
        context,
        target,
        request.accelerators,
        request.provisionings,
        max_gpus=args.max_gpus,
        max_groups=args.max_groups,
        max_simulated=args.max_simulated,
        reference=reference,
        available=request.available,
    )
    print(render(plan, context, request.name, derived, POLICY_LABELS[request.policy]))
    return _write_plan(args, plan, context, request.name)


def _fail(message: str) -> int:
    print(f"ttj simulate --plan: {message}", file=sys.stderr)
    return 2


def _request(args: argparse.Namespace) -> _Request | str:
    """The checked request, or what is wrong with it."""
    from ttj.simulate.cli import load_job
    from ttj.simulate.fit import fit
    from ttj.simulate.icac19 import load_training_data
    from ttj.simulate.study import POLICIES, accelerator_name

    try:
        manifest = load_job(args.manifest)
    except ValueError as exc:
        return str(exc)
    if not 0 < args.confidence < 1:
        return f"--confidence must be between 0 and 1, not {args.confidence}"
    if args.max_gpus < 1 or args.max_groups < 1 or args.plan_runs < 1 or args.max_simulated < 1:
        return "--max-gpus, --max-groups, --max-simulated and --plan-runs must be at least 1"
    policy = args.policies[0] if args.policies else "ttj"
    if policy not in POLICIES:
        return f"unknown policy {policy} (known: {', '.join(POLICIES)})"
    template = SimJob(str(manifest.metadata.get("name") or args.manifest.stem), manifest.spec)
    accelerators = [accelerator_name(a) for a in (args.accelerators or [template.accelerator])]
    provisionings = list(dict.fromkeys(args.provisioning or [template.provisioning, "on-demand"]))
    bad = [p for p in provisionings if p not in ("spot", "preemptible", "on-demand")]
    if bad:
        return f"unknown provisioning {', '.join(bad)} (spot, preemptible, on-demand)"
    if args.parameter_bytes < 0:
        return f"--parameter-bytes must not be negative, not {args.parameter_bytes}"
    try:
        available = parse_available(args.available, accelerator_name)
        pinned = {**manifest_zones(template), **parse_zones(args.zones, accelerator_name)}
        zones = Zones(args.ps_zone, pinned, args.parameter_bytes)
        fitted = fit(load_training_data(args.data))
        for accelerator in accelerators:
            fitted.throughput.predict(1, accelerator)
            for provisioning in provisionings:
                price_per_hour(accelerator, provisioning, args.price_table)
    except (OSError, ValueError) as exc:
        return str(exc)
    return _Request(template.name, template, policy, accelerators, provisionings, available, fitted, zones)


def manifest_zones(template: SimJob) -> dict[tuple[str, str | None], str]:
    """The zones the manifest's own groups are pinned to, by (type, provisioning) as they resolve."""
    workers = template.spec.workers
    return {
        (
            group.accelerator_type or workers.accelerator_type,
            str(group.provisioning or workers.provisioning),
        ): group.zone
        for group in workers.groups or []
        if group.zone is not None
    }


def _target(args: argparse.Namespace, context: PlanContext, reference: Mix) -> tuple[Target, str] | str:
    """The target asked for, or without a deadline and a budget the manifest's own time at the confidence (and
    a note saying so); what is wrong when that fleet does not finish often enough."""
    deadline_s = args.deadline * 3600 if args.deadline is not None else None
    derived = ""
    if deadline_s is None and args.budget is None:
        deadline_s = deadline_of(context, reference, args.confidence)
        if math.isinf(deadline_s):
            return (
                f"the manifest's fleet ({reference.label}) does not finish in {args.confidence:.0%} of runs: "
                "give --deadline or --budget"
            )
        derived = f" (the manifest's fleet, {reference.label}, at this confidence)"
    return Target(deadline_s, args.budget, args.confidence), derived


def _write_plan(args: argparse.Namespace, plan: FleetPlan, context: PlanContext, name: str) -> int:
    """The revocation rates behind the plan, the JSON, and the plan as a manifest; 1 without a plan."""
    import yaml

    from ttj.simulate.report import revocation_table

    used = sorted({g.accelerator for e in plan.evaluated for g in e.mix.groups if g.provisioning != "on-demand"})
    if used:
        print("\nRevocation rates of the transient types simulated (Kaplan-Meier, 95 % Greenwood band):")
        print(revocation_table([context.fitted.revocation_summary(a, args.lifetimes) for a in used]))
    grouped, today = manifests(plan.best.mix, context, name) if plan.best is not None else (None, None)
    if args.json is not None:
        payload = plan_json(plan) | {"manifest": grouped, "manifestToday": today, "note": GROUPS_NOTE}
        args.json.write_text(json.dumps(payload, indent=2), encoding="utf-8")
    if plan.best is None or grouped is None:
        return 1
    text = f"# {GROUPS_NOTE}\n---\n" + yaml.safe_dump(grouped, sort_keys=False)
    if today is not None:
        text += "# the same plan without worker groups (a uniform fleet)\n---\n"
        text += yaml.safe_dump(today, sort_keys=False)
    print(f"\nThe plan as a job, worker groups in order of preference ({GROUPS_NOTE}):\n")
    print(text)
    if args.plan_out is not None:
        args.plan_out.write_text(text, encoding="utf-8")
        print(f"written to {args.plan_out}")
    return 0


def evaluation_json(evaluation: Evaluation) -> dict[str, Any]:
    low, high = evaluation.odds_interval

    def finite(value: float) -> float | None:
        return None if math.isinf(value) or math.isnan(value) else value

    return {
        "mix": evaluation.mix.label,
        "groups": [dataclasses.asdict(g) for g in evaluation.mix.groups],
        "runs": evaluation.runs,
        "met": evaluation.met,
        "completed": evaluation.completed,
        "odds": evaluation.odds,
        "oddsWilson95": [low, high],
        "oddsModelRange": [finite(evaluation.odds_pessimistic), finite(evaluation.odds_optimistic)],
        "costPerDoneJobUsd": finite(evaluation.cost_per_done_usd),
        "runCostP5P95Usd": [evaluation.cost_p5_usd, evaluation.cost_p95_usd],
        "timeAtConfidenceS": finite(evaluation.time_at_confidence_s),
        "throughputStepsPerSecond": [
            evaluation.throughput.low,
            evaluation.throughput.central,
            evaluation.throughput.high,
        ],
        "extrapolated": evaluation.throughput.extrapolated,
        "notes": list(evaluation.throughput.why),
        "rejectedEarly": evaluation.rejected_early,
        "crossZoneUsdPerDoneJob": evaluation.cross_zone_usd,
    }


def plan_json(plan: FleetPlan) -> dict[str, Any]:
    def maybe(evaluation: Evaluation | None) -> dict[str, Any] | None:
        return evaluation_json(evaluation) if evaluation is not None else None

    return {
        "target": dataclasses.asdict(plan.target),
        "searchSpace": plan.space,
        "mixes": plan.mixes,
        "pruned": plan.pruned,
        "stopped": plan.stopped,
        "simulated": [evaluation_json(e) for e in plan.evaluated],
        "best": maybe(plan.best),
        "fastest": maybe(plan.fastest),
        "reference": maybe(plan.reference),
    }


def _pct(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.1%}"


def describe(evaluation: Evaluation, target: Target) -> str:
    low, high = evaluation.odds_interval
    early = f", rejected after {evaluation.runs} runs" if evaluation.rejected_early else ""
    when = "never" if math.isinf(evaluation.time_at_confidence_s) else f"{evaluation.time_at_confidence_s / 3600:.2f} h"
    return (
        f"P(meet) {_pct(evaluation.odds)} (95 % Wilson {_pct(low)}-{_pct(high)}, {evaluation.met}/{evaluation.runs} "
        f"runs{early}); ${evaluation.cost_per_done_usd:.2f} per done job"
        + (f" (${evaluation.cross_zone_usd:.2f} of it cross-zone traffic)" if evaluation.cross_zone_usd > 0 else "")
        + f", a run p5-p95 ${evaluation.cost_p5_usd:.2f}-"
        f"${evaluation.cost_p95_usd:.2f}; p{target.confidence * 100:.0f} time {when}; "
        f"{evaluation.throughput.central:.1f} steps/s "
        f"({evaluation.throughput.low:.1f}-{evaluation.throughput.high:.1f})"
    )


def render(plan: FleetPlan, context: PlanContext, name: str, derived: str, policy_label: str) -> str:
    lines = [
        *_header(plan, context, name, derived, policy_label),
        *_candidate_lines(plan),
        *(_best_lines(plan.best, plan.target, context) if plan.best is not None else _no_plan_lines(plan, context)),
        *_reference_lines(plan),
        *_extrapolated_lines(plan, context),
    ]
    return "\n".join(lines)


def _header(plan: FleetPlan, context: PlanContext, name: str, derived: str, policy_label: str) -> list[str]:
    target = plan.target
    pruned = ", ".join(f"{n} {why}" for why, n in plan.pruned.items() if n) or "none"
    return [
        f"Fleet plan for job {name}: {context.template.train_steps} steps; target: {target.describe()}{derived}",
        f"policy {policy_label}; {context.runs} seeded runs per candidate (seed {context.seed}); prices "
        f"{context.price_table}; revocations: {context.lifetimes} lifetimes",
        f"search space: {plan.space}; pruned without simulation: {pruned}; simulated: {len(plan.evaluated)} "
        f"({plan.stopped})",
        "throughput of a mixed fleet: each type's per-worker rate (K80 fitted, others x an assumed speed) summed, "
        "capped by the PS bandwidth through the fitted saturation (spotDNN's bottleneck rule)",
        _zones_line(context),
    ]


def _zones_line(context: PlanContext) -> str:
    """Which groups pay for cross-zone traffic, and at what price per step, or why none does."""
    zones = context.zones
    if not zones.pinned:
        return "zones: not modelled (every group beside the parameter servers; --zones and --ps-zone price traffic)"
    pinned = ", ".join(
        f"{short_gpu(a)}{' ' + p if p else ''} in {zone}" for (a, p), zone in sorted(zones.pinned.items(), key=str)
    )
    if zones.ps_zone is None:
        return f"zones: {pinned}; the parameter servers' zone unknown (--ps-zone): cross-zone traffic NOT priced"
    table = price_table(context.price_table)
    per_ps = zones.ps_bytes(context.template.ps_replicas)
    return (
        f"zones: {pinned}; parameter servers in {zones.ps_zone}: a worker in another zone moves 2 x "
        f"{zones.parameter_bytes / 1e6:.2f} MB across per step ({len(per_ps)} PS), at "
        f"${table.inter_zone_usd_per_gib}/GiB ({table.name}): added to every run's cost (ttj.cost.traffic)"
    )


def _candidate_lines(plan: FleetPlan) -> list[str]:
    lines = ["\nCandidates simulated (in bound order):"]
    for evaluation in plan.evaluated:
        mark = "meets " if evaluation.odds >= plan.target.confidence else "misses"
        lines.append(f"  {mark} {evaluation.mix.label:<34} {describe(evaluation, plan.target)}")
    return lines


def _no_plan_lines(plan: FleetPlan, context: PlanContext) -> list[str]:
    lines = [f"\nNo fleet in the search space meets the target ({plan.target.describe()})."]
    fastest = plan.fastest
    if fastest is None:
        return lines
    lines.append(f"The fastest option is {fastest.mix.label}: {describe(fastest, plan.target)}")
    capacity = context.fitted.throughput.ps_capacity_steps_s * context.template.ps_replicas
    if fastest.throughput.central >= 0.9 * capacity:
        lines.append(
            f"It is held by the parameter servers ({capacity:.0f} steps/s fitted for "
            f"{context.template.ps_replicas}): more spec.parameterServers.replicas would lift it "
            "(extrapolated). Loosen the deadline or the confidence, or add parameter servers."
        )
    else:
        lines.append("Loosen the deadline or the confidence, raise --max-gpus, or add faster --accelerators.")
    return lines


def _best_lines(best: Evaluation, target: Target, context: PlanContext) -> list[str]:
    lines = [
        f"\nCheapest plan: {best.mix.label}",
        f"  {describe(best, target)}",
        f"  model range (first {min(context.interval_runs, context.runs)} runs: slow end of the throughput "
        f"interval with early revocations / fast end with late ones): P(meet) {_pct(best.odds_pessimistic)} / "
        f"{_pct(best.odds_optimistic)}",
    ]
    low, _ = best.odds_interval
    if low < target.confidence:
        lines.append(
            f"  the confidence {target.confidence:.0%} lies inside the Monte Carlo error of the odds: "
            "more --plan-runs would tell"
        )
    return lines


def _reference_lines(plan: FleetPlan) -> list[str]:
    reference, best, target = plan.reference, plan.best, plan.target
    if reference is None:
        return []
    lines = [f"\nThe manifest's own fleet, {reference.mix.label}: {describe(reference, target)}"]
    if best is None:
        return lines
    saving = 1 - best.cost_per_done_usd / reference.cost_per_done_usd
    quantile = f"p{target.confidence * 100:.0f}"
    if best.mix == reference.mix:
        lines.append("  the plan is the manifest's own fleet: nothing in the search space is better")
    elif target.deadline_s is None:
        lines.append(
            f"  the plan's {quantile} time is {best.time_at_confidence_s / 3600:.2f} h against "
            f"{reference.time_at_confidence_s / 3600:.2f} h, for ${best.cost_per_done_usd:.2f} against "
            f"${reference.cost_per_done_usd:.2f}"
        )
    else:
        lines.append(
            f"  the plan costs ${best.cost_per_done_usd:.2f} against ${reference.cost_per_done_usd:.2f}: "
            f"{saving:.1%} {'cheaper' if saving >= 0 else 'dearer'}"
            + ("" if reference.odds >= target.confidence else " (the manifest's fleet misses the target)")
        )
    return lines


def _extrapolated_lines(plan: FleetPlan, context: PlanContext) -> list[str]:
    """What rests on assumptions rather than measurements: throughputs, revocation rates, prices."""
    flagged = {}
    for evaluation in [*plan.evaluated, *(e for e in (plan.fastest, plan.reference) if e is not None)]:
        if evaluation.throughput.extrapolated:
            flagged[evaluation.mix.label] = "; ".join(evaluation.throughput.why)
    if plan.best is None and not flagged:
        return []
    groups = [g for e in plan.evaluated for g in e.mix.groups]
    notes = sorted({note for g in groups if (note := price_note(g.accelerator, g.provisioning, context.price_table))})
    untrusted = sorted(
        {
            f"{g.accelerator}: revocations rest on {s.revocations} of {s.vms} VMs ({s.basis}): TOO FEW TO TRUST"
            for g in groups
            if g.provisioning != "on-demand"
            and not (s := context.fitted.revocation_summary(g.accelerator, context.lifetimes)).trusted
        }
    )
    if not (flagged or notes or untrusted):
        return []
    return [
        "\nExtrapolated (not fitted on measurements):",
        *(f"  {label}: {why}" for label, why in flagged.items()),
        *(f"  {note}" for note in untrusted),
        *(f"  price: {note}" for note in notes),
    ]
