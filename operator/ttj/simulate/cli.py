"""``ttj simulate MANIFEST``: predict time, cost, revocations and failure odds of a job before running it;
with ``--plan``, the cheapest fleet that meets a deadline (the search is :mod:`ttj.simulate.fleet_search`).

The models are fitted at start-up on the ICAC'19 measurements bundled with ttj (see ``fit.py`` and
docs/simulate.md); each configuration is simulated over ``--runs`` seeded preemption traces, and every
policy replays the very same traces.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from ttj.api.models import TransientTrainingJob
    from ttj.simulate.engine import SimJob
    from ttj.simulate.fit import FittedModel
    from ttj.simulate.fleet_search import FleetPlan, Mix, PlanContext, Target
    from ttj.simulate.icac19 import TrainingData
    from ttj.simulate.zones import Zones


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in _csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"worker counts must be at least 1, got {text!r}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", type=Path, help="a TransientTrainingJob manifest (YAML)")
    parser.add_argument("--runs", type=int, default=400, help="seeded runs per configuration and policy [400]")
    parser.add_argument("--seed", type=int, default=1, help="seed of the preemption traces [1]")
    parser.add_argument(
        "--workers", type=_ints, default=None, help="worker counts to compare, e.g. 2,4,8 [2,4,8 and the manifest's]"
    )
    parser.add_argument(
        "--accelerators",
        type=_csv,
        default=None,
        help="GPU types to compare: k80, p100, v100 or GKE names [the manifest's]",
    )
    parser.add_argument(
        "--provisioning",
        type=_csv,
        default=None,
        help="spot, preemptible and/or on-demand [the manifest's and on-demand]",
    )
    parser.add_argument(
        "--policies",
        type=_csv,
        default=["ttj", "tfjob", "paper"],
        help="ttj (the operator's planner), tfjob (TFJob-like), paper (ICAC'19 static) [all three]",
    )
    parser.add_argument("--budget", type=float, default=None, help="recommend the fastest within this many USD (p95)")
    parser.add_argument("--deadline", type=float, default=None, help="recommend the cheapest done within HOURS (p95)")
    parser.add_argument(
        "--lifetimes",
        choices=["pooled", "measured"],
        default="pooled",
        help="K80 revocations from lifetime.csv pooled with the training VMs, or lifetime.csv alone [pooled]",
    )
    parser.add_argument(
        "--price-table",
        default="icac19-table2",
        help="price table of ttj.cost (ttj/data/prices.yaml) [icac19-table2, the paper's Table II]",
    )
    parser.add_argument(
        "--single-gpu",
        action="store_true",
        help="also compare one worker without a parameter server (the paper's single-GPU baseline)",
    )
    parser.add_argument(
        "--interval-runs",
        type=int,
        default=100,
        help="runs at each end of the throughput interval and the revocation band, on the first of the same "
        "traces [100]",
    )
    parser.add_argument(
        "--checkpoint-write-seconds",
        type=float,
        default=0.0,
        help="seconds each periodic checkpoint keeps the chief from training; the chief reports it, so "
        "checkpoint.adaptive jobs get the operator's interval [0]",
    )
    parser.add_argument("--validate", action="store_true", help="also reproduce the ICAC'19 measured averages")
    parser.add_argument("--chart", type=Path, default=None, help="write the time/cost chart here [simulate-NAME.png]")
    parser.add_argument("--no-chart", action="store_true", help="do not draw the chart")
    parser.add_argument("--json", type=Path, default=None, help="also write every summary as JSON here")
    parser.add_argument(
        "--data", type=Path, default=None, help="refit on this copy of the ICAC'19 data (a folder with training/)"
    )
    _add_plan_arguments(parser)
    _add_trace_arguments(parser)


def _add_trace_arguments(parser: argparse.ArgumentParser) -> None:
    traces = parser.add_argument_group("deadlines on measured spot availability (--traces)")
    traces.add_argument(
        "--traces",
        type=Path,
        default=None,
        help="replay these spot availability traces (a JSON file or a folder of them) as the capacity of the "
        "job's spot group, and compare ttj's deadline policy, always-on-demand, greedy, the paper's uniform "
        "progress and the hindsight optimum",
    )
    traces.add_argument(
        "--slacks", default="1.1,1.5,2", help="deadlines, in always-on-demand times of the job [1.1,1.5,2]"
    )
    traces.add_argument(
        "--job-hours",
        type=float,
        default=None,
        help="set the job's steps so that always-on-demand takes this long [the manifest's trainSteps]",
    )
    traces.add_argument("--starts", type=int, default=4, help="deadlines per trace and slack, spread over it [4]")
    traces.add_argument(
        "--catch-up-max", type=int, default=None, help="most catch-up (on-demand) workers [the job's replicas]"
    )


def _add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    from ttj.simulate.zones import RESNET32_PARAMETER_BYTES

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


def load_job(path: Path) -> TransientTrainingJob:
    """The first TransientTrainingJob in a YAML file, validated; ValueError with a readable message."""
    import yaml
    from pydantic import ValidationError

    from ttj.api.models import TransientTrainingJob
    from ttj_contract import KIND

    try:
        documents = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{path} is not valid YAML: {exc}") from None
    jobs = [d for d in documents if isinstance(d, dict) and d.get("kind") == KIND]
    if not jobs:
        raise ValueError(f"{path} holds no {KIND}")
    try:
        return TransientTrainingJob.model_validate(jobs[0])
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"{path}: not a valid {KIND}: {problems}") from None


@dataclass(frozen=True)
class _Job:
    """The manifest's job, checked, and the GPU types and provisionings asked to try it on."""

    name: str
    manifest: TransientTrainingJob
    template: SimJob
    accelerators: list[str]
    provisionings: list[str]


