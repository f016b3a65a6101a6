"""`ttj simulate --plan`: the cheapest fleet that meets a deadline, on the fitted models and the real planner."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ttj.api.models import TransientTrainingJob
from ttj.cli import main
from ttj.cost.traffic import GIB
from ttj.simulate.cli import load_job
from ttj.simulate.engine import PreemptionTrace, SimJob, simulate_run
from ttj.simulate.fit import FittedModel, blended, fit
from ttj.simulate.fleet_manifests import GROUPS_NOTE, manifests
from ttj.simulate.fleet_search import (
    Group,
    Mix,
    PlanContext,
    Target,
    deadline_of,
    enumerate_mixes,
    evaluate,
    mix_job,
    mix_of,
    search,
)
from ttj.simulate.icac19 import load_training_data
from ttj.simulate.policies import PaperStaticPolicy
from ttj.simulate.prices import price_per_hour, ps_price_per_hour
from ttj.simulate.study import accelerator_name
from ttj.simulate.zones import RESNET32_PARAMETER_BYTES, GroupRate, Zones, cross_zone_usd_per_step, parse_zones

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "simulate"
K80 = "nvidia-tesla-k80"
T4 = "nvidia-tesla-t4"
L4 = "nvidia-l4"


@pytest.fixture(scope="module")
def fitted() -> FittedModel:
    return fit(load_training_data())


@pytest.fixture(scope="module")
def template() -> SimJob:
    manifest = load_job(EXAMPLES / "k80-transient-4.yaml")
    return SimJob("resnet32", manifest.spec)


def test_the_search_space_is_every_mix_within_the_caps() -> None:
    mixes = list(enumerate_mixes([K80], ["preemptible", "on-demand"], max_gpus=2, max_groups=2))
    assert [m.label for m in mixes] == [
        "1 K80 preemptible",
        "2 K80 preemptible",
        "1 K80 on-demand",
        "2 K80 on-demand",
        "1 K80 on-demand + 1 K80 preemptible",
    ]
    assert len(list(enumerate_mixes([K80, T4, L4], ["spot", "on-demand"], max_gpus=8, max_groups=2))) == 6 * 8 + 15 * 28


def test_a_mixed_fleet_sums_per_type_rates_behind_the_ps(fitted: FittedModel) -> None:
    model = fitted.throughput
    rate = model.per_worker_steps_s
    speed = {K80: 1.0, T4: 1.9}
    mixed = model.predict_mix({K80: 2, T4: 1})
    raw = rate * (2 * speed[K80] + 1 * speed[T4])
    assert mixed.central == pytest.approx(blended(raw, model.ps_capacity_steps_s, model.sharpness))
    assert mixed.low < mixed.central < mixed.high
    assert mixed.extrapolated
    assert any("mixed GPU types" in why for why in mixed.why)
    assert model.predict_mix({K80: 4}) == model.predict(4, K80)
    # the PS caps the sum: twice the workers never doubles the rate past its capacity
    assert model.predict_mix({K80: 8, T4: 8}).central < model.ps_capacity_steps_s


def test_a_mixed_run_prices_and_revokes_each_slot_as_its_group(fitted: FittedModel, template: SimJob) -> None:
    context = PlanContext(template, fitted, price_table="gce-us-central1")
    mix = Mix((Group(T4, "on-demand", 1), Group(T4, "spot", 2)))
    job = mix_job(template, mix, context)
    assert job.slot_hardware == ((T4, "on-demand"), (T4, "spot"), (T4, "spot"))  # the chief starts on-demand
    never = PreemptionTrace(1, 0, None, 0.0)  # no revocations, no noise
    result = simulate_run(
        job, PaperStaticPolicy(), never, fitted.throughput, startup_s=fitted.startup_s, price_table="gce-us-central1"
    )
    rate = fitted.throughput.predict(3, T4).central
    price_h = price_per_hour(T4, "on-demand", "gce-us-central1") + 2 * price_per_hour(T4, "spot", "gce-us-central1")
    price_h += ps_price_per_hour("gce-us-central1")
    assert result.time_s == pytest.approx(template.train_steps / rate)
    assert result.cost_usd == pytest.approx(result.time_s * price_h / 3600)
    lifetimes = fitted.lifetimes(T4, "spot")
    trace = PreemptionTrace(1, 0, None, 0.0, slot_lifetimes={0: None, 1: lifetimes, 2: lifetimes})
    assert all(trace.lifetime(0, serial) == math.inf for serial in range(50))  # on-demand: never revoked
    assert any(trace.lifetime(1, serial) < math.inf for serial in range(50))  # spot: some are


@pytest.mark.parametrize(
    ("target", "max_gpus"),
    [
        (Target(deadline_s=1.2 * 3600, budget_usd=None, confidence=0.9), 4),  # the cheapest
        (Target(deadline_s=None, budget_usd=1.3, confidence=0.9), 3),  # only a budget: the fastest within it
    ],
)
def test_the_search_returns_the_best_feasible_mix(
    fitted: FittedModel, template: SimJob, target: Target, max_gpus: int
) -> None:
    """Every mix of a small space simulated by hand: the bounded search picks the best one that meets."""
    context = PlanContext(template, fitted, runs=20)
    plan = search(context, target, [K80], ["preemptible", "on-demand"], max_gpus=max_gpus, max_groups=2)
    every = [
        evaluate(context, mix, target, early_rejection=False)
        for mix in enumerate_mixes([K80], ["preemptible", "on-demand"], max_gpus, 2)
    ]
    feasible = [e for e in every if e.odds >= target.confidence]
    assert feasible
    assert len(feasible) < len(every)  # the target rules some out
    by_hand = min(
        feasible, key=lambda e: e.cost_per_done_usd if target.deadline_s is not None else e.time_at_confidence_s
    )
    assert plan.best is not None
    assert plan.best.mix == by_hand.mix
    assert plan.best.cost_per_done_usd == pytest.approx(by_hand.cost_per_done_usd)
    assert len(plan.evaluated) < len(every)  # bounded: not everything was simulated


def test_the_paper_4_k80_cluster_or_a_cheaper_one_meets_its_own_time(fitted: FittedModel, template: SimJob) -> None:
    context = PlanContext(template, fitted, runs=40)
    reference = mix_of(template)
    assert reference == Mix((Group(K80, "preemptible", 4),))
    target = Target(deadline_of(context, reference, 0.9), None, 0.9)
    plan = search(context, target, [K80], ["preemptible", "on-demand"], max_gpus=8, reference=reference)
    assert plan.best is not None
    assert plan.reference is not None
    assert plan.reference.odds >= 0.9  # the paper's cluster meets its own p90 time
    assert plan.best.odds >= 0.9
    assert plan.best.cost_per_done_usd <= plan.reference.cost_per_done_usd
    four = search(context, target, [K80], ["preemptible", "on-demand"], max_gpus=4, reference=reference)
    assert four.best is not None
    assert four.best.mix == reference or four.best.cost_per_done_usd <= plan.reference.cost_per_done_usd


def test_an_impossible_deadline_names_the_fastest_option(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "simulate", str(EXAMPLES / "k80-transient-4.yaml"), "--plan",
            "--deadline", "0.3", "--max-gpus", "4", "--plan-runs", "10",
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 1
    assert "No fleet in the search space meets the target (done within 0.30 h with 90% confidence)" in out
    assert "The fastest option is 4 K80 preemptible" in out  # the cheapest at the top speed
    assert "P(meet) 0.0%" in out


def test_the_plan_is_deterministic_for_a_seed(fitted: FittedModel, template: SimJob) -> None:
    target = Target(1.5 * 3600, None, 0.9)

    def once(seed: int) -> list[tuple[str, int, float]]:
        plan = search(PlanContext(template, fitted, runs=15, seed=seed), target, [K80, T4], ["preemptible"], max_gpus=3)
        return [(e.mix.label, e.met, e.cost_per_done_usd) for e in plan.evaluated]

    assert once(7) == once(7)
    assert once(7) != once(8)


def test_the_plan_as_manifests(fitted: FittedModel, template: SimJob) -> None:
    context = PlanContext(template, fitted, price_table="gce-us-central1")
    mixed = Mix((Group(L4, "spot", 2), Group(T4, "on-demand", 1), Group(T4, "spot", 1)))
    grouped, today = manifests(mixed, context, "resnet32")
    assert today is None  # a mixed fleet needs worker groups
    workers = grouped["spec"]["workers"]
    assert workers["replicas"] == 4
    # updateShare is opt-in: the mixed-fleet benchmark (docs/benchmarks.md) showed no gain from it
    assert grouped["spec"]["learningRateScaling"] == "activeWorkers"
    assert "acceleratorType" not in workers
    # transient before on-demand, each by dollars per step
    assert workers["groups"] == [
        {"name": "t4-spot", "acceleratorType": T4, "provisioning": "spot", "maxReplicas": 1},
        {"name": "l4-spot", "acceleratorType": L4, "provisioning": "spot", "maxReplicas": 2},
        {"name": "t4-on-demand", "acceleratorType": T4, "provisioning": "on-demand", "maxReplicas": 1},
    ]  # fmt: skip
    applied = TransientTrainingJob.model_validate(grouped)  # applies: worker groups are in the CRD
    assert [g.max_replicas for g in applied.spec.workers.groups or []] == [1, 2, 1]
    _, uniform = manifests(Mix((Group(K80, "preemptible", 6),)), context, "resnet32")
    assert uniform is not None
    assert uniform["spec"]["learningRateScaling"] == "activeWorkers"
    job = TransientTrainingJob.model_validate(uniform)  # applies today
    assert (job.spec.workers.replicas, job.spec.workers.accelerator_type) == (6, K80)
    assert str(job.spec.workers.provisioning) == "preemptible"


def test_the_cli_prints_the_plan_against_the_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "plan.yaml"
    report = tmp_path / "plan.json"
    rc = main(
        [
            "simulate", str(EXAMPLES / "k80-transient-4.yaml"), "--plan",
            "--max-gpus", "5", "--plan-runs", "20", "--plan-out", str(out_file), "--json", str(report),
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    assert "target: done within" in out
    assert "(the manifest's fleet, 4 K80 preemptible, at this confidence)" in out
    assert "search space: K80 x preemptible, on-demand (2 groups), 1-5 GPUs in total" in out
    assert "Cheapest plan:" in out
    assert "The manifest's own fleet, 4 K80 preemptible" in out
    assert GROUPS_NOTE in out_file.read_text()
    assert "the same plan without worker groups" in out_file.read_text()
    payload = json.loads(report.read_text())
    assert payload["best"]["odds"] >= 0.9
    assert payload["reference"]["mix"] == "4 K80 preemptible"
    assert payload["manifest"]["spec"]["workers"]["groups"][0]["acceleratorType"] == "nvidia-tesla-k80"
    assert payload["mixes"] == 5 + 5 + 10  # one group of 1-5 twice, and two groups summing to at most 5


# -- zones: groups pinned away from the parameter servers pay for their traffic -----------------------------
@pytest.mark.parametrize(
    ("groups", "zones", "ps_replicas", "expected_gib_per_step"),
    [
        # nothing pinned, or the PS's zone unknown: no traffic
        ([GroupRate("t4-spot", T4, "spot", 2.0)], Zones(), 1, 0.0),
        ([GroupRate("t4-spot", T4, "spot", 2.0)], Zones(None, {(T4, "spot"): "b"}, GIB), 1, 0.0),
        # the only group in zone b: a pull and a push of every byte per step
        ([GroupRate("t4-spot", T4, "spot", 2.0)], Zones("a", {(T4, "spot"): "b"}, GIB), 1, 2.0),
        # a type pinned whatever its provisioning; beside the PS: nothing
        ([GroupRate("t4-od", T4, "on-demand", 2.0)], Zones("a", {(T4, None): "b"}, GIB), 1, 2.0),
        ([GroupRate("t4-od", T4, "on-demand", 2.0)], Zones("a", {(T4, None): "a"}, GIB), 1, 0.0),
        # two groups: the one across makes 3 of 4 steps (its steps/s), so 3/4 of the steps cross
        (
            [GroupRate("l4-spot", L4, "spot", 3.0), GroupRate("t4-od", T4, "on-demand", 1.0)],
            Zones("a", {(L4, "spot"): "b"}, GIB),
            1,
            1.5,
        ),
        # two parameter servers share the bytes; both in zone a, so all of it crosses
        ([GroupRate("t4-spot", T4, "spot", 2.0)], Zones("a", {(T4, "spot"): "b"}, GIB), 2, 2.0),
    ],
)
def test_what_a_step_costs_in_cross_zone_traffic(
    groups: list[GroupRate], zones: Zones, ps_replicas: int, expected_gib_per_step: float
) -> None:
    usd = cross_zone_usd_per_step(groups, zones, ps_replicas=ps_replicas, usd_per_gib=0.01, steps=1000)
    assert usd == pytest.approx(expected_gib_per_step * 0.01)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("t4:spot=us-central1-b, l4=us-central1-c", {(T4, "spot"): "us-central1-b", (L4, None): "us-central1-c"}),
    ],
)
def test_zones_are_read_as_type_and_provisioning(text: str, expected: dict[tuple[str, str | None], str]) -> None:
    assert parse_zones(text, accelerator_name) == expected


def test_a_zone_must_be_named() -> None:
    with pytest.raises(ValueError, match=r"--zones: expected TYPE\[:PROVISIONING\]=ZONE, e.g. t4:spot=us-central1-b"):
        parse_zones("t4:spot", accelerator_name)


def test_a_pinned_groups_traffic_is_in_every_runs_cost_and_the_screen(fitted: FittedModel, template: SimJob) -> None:
    """T4 on-demand beside the PS, T4 spot in another zone: each run costs its steps' traffic more."""
    mix = Mix((Group(T4, "on-demand", 1), Group(T4, "spot", 1)))
    beside = PlanContext(template, fitted, runs=10, price_table="gce-us-central1")
    zones = Zones("us-central1-a", {(T4, "spot"): "us-central1-b"}, RESNET32_PARAMETER_BYTES)
    across = PlanContext(template, fitted, runs=10, price_table="gce-us-central1", zones=zones)
    # the two T4s step alike: half the steps cross, each 2 x the model's bytes
    per_step = 0.5 * 2 * RESNET32_PARAMETER_BYTES / GIB * 0.01
    assert across.cross_zone_usd_per_step(mix) == pytest.approx(per_step)
    assert beside.cross_zone_usd_per_step(mix) == 0.0
    runs, more = beside.results(mix, 10), across.results(mix, 10)
    assert [r.time_s for r in runs] == [r.time_s for r in more]  # the same runs, latency not modelled
    assert [b.cost_usd - a.cost_usd for a, b in zip(runs, more, strict=True)] == [
        pytest.approx((r.steps_lost + (template.train_steps if r.succeeded else 0)) * per_step) for r in runs
    ]
    traffic = template.train_steps * per_step
    assert across.screen(mix).ideal_cost_usd == pytest.approx(beside.screen(mix).ideal_cost_usd + traffic)
    target = Target(None, None, 0.9)
    plain, priced = evaluate(beside, mix, target), evaluate(across, mix, target)
    assert (plain.cross_zone_usd, priced.cross_zone_usd) == (0.0, pytest.approx(traffic, rel=0.05))
    assert priced.cost_per_done_usd == pytest.approx(plain.cost_per_done_usd + priced.cross_zone_usd)
    grouped, _ = manifests(mix, across, "resnet32")
    assert [(g["name"], g.get("zone")) for g in grouped["spec"]["workers"]["groups"]] == [
        ("t4-spot", "us-central1-b"),
        ("t4-on-demand", None),
    ]


