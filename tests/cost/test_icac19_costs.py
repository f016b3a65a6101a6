"""The paper's own runs through the cost model: ICAC'19 per-run costs, and its headline savings.

Each measured run becomes pods with run times: the PS for the run's training duration on an on-demand
n1-standard-4, each K80 worker (the "master" is one of them) from the start until it was revoked or
the run ended (its VM uptime, capped at the duration). Priced with Table II, accrued per second.
See docs/cost.md for what this reproduces and what it cannot.
"""

from __future__ import annotations

import csv
import re
import statistics
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import ttj.cost
from ttj.cost.model import NodeShape, PodObservation, accrue
from ttj.cost.prices import HourlyPrice, PriceTable, load_price_table
from ttj_contract import Provisioning


def _data_dir() -> Path:
    for candidate in (
        Path(ttj.cost.__file__).resolve().parents[1] / "data" / "icac19_training",
        Path("/work/shared/data/icac19/training"),
    ):
        if (candidate / "k80_spot" / "4-spot" / "agg_data.csv").exists():
            return candidate
    pytest.skip("the ICAC'19 training data is not available")


DATA = _data_dir()
TABLE_II = load_price_table(table="icac19-table2")
#: The unrounded prices behind the paper's cost columns (Table II shows them to 3 decimals); a
#: least-squares fit of the 4-spot and 2-demand costs on PS-hours and worker-hours gives them exactly.
PAPER_UNROUNDED = PriceTable(
    name="icac19-unrounded",
    description="",
    accelerators={"nvidia-tesla-k80": HourlyPrice(on_demand=0.72295, preemptible=0.2556, spot=0.2556)},
    machines={"n1-standard-4": HourlyPrice(on_demand=0.14292, preemptible=0.041, spot=0.041)},
    accelerator_includes_host=True,
)
T0 = datetime(2019, 2, 1, tzinfo=UTC)
K80_TRANSIENT = NodeShape("n1-standard-4", "nvidia-tesla-k80", 1, Provisioning.PREEMPTIBLE)
K80_ON_DEMAND = NodeShape("n1-standard-4", "nvidia-tesla-k80", 1, Provisioning.ON_DEMAND)
PS_NODE = NodeShape("n1-standard-4", None, 0, Provisioning.ON_DEMAND)
PAPER_SAVINGS = 0.629  # 4 transient K80 vs 1 on-demand K80, $1.05 vs $2.83
PAPER_SPEEDUP = 3.72
_VM = re.compile(r"(?P<zone>[a-z]+-[a-z]+\d+-[a-z])-run(?P<run>\d+)-(?P<role>master|worker-\d+)$")

Run = tuple[str, int]


def runs(relative: str) -> dict[Run, tuple[float, float]]:
    """(zone, run) → (training duration in s, the paper's cost in USD), for the runs that completed."""
    with (DATA / relative / "agg_data.csv").open() as handle:
        return {
            (row["Zone"], int(row["Run"])): (float(row["Duration"]), float(row["Cost"]))
            for row in csv.DictReader(handle)
        }


def vm_uptimes(relative: str) -> dict[Run, list[tuple[float, bool]]]:
    """(zone, run) → [(uptime in s, revoked)] of each worker VM (the master included)."""
    found: dict[Run, list[tuple[float, bool]]] = defaultdict(list)
    with (DATA / relative / "vm_data.csv").open() as handle:
        for row in csv.DictReader(handle):
            match = _VM.search(row["VM_name"])
            assert match, row["VM_name"]
            found[(match["zone"], int(match["run"]))].append((float(row["Uptime"]), row.get("Revoked") == "Revoked"))
    return found


def run_cost(
    duration: float, worker_seconds: list[float], worker_node: NodeShape, prices: PriceTable
) -> tuple[float, float]:
    """(usd, onDemandEquivalentUSD) of one run, accrued by the operator's cost model."""
    pods = [PodObservation("ps-0", "ps-0", "ps", T0, T0 + timedelta(seconds=duration), PS_NODE)]
    pods += [
        PodObservation(f"worker-{i}", f"worker-{i}", "worker", T0, T0 + timedelta(seconds=seconds), worker_node, gpus=1)
        for i, seconds in enumerate(worker_seconds)
    ]
    cost = accrue(None, pods, T0 + timedelta(seconds=duration), prices)
    return cost.usd, cost.on_demand_equivalent_usd


