"""The deadline replay's figures: per slack and policy, deadlines met and cost against the optimum and against
always-on-demand; and how honest ttj's p90 ETA was."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ttj.simulate.deadline_replay import CaseResult, ReplayJob

#: The savings against always-on-demand are also given where spot had capacity at least this share of the time.
MOSTLY_UP = 0.5


@dataclass(frozen=True)
class PolicyFigures:
    policy: str
    cases: int
    met: int
    #: deadlines the optimum meets (all of them without an optimum): the cost figures are over these
    feasible: int
    median_usd: float
    #: median over cases of cost / the optimum's cost, and its 90th percentile
    median_vs_optimum: float
    p90_vs_optimum: float
    #: median saving against always-on-demand (1 - cost / its cost), over all cases and where spot was mostly up
    median_saving: float
    median_saving_mostly_up: float
    saving_range_mostly_up: tuple[float, float]


@dataclass(frozen=True)
class EtaFigures:
    """ttj's ETAs sampled during its runs: the share of samples whose run ended after the sample's p90 (p50)."""

    samples: int
    after_p90: float
    after_p50: float
    #: the share of runs that ended after the p90 ETA given at their start
    runs_after_first_p90: float


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def _quantile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)] if ordered else math.nan


def policy_figures(job: ReplayJob, results: Sequence[CaseResult], policy: str) -> PolicyFigures:
    feasible = [r for r in results if "optimum" not in r.outcomes or r.outcomes["optimum"].met]
    costs = [r.outcomes[policy].cost_usd for r in feasible]
    ratios = [r.outcomes[policy].cost_usd / r.outcomes["optimum"].cost_usd for r in feasible if "optimum" in r.outcomes]
    savings = [1.0 - c / job.on_demand_usd for c in costs]
    mostly = [1.0 - r.outcomes[policy].cost_usd / job.on_demand_usd for r in feasible if r.share_up >= MOSTLY_UP]
    return PolicyFigures(
        policy=policy,
        cases=len(results),
        met=sum(1 for r in results if r.outcomes[policy].met),
        feasible=len(feasible),
        median_usd=_median(costs),
        median_vs_optimum=_median(ratios),
        p90_vs_optimum=_quantile(ratios, 0.9),
        median_saving=_median(savings),
        median_saving_mostly_up=_median(mostly),
        saving_range_mostly_up=(min(mostly), max(mostly)) if mostly else (math.nan, math.nan),
    )


def eta_figures(results: Sequence[CaseResult], policy: str = "ttj") -> EtaFigures:
    samples = [s for r in results for s in r.outcomes[policy].eta_samples]
    firsts = [r.outcomes[policy].eta_samples[0] for r in results if r.outcomes[policy].eta_samples]
    count = len(samples)
    return EtaFigures(
        samples=count,
        after_p90=sum(1 for s in samples if s.finished > s.p90 + 1e-6) / count if count else math.nan,
        after_p50=sum(1 for s in samples if s.finished > s.p50 + 1e-6) / count if count else math.nan,
        runs_after_first_p90=sum(1 for s in firsts if s.finished > s.p90 + 1e-6) / len(firsts) if firsts else math.nan,
    )


def _pct(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.1%}"


def _ratio(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.3f}"


def table(job: ReplayJob, results: Sequence[CaseResult], policies: Sequence[str]) -> str:
    """A Markdown table: one row per slack and policy, then ttj's ETA calibration per slack. Costs are over the
    feasible deadlines (those the hindsight optimum meets): a missed deadline has no cost to compare."""
    lines = [
        "| slack | policy | deadlines met | feasible | median $ | median / optimum | p90 / optimum | median saving "
        f"vs on-demand | where spot up ≥ {MOSTLY_UP:.0%}: median saving (range) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    slacks = sorted({r.case.slack for r in results})
    for slack in slacks:
        chosen = [r for r in results if r.case.slack == slack]
        feasible = [r for r in chosen if "optimum" not in r.outcomes or r.outcomes["optimum"].met]
        mostly = sum(1 for r in feasible if r.share_up >= MOSTLY_UP)
        for policy in policies:
            f = policy_figures(job, chosen, policy)
            low, high = f.saving_range_mostly_up
            lines.append(
                f"| {slack:g}× | {policy} | {f.met}/{f.cases} | {f.feasible} | {f.median_usd:.2f} | "
                f"{_ratio(f.median_vs_optimum)} | {_ratio(f.p90_vs_optimum)} | {_pct(f.median_saving)} | "
                f"{_pct(f.median_saving_mostly_up)} ({_pct(low)} to {_pct(high)}; {mostly} cases) |"
            )
    if "ttj" in policies:
        lines += [
            "",
            "| slack | ETA samples | ended after their p90 | after their p50 | runs ended after the first p90 |",
        ]
        lines.append("|---|---|---|---|---|")
        groups = [(f"{s:g}×", [r for r in results if r.case.slack == s]) for s in slacks]
        for label, chosen in [*groups, ("all", list(results))]:
            e = eta_figures(chosen)
            lines.append(
                f"| {label} | {e.samples} | {_pct(e.after_p90)} | {_pct(e.after_p50)} | "
                f"{_pct(e.runs_after_first_p90)} |"
            )
    return "\n".join(lines)


def header(job: ReplayJob, traces: int, cases: int) -> str:
    return (
        f"job: {job.steps:.0f} steps; {job.spot_workers} spot workers (${job.spot_usd_per_hour:.3f}/h each), up to "
        f"{job.catch_up_max} catch-up workers (${job.on_demand_usd_per_hour:.3f}/h), parameter servers "
        f"${job.ps_usd_per_hour:.3f}/h; a join {job.join_seconds:.0f} s (one tick); always-on-demand: "
        f"{job.on_demand_workers} workers, {job.on_demand_seconds / 3600:.2f} h, ${job.on_demand_usd:.2f}\n"
        f"{traces} traces, {cases} deadlines (trace stretch x slack); a deadline = slack x the always-on-demand time"
    )