def test_the_cli_says_which_groups_pay_for_traffic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    common = [
        "simulate", str(EXAMPLES / "k80-transient-4.yaml"), "--plan", "--deadline", "3",
        "--max-gpus", "2", "--plan-runs", "10", "--zones", "k80:preemptible=us-central1-b",
    ]  # fmt: skip
    assert main([*common, "--ps-zone", "us-central1-a", "--json", str(tmp_path / "plan.json")]) == 0
    out = capsys.readouterr().out
    assert (
        "zones: K80 preemptible in us-central1-b; parameter servers in us-central1-a: a worker in another zone "
        "moves 2 x 1.87 MB across per step (1 PS), at $0.01/GiB (icac19-table2): added to every run's cost"
    ) in out
    assert "of it cross-zone traffic)" in out
    payload = json.loads((tmp_path / "plan.json").read_text())
    crossing = [e for e in payload["simulated"] if "preemptible" in e["mix"]]
    assert crossing
    assert all(e["crossZoneUsdPerDoneJob"] > 0 for e in crossing)
    assert all(e["crossZoneUsdPerDoneJob"] == 0 for e in payload["simulated"] if "preemptible" not in e["mix"])
    assert main(common) == 0
    assert "the parameter servers' zone unknown (--ps-zone): cross-zone traffic NOT priced" in capsys.readouterr().out