def transient_runs(relative: str, prices: PriceTable) -> dict[Run, tuple[float, float, bool]]:
    """(zone, run) → (our cost, the paper's cost, a worker was revoked) for a spot configuration."""
    uptimes = vm_uptimes(relative)
    result = {}
    for key, (duration, paper) in runs(relative).items():
        ours, _ = run_cost(duration, [min(up, duration) for up, _ in uptimes[key]], K80_TRANSIENT, prices)
        result[key] = (ours, paper, any(revoked for _, revoked in uptimes[key]))
    return result


def test_four_transient_k80_runs_cost_what_the_paper_says() -> None:
    table_ii = transient_runs("k80_spot/4-spot", TABLE_II)
    assert len(table_ii) == 31  # 32 runs, one lost its master and has no duration
    assert sum(revoked for _, _, revoked in table_ii.values()) >= 5  # preempted workers are in there
    assert max(abs(ours - paper) / paper for ours, paper, _ in table_ii.values()) < 0.005
    # With the unrounded prices the per-second model *is* the paper's accounting, run by run.
    unrounded = transient_runs("k80_spot/4-spot", PAPER_UNROUNDED)
    assert max(abs(ours - paper) / paper for ours, paper, _ in unrounded.values()) < 1e-6


@pytest.mark.parametrize("workers", [2, 4, 8])
def test_on_demand_k80_clusters_cost_what_the_paper_says(workers: int) -> None:
    measured = runs(f"k80_on_demand/{workers}-demand")
    assert len(measured) == 10
    for duration, paper in measured.values():
        usd, on_demand = run_cost(duration, [duration] * workers, K80_ON_DEMAND, TABLE_II)
        assert usd == pytest.approx(paper, rel=0.001)
        assert on_demand == pytest.approx(usd)


def test_two_transient_k80_runs_match_except_where_the_paper_charged_revoked_workers() -> None:
    """The paper's 2-spot costs charge both workers for the whole run even after one was revoked."""
    two = transient_runs("k80_spot/2-spot", TABLE_II)
    intact = [(ours, paper) for ours, paper, revoked in two.values() if not revoked]
    revoked = [(ours, paper) for ours, paper, was_revoked in two.values() if was_revoked]
    assert len(intact) + len(revoked) == 31
    assert revoked
    assert max(abs(ours - paper) / paper for ours, paper in intact) < 0.005
    assert all(ours < paper * 0.995 for ours, paper in revoked)


def test_on_demand_equivalent_of_the_transient_runs() -> None:
    uptimes = vm_uptimes("k80_spot/4-spot")
    for key, (duration, _) in runs("k80_spot/4-spot").items():
        seconds = [min(up, duration) for up, _ in uptimes[key]]
        usd, on_demand = run_cost(duration, seconds, K80_TRANSIENT, TABLE_II)
        assert on_demand == pytest.approx((0.723 * sum(seconds) + 0.143 * duration) / 3600)
        assert on_demand > 2.4 * usd  # transient K80s at 35 % of the on-demand price, the PS at 100 %


def test_the_papers_savings_and_speedup() -> None:
    with (DATA / "k80_on_demand" / "k80-demand" / "cost.csv").open() as handle:
        single_k80 = statistics.mean(float(row["Cost"]) for row in csv.DictReader(handle))
    assert single_k80 == pytest.approx(2.83, abs=0.005)
    four = transient_runs("k80_spot/4-spot", TABLE_II)
    whole_cluster = statistics.mean(ours for ours, _, _ in four.values())
    ps_share = statistics.mean(0.143 * duration / 3600 for duration, _ in runs("k80_spot/4-spot").values())
    workers_only = whole_cluster - ps_share
    # The single K80 has no PS, so the paper's $1.05 compares GPU servers: 64.3 % against its 62.9 %.
    assert 1 - workers_only / single_k80 == pytest.approx(PAPER_SAVINGS, abs=0.02)
    # Charging the 4-worker cluster's PS too (as ttj does) saves 59.2 %: what the paper's own per-run
    # costs give as well, so the 3.7-point gap is the PS, not the accrual.
    paper_own = statistics.mean(paper for _, paper, _ in four.values())
    assert 1 - whole_cluster / single_k80 == pytest.approx(1 - paper_own / single_k80, abs=0.002)
    assert 1 - whole_cluster / single_k80 == pytest.approx(0.592, abs=0.003)
    # Speedup: the single K80's time is not in the data; derived from its cost at $0.723/h.
    single_hours = single_k80 / 0.723
    four_hours = statistics.mean(duration for duration, _ in runs("k80_spot/4-spot").values()) / 3600
    assert single_hours / four_hours == pytest.approx(PAPER_SPEEDUP, abs=0.05)
