"""The plan of ``ttj simulate --plan`` as text for the terminal: the search, the candidates, the plan, its caveats."""

from __future__ import annotations

import math

from ttj.simulate.fleet_manifests import GROUPS_NOTE, deadline_spec
from ttj.simulate.fleet_search import Evaluation, FleetPlan, PlanContext, Target, short_gpu
from ttj.simulate.prices import price_note, price_table
from ttj.simulate.report import revocation_table


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
        *_deadline_lines(plan),
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


def _deadline_lines(plan: FleetPlan) -> list[str]:
    spec = deadline_spec(plan.best.mix, plan.target.deadline_s) if plan.best is not None else None
    if spec is None:
        return []
    fields = ", ".join(f"{key}: {value}" for key, value in spec.items())
    return [
        "  to have the operator hold the job to this deadline (its deadline policy adds on-demand catch-up workers "
        f"when spot falls short), add to its spec: deadline: {{{fields}}}"
    ]


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


def revocations(plan: FleetPlan, context: PlanContext) -> str | None:
    """The revocation rates of the transient GPU types simulated; None when every candidate was on-demand."""
    used = sorted({g.accelerator for e in plan.evaluated for g in e.mix.groups if g.provisioning != "on-demand"})
    if not used:
        return None
    table = revocation_table([context.fitted.revocation_summary(a, context.lifetimes) for a in used])
    return f"\nRevocation rates of the transient types simulated (Kaplan-Meier, 95 % Greenwood band):\n{table}"


def plan_as_job(manifests_yaml: str) -> str:
    return f"\nThe plan as a job, worker groups in order of preference ({GROUPS_NOTE}):\n\n{manifests_yaml}"
