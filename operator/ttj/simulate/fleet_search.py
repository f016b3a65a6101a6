"""The search behind ``ttj simulate --plan``: the cheapest fleet (GPU types, counts, spot or on-demand) that meets
a deadline. The command is in :mod:`ttj.simulate.cli`; the plan is shown by :mod:`ttj.simulate.fleet_text`,
:mod:`ttj.simulate.fleet_json` and :mod:`ttj.simulate.fleet_manifests`.

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

import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from ttj.preemption.lifetimes import LifetimeDistribution
from ttj.simulate.engine import PreemptionTrace, RunResult, SimJob, simulate_run
from ttj.simulate.fit import FittedModel, ThroughputPrediction
from ttj.simulate.prices import price_per_hour, price_table, ps_price_per_hour
from ttj.simulate.report import percentile, wilson_interval
from ttj.simulate.study import POLICIES
from ttj.simulate.zones import GroupRate, Zones, cross_zone_usd_per_step

#: A GPU that adds less than this share of throughput is dominated: the PS is saturated.
SATURATION_GAIN = 0.01
#: The branch-and-bound's cost bound is the revocation-free cost less this share (see the module docstring).
BOUND_SLACK = 0.05
#: Runs per batch of the early rejection.
BATCH_RUNS = 25
#: The run noise's fast end used by the screen: this many standard deviations.
_NOISE_SIGMAS = 2.0


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