def _job(args: argparse.Namespace) -> _Job | str:
    """The manifest's job and what to try it on, or what is wrong with them."""
    from ttj.simulate.engine import SimJob
    from ttj.simulate.study import accelerator_name

    try:
        manifest = load_job(args.manifest)
    except ValueError as exc:
        return str(exc)
    name = str(manifest.metadata.get("name") or args.manifest.stem)
    template = SimJob(name, manifest.spec)
    accelerators = [accelerator_name(a) for a in (args.accelerators or [template.accelerator])]
    provisionings = list(dict.fromkeys(args.provisioning or [template.provisioning, "on-demand"]))
    bad = [p for p in provisionings if p not in ("spot", "preemptible", "on-demand")]
    if bad:
        return f"unknown provisioning {', '.join(bad)} (spot, preemptible, on-demand)"
    return _Job(name, manifest, template, accelerators, provisionings)


class _RunSettings(TypedDict):
    """What sets up the seeded runs alike in both modes."""

    seed: int
    lifetimes: str
    price_table: str
    interval_runs: int


def _run_settings(args: argparse.Namespace) -> _RunSettings:
    return _RunSettings(
        seed=args.seed,
        lifetimes=args.lifetimes,
        price_table=args.price_table,
        interval_runs=max(1, args.interval_runs),
    )


def _fail(args: argparse.Namespace, message: str) -> int:
    command = "ttj simulate --plan" if args.plan else "ttj simulate"
    print(f"{command}: {message}", file=sys.stderr)
    return 2


@dataclass(frozen=True)
class _Request:
    """What ``ttj simulate`` was asked, checked: the job, the grid and the fitted models."""

    job: _Job
    data: TrainingData  # the ICAC'19 measurements
    fitted: FittedModel
    jobs: list[SimJob]


def _request(args: argparse.Namespace) -> _Request | str:
    """The checked request, or what is wrong with it."""
    from ttj.simulate.fit import fit
    from ttj.simulate.icac19 import load_training_data
    from ttj.simulate.study import POLICIES, grid

    job = _job(args)
    if isinstance(job, str):
        return job
    unknown = [p for p in args.policies if p not in POLICIES]
    if unknown:
        return f"unknown policy {', '.join(unknown)} (known: {', '.join(POLICIES)})"
    if args.runs < 1:
        return "--runs must be at least 1"
    try:
        data = load_training_data(args.data)
        fitted = fit(data)
    except (OSError, ValueError) as exc:
        return f"cannot fit the models: {exc}"
    template, accelerators, provisionings = job.template, job.accelerators, job.provisionings
    workers = args.workers or sorted({2, 4, 8, template.workers})
    try:
        jobs = grid(template, workers, accelerators, provisionings)
        # fail before printing anything on a GPU type the models do not know
        for accelerator in accelerators:
            fitted.throughput.predict(1, accelerator)
    except ValueError as exc:
        return str(exc)
    if args.single_gpu:
        singles = [
            template.with_cluster(workers=1, accelerator=a, provisioning=p) for a in accelerators for p in provisionings
        ]
        jobs = [single.single_gpu() for single in singles] + jobs
    return _Request(job, data, fitted, jobs)


