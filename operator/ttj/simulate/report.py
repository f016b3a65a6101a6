"""Summaries of simulated runs, the measured ICAC'19 figures they are checked against, tables, the chart."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ttj.simulate.engine import RunResult
from ttj.simulate.fit import RevocationSummary
from ttj.simulate.icac19 import MeasuredCluster, TrainingData

#: The paper's Table IV as the issue quotes it: time overhead of a run with one revocation (r=1),
#: by cluster size, under the paper's static policy.
PAPER_R1_TIME_OVERHEAD: dict[int, float] = {2: 0.617, 4: 0.153, 8: 0.039}


def percentile(values: Sequence[float], share: float) -> float:
    """Nearest-rank percentile (share in [0, 1]); nan for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))]


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return statistics.fmean(items) if items else math.nan


@dataclass(frozen=True)
class Summary:
    """One configuration under one policy, over many seeded runs."""

    config: str
    policy: str
    workers: int
    runs: int
    completion_rate: float
    time_mean_s: float
    time_p50_s: float
    time_p95_s: float
    cost_mean_usd: float  # of completed runs, as the paper reports
    cost_p95_usd: float
    cost_per_completed_usd: float  # every run's cost (failed ones too) / completed runs
    revocations_mean: float
    steps_lost_mean: float
    r1_time_overhead: float  # completed runs with exactly one revocation: mean T/T0 - 1
    r1_cost_overhead: float
    r1_runs: int
    time_overhead_per_revocation: float  # completed runs with r >= 1: mean (T/T0 - 1)/r
    checkpoints_mean: float = math.nan  # periodic checkpoints written per run
    checkpoint_steps_mean: float = math.nan  # steps the chief did not make while writing them, per run
    # --- how sure: filled in by the study (see Study.summary) ---
    throughput_steps_s: float = math.nan  # central global steps/s of the full cluster
    throughput_low_steps_s: float = math.nan
    throughput_high_steps_s: float = math.nan
    #: mean time and cost of completed runs with the throughput at the low and high end of its interval
    time_low_s: float = math.nan
    time_high_s: float = math.nan
    cost_low_usd: float = math.nan
    cost_high_usd: float = math.nan
    #: completion with the revocation rates at the ends of their 95 % band (Monte Carlo error included)
    completion_low: float = math.nan
    completion_high: float = math.nan
    #: a prediction outside the fitted domain (no runs of this GPU type, more workers than measured, ...)
    extrapolated: bool = False
    notes: tuple[str, ...] = ()


