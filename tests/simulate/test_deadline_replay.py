"""The deadline replay on small synthetic traces: the tick model, the four policies and the optimum, the
trace reader and ``ttj simulate --traces``. (The figures over the measured traces are bench/deadline_traces.py's.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ttj.cli import main
from ttj.simulate.deadline_replay import POLICIES, Case, ReplayJob, replay, replay_cases
from ttj.simulate.traces import CapacityTrace, load_trace, load_traces

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "simulate"

# 2 spot workers ($1/h), up to 2 catch-up workers ($3/h), $0.5/h of parameter servers; 10 steps/s a worker;
# a join (one tick) of 100 s. Always-on-demand: 2 workers, 100 s + 36,000 / 20 s = 1,900 s, $3.43.
JOB = ReplayJob(
    steps=36_000.0,
    spot_workers=2,
    catch_up_max=2,
    on_demand_workers=2,
    rates=(0.0, 10.0, 20.0, 30.0, 40.0),
    spot_usd_per_hour=1.0,
    on_demand_usd_per_hour=3.0,
    ps_usd_per_hour=0.5,
    join_seconds=100.0,
)


def trace(*capacity: int) -> CapacityTrace:
    return CapacityTrace("synthetic", 100.0, capacity)


def outcomes(case: Case) -> dict[str, tuple[bool, float]]:
    return {p: (o.met, round(o.cost_usd, 3)) for p, o in replay_cases(JOB, [case])[0].outcomes.items()}


def test_always_up_runs_on_spot_alone_and_is_optimal() -> None:
    # spot from the first tick: one tick joining, then 1,800 s at 20 steps/s; 2 x $1 + $0.5 an hour for 1,900 s
    spot_only = round(2.5 * 1_900 / 3_600, 3)
    on_demand = round(6.5 * 1_900 / 3_600, 3)
    assert outcomes(Case(trace(*[1] * 40), 0.0, 1.5)) == {
        "ttj": (True, spot_only),
        "on-demand": (True, on_demand),
        "greedy": (True, spot_only),
        "uniform": (True, spot_only),
        "optimum": (True, spot_only),
    }


def test_never_up_every_policy_meets_the_deadline_and_the_optimum_is_on_demand() -> None:
    results = outcomes(Case(trace(*[0] * 40), 0.0, 1.5))
    assert all(met for met, _ in results.values())
    assert results["optimum"] == pytest.approx(results["on-demand"], abs=0.01)
    # the online policies wait for spot until the safety net, paying the parameter servers meanwhile
    assert results["ttj"][1] > results["on-demand"][1]


def test_an_outage_mid_way_the_policies_in_order() -> None:
    # up 8 ticks, out 12, up again: spot alone cannot make it, so the safety net and the line decide
    case = Case(trace(*[1] * 8, *[0] * 12, *[1] * 20), 0.0, 1.5)
    results = replay_cases(JOB, [case])[0].outcomes
    assert all(o.met for o in results.values())
    costs = {p: o.cost_usd for p, o in results.items()}
    assert costs["optimum"] <= min(costs.values()) + 1e-6
    assert costs["ttj"] <= costs["greedy"] + 1e-6
    assert costs["ttj"] < costs["on-demand"]
    assert results["ttj"].catch_up_changes >= 1


@pytest.mark.parametrize(
    "capacity",
    [
        [1, 0] * 20,
        [0] * 5 + [1] * 35,
        [1] * 15 + [0] * 25,
        [0, 0, 0, 1] * 10,
    ],
)
def test_no_online_policy_beats_the_optimum(capacity: list[int]) -> None:
    results = replay_cases(JOB, [Case(trace(*capacity), 0.0, 1.5)])[0].outcomes
    optimum = results["optimum"].cost_usd
    assert all(o.met for o in results.values())
    assert all(o.cost_usd >= optimum - 0.005 * optimum for o in results.values())


def test_ttj_samples_its_eta_and_every_sample_knows_how_the_run_ended() -> None:
    outcome = replay(JOB, Case(trace(*[1] * 8, *[0] * 32), 0.0, 2.0), "ttj")
    assert outcome.met
    assert outcome.eta_samples
    assert {s.finished for s in outcome.eta_samples} == {outcome.finished_seconds}
    assert all(s.p50 <= s.p90 for s in outcome.eta_samples)


def test_a_trace_reads_as_capacity_over_time(tmp_path: Path) -> None:
    path = tmp_path / "zone_v100_1.json"
    path.write_text(json.dumps({"metadata": {"gap_seconds": 60}, "data": [1, 1, 0, 0, 0, 1, 2, 0, 1, 1]}))
    read = load_trace(path)
    assert (read.name, read.gap_seconds, read.seconds, read.availability) == ("zone_v100_1", 60.0, 600.0, 0.6)
    windows = [(0, 120), (0, 121), (300, 420), (400, 420), (540, 600), (540, 601)]
    assert [read.up_throughout(a, b) for a, b in windows] == [True, False, True, True, True, False]
    # by 5 samples: 2 up, one outage of 3 samples so far; by 8: 4 up of 8, two outages (3 and 1 samples)
    assert [read.observed(t) for t in (0, 300, 480)] == [(1.0, 0.0), (0.4, 180.0), (0.5, 120.0)]
    assert read.share_up(120, 420) == 0.4
    assert [t.name for t in load_traces(tmp_path)] == ["zone_v100_1"]


@pytest.mark.parametrize(
    "document",
    ['{"data": [1]}', '{"metadata": {"gap_seconds": 0}, "data": [1]}', '{"metadata": {"gap_seconds": 5}, "data": []}'],
)
def test_a_bad_trace_is_a_clear_error(tmp_path: Path, document: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(document)
    with pytest.raises(ValueError, match=r"bad\.json"):
        load_trace(path)


def test_simulate_traces_prints_the_comparison(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a day of history, then a 2 h job's 3 h window with a 1 h outage in it; 10-minute samples
    capacity = [1] * 144 + [1] * 6 + [0] * 6 + [1] * 12
    (tmp_path / "synthetic.json").write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": capacity}))
    manifest = str(EXAMPLES / "k80-transient-4.yaml")
    argv = ["simulate", manifest, "--traces", str(tmp_path), "--job-hours", "2", "--starts", "1", "--slacks", "1.5"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    comparison, calibration = out.split("\n\n")
    rows = [line for line in comparison.splitlines() if line.startswith("| 1.5× |")]
    assert [row.split(" | ")[1] for row in rows] == list(POLICIES)
    assert all(row.split(" | ")[2:4] == ["1/1", "1"] for row in rows)
    assert "ended after their p90" in calibration
    assert main([*argv[:-1], "0.9"]) == 2
    assert "--slacks must be at least 1" in capsys.readouterr().err