def _print_models(args: argparse.Namespace, request: _Request, price_notes: list[str]) -> None:
    """What the runs rest on: the job, the fitted throughput model, the revocation rates, the price notes."""
    from ttj.simulate.fit import PS_NETWORK_CEILING_STEPS_S
    from ttj.simulate.report import revocation_table

    spec, throughput = request.job.manifest.spec, request.fitted.throughput
    trained = spec.program.entrypoint if spec.program else spec.built_in_model
    print(f"job {request.job.name}: {request.job.template.train_steps} steps of {trained} on {spec.built_in_dataset}")
    capacity_low, capacity_high = throughput.ps_capacity_range
    print(
        f"model (fitted on ICAC'19, K80 runs of 1-{throughput.max_fitted_workers} workers): "
        f"{throughput.per_worker_steps_s:.3f} steps/s per K80 worker; "
        f"PS capacity {throughput.ps_capacity_steps_s:.0f} "
        f"steps/s (95 % range {capacity_low:.0f}-{capacity_high:.0f}; line rate of its machine "
        f"{PS_NETWORK_CEILING_STEPS_S:.0f}), saturation sharpness k={throughput.sharpness:g}; run noise "
        f"{throughput.noise_sigma:.1%}; start-up {request.fitted.startup_s:.0f} s; revocations: {args.lifetimes} "
        f"lifetimes; {args.runs} runs per row, seed {args.seed}; prices: {args.price_table}"
    )
    print("\nRevocation rates (Kaplan-Meier, 95 % Greenwood band):")
    print(revocation_table([request.fitted.revocation_summary(a, args.lifetimes) for a in request.job.accelerators]))
    for note in price_notes:
        print(f"note: {note}")


def _print_comparison(args: argparse.Namespace, jobs: list[Any], summaries: list[Any]) -> None:
    """The configurations side by side, what is extrapolated, and ttj's policy against the others."""
    from ttj.simulate.report import comparison_table, hours, pct, usd
    from ttj.simulate.study import POLICY_LABELS

    print("\nConfigurations side by side (time and cost: completed runs; $/done job: all runs / completed;")
    print("ranges: the throughput interval and the revocation band, on the same traces):")
    print(comparison_table(summaries))
    flagged = {s.config: s.notes for s in summaries if s.notes}
    if flagged:
        print("\nNot fitted on measurements (the ranges above carry it):")
        for config, notes in flagged.items():
            print(f"  {config}: {'; '.join(notes)}")
    if "ttj" not in args.policies or len(args.policies) == 1:
        return
    print("\nThis project's policy against the others, on the same traces:")
    # on-demand runs have no revocations: every policy runs them alike
    for job in (j for j in jobs if j.provisioning != "on-demand" and not j.without_ps):
        ours = next(s for s in summaries if s.config == job.label and s.policy == POLICY_LABELS["ttj"])
        for other in (s for s in summaries if s.config == job.label and s.policy != ours.policy):
            print(
                f"  {job.label:<18} vs {other.policy:<12}: completion {pct(ours.completion_rate, False)} vs "
                f"{pct(other.completion_rate, False)}, $/done job {usd(ours.cost_per_completed_usd)} vs "
                f"{usd(other.cost_per_completed_usd)}, time {hours(ours.time_mean_s)} h vs "
                f"{hours(other.time_mean_s)} h, r=1 time overhead {pct(ours.r1_time_overhead)} vs "
                f"{pct(other.r1_time_overhead)}, steps lost {ours.steps_lost_mean:.0f} vs "
                f"{other.steps_lost_mean:.0f}"
            )


def _print_recommendation(args: argparse.Namespace, summaries: list[Any]) -> None:
    from ttj.simulate.report import hours, pct, recommend, usd
    from ttj.simulate.study import POLICY_LABELS

    policy = POLICY_LABELS["ttj" if "ttj" in args.policies else args.policies[0]]
    deadline_s = args.deadline * 3600 if args.deadline is not None else None
    best, why = recommend(summaries, policy=policy, budget_usd=args.budget, deadline_s=deadline_s)
    if best is None:
        print(f"\nRecommendation: {why}")
        return
    print(
        f"\nRecommendation ({policy}): {best.config} — {why}: {hours(best.time_mean_s)} h "
        f"(p95 {hours(best.time_p95_s)} h), {usd(best.cost_mean_usd)} (p95 {usd(best.cost_p95_usd)}), "
        f"{pct(best.completion_rate, False)} completed"
    )