def wilson_interval(successes: int, trials: int) -> tuple[float, float]:
    """95 % Wilson score interval of a binomial share (the Monte Carlo error of a completion rate)."""
    if trials <= 0:
        return math.nan, math.nan
    z = 1.959964
    share = successes / trials
    centre = (share + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(share * (1 - share) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


def summarize(config: str, workers: int, results: Sequence[RunResult]) -> Summary:
    if not results:
        raise ValueError("no runs to summarize")
    done = [r for r in results if r.succeeded]
    once = [r for r in done if r.revocations == 1]
    revoked = [r for r in done if r.revocations >= 1]
    return Summary(
        config=config,
        policy=results[0].policy,
        workers=workers,
        runs=len(results),
        completion_rate=len(done) / len(results),
        time_mean_s=_mean(r.time_s for r in done),
        time_p50_s=percentile([r.time_s for r in done], 0.5),
        time_p95_s=percentile([r.time_s for r in done], 0.95),
        cost_mean_usd=_mean(r.cost_usd for r in done),
        cost_p95_usd=percentile([r.cost_usd for r in done], 0.95),
        cost_per_completed_usd=sum(r.cost_usd for r in results) / len(done) if done else math.inf,
        revocations_mean=_mean(r.revocations for r in results),
        steps_lost_mean=_mean(r.steps_lost for r in results),
        r1_time_overhead=_mean(r.time_s / r.baseline_time_s - 1 for r in once),
        r1_cost_overhead=_mean(r.cost_usd / r.baseline_cost_usd - 1 for r in once),
        r1_runs=len(once),
        time_overhead_per_revocation=_mean((r.time_s / r.baseline_time_s - 1) / r.revocations for r in revoked),
        checkpoints_mean=_mean(r.checkpoints for r in results),
        checkpoint_steps_mean=_mean(r.checkpoint_overhead_steps for r in results),
    )


@dataclass(frozen=True)
class MeasuredSummary:
    """The same figures computed from the ICAC'19 files for one measured configuration."""

    config: str
    workers: int
    provisioning: str
    runs: int
    completion_rate: float
    time_mean_s: float
    cost_mean_usd: float
    revocations_mean: float
    r1_time_overhead: float
    r1_time_overhead_se: float  # standard error of that mean (small samples: 5 and 8 runs)
    r1_cost_overhead: float
    r1_runs: int


def measured_summary(cluster: MeasuredCluster) -> MeasuredSummary:
    def revocations(zone: str, run: int) -> int:
        return cluster.revocations_of(zone, run) if cluster.vms else 0

    clean = [r for r in cluster.completed if revocations(r.zone, r.run) == 0]
    once = [r for r in cluster.completed if revocations(r.zone, r.run) == 1]
    clean_time = _mean(r.duration_s for r in clean)
    clean_cost = _mean(r.cost_usd for r in clean)
    launched = cluster.launched_runs
    total_revocations = sum(1 for vm in cluster.vms if vm.revoked)
    kind = "on-demand" if cluster.provisioning == "on-demand" else "transient"
    overheads = [r.duration_s / clean_time - 1 for r in once]
    return MeasuredSummary(
        config=f"K80 {kind} x{cluster.workers}",
        workers=cluster.workers,
        provisioning=cluster.provisioning,
        runs=launched,
        completion_rate=len(cluster.completed) / launched,
        time_mean_s=_mean(r.duration_s for r in cluster.completed),
        cost_mean_usd=_mean(r.cost_usd for r in cluster.completed),
        revocations_mean=total_revocations / launched,
        r1_time_overhead=_mean(overheads),
        r1_time_overhead_se=statistics.stdev(overheads) / math.sqrt(len(overheads)) if len(overheads) > 1 else math.nan,
        r1_cost_overhead=_mean(r.cost_usd / clean_cost - 1 for r in once),
        r1_runs=len(once),
    )


def single_gpu_summary(costs: Sequence[float], on_demand_usd_per_hour: float) -> MeasuredSummary:
    """The paper's single on-demand K80 without a PS: its files hold costs only (duration = cost / price)."""
    return MeasuredSummary(
        config="K80 on-demand x1 no PS",
        workers=1,
        provisioning="on-demand",
        runs=len(costs),
        completion_rate=1.0,
        time_mean_s=_mean(c / on_demand_usd_per_hour * 3600.0 for c in costs),
        cost_mean_usd=_mean(costs),
        revocations_mean=0.0,
        r1_time_overhead=math.nan,
        r1_time_overhead_se=math.nan,
        r1_cost_overhead=math.nan,
        r1_runs=0,
    )


def measured_summaries(data: TrainingData, on_demand_k80_usd_per_hour: float | None = None) -> list[MeasuredSummary]:
    measured = [measured_summary(c) for c in data.clusters()]
    if on_demand_k80_usd_per_hour is not None and data.single_k80_costs:
        measured.append(single_gpu_summary(data.single_k80_costs, on_demand_k80_usd_per_hour))
    return measured


# --- text -------------------------------------------------------------------------------------------


def hours(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds / 3600:.2f}"


def pct(value: float, signed: bool = True) -> str:
    if math.isnan(value):
        return "-"
    return f"{value * 100:+.1f}%" if signed else f"{value * 100:.1f}%"


def usd(value: float) -> str:
    return "-" if math.isnan(value) or math.isinf(value) else f"${value:.2f}"


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out.extend("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows)
    return "\n".join(out)


def comparison_table(summaries: Sequence[Summary]) -> str:
    headers = [
        "configuration", "policy", "runs", "done", "done 95% band", "time h", "time h range", "p95 h", "cost",
        "cost range", "p95 cost", "$/done job", "revocations", "steps lost", "ckpts", "r=1 time", "r=1 cost",
        "model",
    ]  # fmt: skip
    rows = [
        [
            s.config,
            s.policy,
            str(s.runs),
            pct(s.completion_rate, signed=False),
            span(s.completion_low, s.completion_high, lambda v: pct(v, signed=False)),
            hours(s.time_mean_s),
            span(s.time_high_s, s.time_low_s, hours),
            hours(s.time_p95_s),
            usd(s.cost_mean_usd),
            span(s.cost_high_usd, s.cost_low_usd, usd),
            usd(s.cost_p95_usd),
            usd(s.cost_per_completed_usd),
            f"{s.revocations_mean:.2f}",
            f"{s.steps_lost_mean:.0f}",
            f"{s.checkpoints_mean:.0f}",
            pct(s.r1_time_overhead),
            pct(s.r1_cost_overhead),
            "extrapolated" if s.extrapolated else "fitted",
        ]
        for s in summaries
    ]
    return render_table(headers, rows)


def span(low: float, high: float, show: Callable[[float], str]) -> str:
    """An interval as text; "-" when it is unknown."""
    if math.isnan(low) or math.isnan(high):
        return "-"
    first, last = sorted((low, high))
    return f"{show(first)}-{show(last)}"


def revocation_table(summaries: Sequence[RevocationSummary]) -> str:
    headers = ["GPU", "VMs", "revocations", "alive at 1 h (95% band)", "alive at 6 h (95% band)", "trust", "from"]
    rows = [
        [
            r.accelerator,
            str(r.vms),
            str(r.revocations),
            f"{pct(r.survival_1h[0], False)} ({pct(r.survival_1h[1], False)}-{pct(r.survival_1h[2], False)})",
            f"{pct(r.survival_6h[0], False)} ({pct(r.survival_6h[1], False)}-{pct(r.survival_6h[2], False)})",
            "ok" if r.trusted else "TOO FEW REVOCATIONS TO TRUST",
            r.basis,
        ]
        for r in summaries
    ]
    return render_table(headers, rows)


def error(simulated: float, measured: float) -> str:
    if math.isnan(simulated) or math.isnan(measured) or measured == 0:
        return "-"
    return f"{(simulated / measured - 1) * 100:+.1f}%"


def validation_table(pairs: Sequence[tuple[MeasuredSummary, Summary]]) -> str:
    headers = [
        "configuration", "measured h", "sim h", "err", "measured $", "sim $", "err", "done meas", "done sim",
        "revoc meas", "revoc sim", "r=1 time meas (±se)", "r=1 time sim", "paper Table IV",
    ]  # fmt: skip
    rows = []
    for m, s in pairs:
        rows.append(
            [
                m.config,
                hours(m.time_mean_s),
                hours(s.time_mean_s),
                error(s.time_mean_s, m.time_mean_s),
                usd(m.cost_mean_usd),
                usd(s.cost_mean_usd),
                error(s.cost_mean_usd, m.cost_mean_usd),
                pct(m.completion_rate, signed=False),
                pct(s.completion_rate, signed=False),
                f"{m.revocations_mean:.2f}",
                f"{s.revocations_mean:.2f}",
                f"{pct(m.r1_time_overhead)}±{m.r1_time_overhead_se * 100:.1f} (n={m.r1_runs})" if m.r1_runs else "-",
                pct(s.r1_time_overhead) if m.provisioning != "on-demand" else "-",
                pct(PAPER_R1_TIME_OVERHEAD.get(m.workers, math.nan)) if m.provisioning != "on-demand" else "-",
            ]
        )
    return render_table(headers, rows)


# --- chart ------------------------------------------------------------------------------------------


def draw_chart(summaries: Sequence[Summary], path: str | Path, *, title: str) -> Path:
    """Mean time against mean cost per configuration and policy (the paper's Figures 4 and 6 style)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    palette = matplotlib.colormaps["tab20"]
    markers: dict[str, str] = {}
    colors: dict[str, str] = {}
    marker_cycle = ["o", "s", "^", "D", "v"]
    fig, ax = plt.subplots(figsize=(9, 6))
    for s in summaries:
        if math.isnan(s.time_mean_s):
            continue
        marker = markers.setdefault(s.policy, marker_cycle[len(markers) % len(marker_cycle)])
        first_of_config = s.config not in colors
        color = colors.setdefault(s.config, matplotlib.colors.to_hex(palette(len(colors) % 20)))
        ax.errorbar(
            s.time_mean_s / 3600,
            s.cost_mean_usd,
            xerr=[[0.0], [max(0.0, (s.time_p95_s - s.time_mean_s) / 3600)]],
            yerr=[[0.0], [max(0.0, s.cost_p95_usd - s.cost_mean_usd)]],
            fmt=marker,
            capsize=2,
            color=color,
            alpha=0.85,
            label=s.config if first_of_config else None,
        )
        if s.completion_rate < 0.995:
            ax.annotate(
                f"{s.completion_rate:.0%} done",
                (s.time_mean_s / 3600, s.cost_mean_usd),
                textcoords="offset points",
                xytext=(4, -9),
                fontsize=6.5,
                color=color,
            )
    for policy, marker in markers.items():
        ax.plot([], [], marker, color="gray", label=f"policy: {policy}")
    ax.set_xlabel("training time, hours (mean; bar to p95)")
    ax.set_ylabel("cost, USD (mean of completed runs; bar to p95)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="upper right")
    fig.tight_layout()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=130)
    plt.close(fig)
    return target


# --- recommendation ---------------------------------------------------------------------------------


def recommend(
    summaries: Sequence[Summary],
    *,
    policy: str,
    budget_usd: float | None,
    deadline_s: float | None,
    min_completion: float = 0.95,
) -> tuple[Summary | None, str]:
    """The cheapest configuration that meets the deadline (p95), or the fastest within the budget (p95)."""
    candidates = [s for s in summaries if s.policy == policy and s.completion_rate >= min_completion]
    if deadline_s is not None:
        candidates = [s for s in candidates if s.time_p95_s <= deadline_s]
    if budget_usd is not None:
        candidates = [s for s in candidates if s.cost_p95_usd <= budget_usd]
    if not candidates:
        return None, _why_none(
            [s for s in summaries if s.policy == policy],
            policy=policy,
            budget_usd=budget_usd,
            deadline_s=deadline_s,
            min_completion=min_completion,
        )
    key: Callable[[Summary], float]
    if deadline_s is not None or budget_usd is None:
        key = lambda s: s.cost_per_completed_usd  # noqa: E731
        why = "cheapest per completed job" + (" whose p95 time meets the deadline" if deadline_s is not None else "")
    else:
        key = lambda s: s.time_mean_s  # noqa: E731
        why = "fastest whose p95 cost stays within the budget"
    if deadline_s is not None and budget_usd is not None:
        why += " and whose p95 cost stays within the budget"
    best = min(candidates, key=key)
    return best, why


def _why_none(
    pool: Sequence[Summary], *, policy: str, budget_usd: float | None, deadline_s: float | None, min_completion: float
) -> str:
    """Which constraint each configuration failed, and the one that came closest to each."""
    if not pool:
        return f"no configuration was simulated with {policy}"
    reasons: list[str] = []
    unlikely = [s for s in pool if s.completion_rate < min_completion]
    if unlikely:
        closest = max(unlikely, key=lambda s: s.completion_rate)
        reasons.append(
            f"{len(unlikely)} of {len(pool)} complete in fewer than {min_completion:.0%} of runs "
            f"(best: {closest.config}, {pct(closest.completion_rate, signed=False)})"
        )
    if deadline_s is not None:
        late = [s for s in pool if not s.time_p95_s <= deadline_s]
        if late:
            fastest = min(late, key=lambda s: s.time_p95_s if not math.isnan(s.time_p95_s) else math.inf)
            reasons.append(
                f"{len(late)} of {len(pool)} miss the deadline of {hours(deadline_s)} h at p95 "
                f"(fastest: {fastest.config}, p95 {hours(fastest.time_p95_s)} h)"
            )
    if budget_usd is not None:
        dear = [s for s in pool if not s.cost_p95_usd <= budget_usd]
        if dear:
            cheapest = min(dear, key=lambda s: s.cost_p95_usd if not math.isnan(s.cost_p95_usd) else math.inf)
            reasons.append(
                f"{len(dear)} of {len(pool)} exceed the budget of {usd(budget_usd)} at p95 "
                f"(cheapest: {cheapest.config}, p95 {usd(cheapest.cost_p95_usd)})"
            )
    return f"no configuration meets the constraints with {policy}: " + "; ".join(reasons)