def _report_json(
    args: argparse.Namespace, request: _Request, price_notes: list[str], summaries: list[Any], validation: list[Any]
) -> dict[str, Any]:
    from ttj.simulate.fit import PS_NETWORK_CEILING_STEPS_S

    throughput = request.fitted.throughput
    return {
        "job": request.job.name,
        "model": {
            "perWorkerStepsPerSecondK80": throughput.per_worker_steps_s,
            "psCapacityStepsPerSecond": throughput.ps_capacity_steps_s,
            "psCapacityRange": list(throughput.ps_capacity_range),
            "psNetworkCeilingStepsPerSecond": PS_NETWORK_CEILING_STEPS_S,
            "sharpness": throughput.sharpness,
            "maxFittedWorkers": throughput.max_fitted_workers,
        },
        "revocations": [asdict(request.fitted.revocation_summary(a, args.lifetimes)) for a in request.job.accelerators],
        "priceNotes": price_notes,
        "summaries": [asdict(s) for s in summaries],
        "validation": [{"measured": asdict(m), "simulated": asdict(s)} for m, s in validation],
    }


def main(args: argparse.Namespace) -> int:
    if args.plan:
        return _plan(args)
    if args.traces is not None:
        return _replay_traces(args)
    from ttj.simulate.prices import price_note
    from ttj.simulate.report import draw_chart, validation_table
    from ttj.simulate.study import Study

    request = _request(args)
    if isinstance(request, str):
        return _fail(args, request)
    try:
        study = Study(
            request.fitted, runs=args.runs, checkpoint_write_s=args.checkpoint_write_seconds, **_run_settings(args)
        )
        price_notes = sorted(
            {note for job in request.jobs if (note := price_note(job.accelerator, job.provisioning, args.price_table))}
        )
        _print_models(args, request, price_notes)
        validation = study.validate(request.job.template, request.data) if args.validate else []
        if validation:
            print("\nReproducing the ICAC'19 measurements (paper's static policy, ResNet-32, 64K steps):")
            print(validation_table(validation))
        summaries = study.compare(request.jobs, args.policies)
    except ValueError as exc:
        return _fail(args, str(exc))
    _print_comparison(args, request.jobs, summaries)
    _print_recommendation(args, summaries)
    if not args.no_chart:
        target = args.chart or Path(f"simulate-{request.job.name}.png")
        drawn = draw_chart(
            summaries, target, title=f"ttj simulate {request.job.name}: time vs cost ({args.runs} runs each)"
        )
        print(f"\nchart: {drawn}")
    if args.json is not None:
        payload = _report_json(args, request, price_notes, summaries, validation)
        args.json.write_text(json.dumps(payload, indent=2, default=str), encoding="utf-8")
    return 0


# --- --traces ---------------------------------------------------------------------------------------------


def _replay_traces(args: argparse.Namespace) -> int:
    from ttj.simulate.deadline_replay import POLICIES, cases_of, replay_cases, replay_job
    from ttj.simulate.deadline_report import header, table
    from ttj.simulate.fit import fit
    from ttj.simulate.icac19 import load_training_data
    from ttj.simulate.traces import load_traces

    job = _job(args)
    if isinstance(job, str):
        return _fail(args, job)
    try:
        slacks = [float(s) for s in _csv(args.slacks)]
    except ValueError:
        return _fail(args, f"--slacks: expected comma-separated numbers, not {args.slacks!r}")
    if not slacks or min(slacks) < 1.0 or args.starts < 1:
        return _fail(args, "--slacks must be at least 1 (always-on-demand's own time) and --starts at least 1")
    if args.catch_up_max is not None and args.catch_up_max < 1:
        return _fail(args, "--catch-up-max must be at least 1")
    try:
        traces = load_traces(args.traces)
        fitted = fit(load_training_data(args.data))
        replayed = replay_job(
            job.template, fitted, args.price_table, catch_up_max=args.catch_up_max, hours=args.job_hours
        )
    except (OSError, ValueError) as exc:
        return _fail(args, str(exc))
    cases = cases_of(traces, replayed, slacks, args.starts)
    if not cases:
        return _fail(args, "no trace is long enough for the job's deadlines (a day of history + the deadline)")
    results = replay_cases(replayed, cases)
    print(header(replayed, len(traces), len(cases)))
    print(table(replayed, results, POLICIES))
    return 0


# --- --plan ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _PlanRequest:
    """What ``--plan`` was asked, checked: the job, the groups to search and the fitted model."""

    job: _Job
    policy: str
    available: dict[tuple[str, str | None], int]
    fitted: FittedModel
    zones: Zones


def _plan(args: argparse.Namespace) -> int:
    from ttj.simulate.fleet_search import PlanContext, mix_of, search
    from ttj.simulate.fleet_text import render
    from ttj.simulate.study import POLICY_LABELS

    request = _plan_request(args)
    if isinstance(request, str):
        return _fail(args, request)
    context = PlanContext(
        request.job.template,
        request.fitted,
        policy=request.policy,
        runs=args.plan_runs,
        zones=request.zones,
        **_run_settings(args),
    )
    reference = mix_of(request.job.template)
    asked = _target(args, context, reference)
    if isinstance(asked, str):
        return _fail(args, asked)
    target, derived = asked
    plan = search(
        context,
        target,
        request.job.accelerators,
        request.job.provisionings,
        max_gpus=args.max_gpus,
        max_groups=args.max_groups,
        max_simulated=args.max_simulated,
        reference=reference,
        available=request.available,
    )
    print(render(plan, context, request.job.name, derived, POLICY_LABELS[request.policy]))
    return _write_plan(args, plan, context, request.job.name)


def _plan_request(args: argparse.Namespace) -> _PlanRequest | str:
    """The checked request, or what is wrong with it."""
    from ttj.simulate.fit import fit
    from ttj.simulate.fleet_search import parse_available
    from ttj.simulate.icac19 import load_training_data
    from ttj.simulate.prices import price_per_hour
    from ttj.simulate.study import POLICIES, accelerator_name
    from ttj.simulate.zones import Zones, parse_zones

    job = _job(args)
    if isinstance(job, str):
        return job
    if not 0 < args.confidence < 1:
        return f"--confidence must be between 0 and 1, not {args.confidence}"
    if args.max_gpus < 1 or args.max_groups < 1 or args.plan_runs < 1 or args.max_simulated < 1:
        return "--max-gpus, --max-groups, --max-simulated and --plan-runs must be at least 1"
    policy = args.policies[0] if args.policies else "ttj"
    if policy not in POLICIES:
        return f"unknown policy {policy} (known: {', '.join(POLICIES)})"
    if args.parameter_bytes < 0:
        return f"--parameter-bytes must not be negative, not {args.parameter_bytes}"
    try:
        available = parse_available(args.available, accelerator_name)
        pinned = {**_manifest_zones(job.template), **parse_zones(args.zones, accelerator_name)}
        zones = Zones(args.ps_zone, pinned, args.parameter_bytes)
        fitted = fit(load_training_data(args.data))
        for accelerator in job.accelerators:
            fitted.throughput.predict(1, accelerator)
            for provisioning in job.provisionings:
                price_per_hour(accelerator, provisioning, args.price_table)
    except (OSError, ValueError) as exc:
        return str(exc)
    return _PlanRequest(job, policy, available, fitted, zones)


def _manifest_zones(template: SimJob) -> dict[tuple[str, str | None], str]:
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
    from ttj.simulate.fleet_search import Target, deadline_of

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
    from ttj.simulate.fleet_json import plan_document
    from ttj.simulate.fleet_manifests import manifests, manifests_yaml
    from ttj.simulate.fleet_text import plan_as_job, revocations

    rates = revocations(plan, context)
    if rates is not None:
        print(rates)
    grouped, today = manifests(plan.best.mix, context, name) if plan.best is not None else (None, None)
    if args.json is not None:
        args.json.write_text(json.dumps(plan_document(plan, grouped, today), indent=2), encoding="utf-8")
    if plan.best is None or grouped is None:
        return 1
    text = manifests_yaml(grouped, today)
    print(plan_as_job(text))
    if args.plan_out is not None:
        args.plan_out.write_text(text, encoding="utf-8")
        print(f"written to {args.plan_out}")
    return 0
