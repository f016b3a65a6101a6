"""Cross-zone traffic between workers and parameter servers: bytes per step, the interval's share of each
worker, and its place in the cost ledger."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ttj.api.models import CostStatus, CrossZoneStatus, PodCost
from ttj.cost.model import NodeShape, PodObservation, accrue
from ttj.cost.prices import DEFAULT_INTER_ZONE_USD_PER_GIB, load_price_table, parse_price_book
from ttj.cost.traffic import (
    GIB,
    CrossZoneTraffic,
    ZonedWorker,
    add_cross_zone,
    cross_zone_bytes_per_step,
    cross_zone_traffic,
    seconds_in,
    step_rates,
    steps_to_price,
)
from ttj_contract import Provisioning, format_micro_time

T0 = datetime(2026, 11, 26, 3, 0, tzinfo=UTC)
MB = 1_000_000


@pytest.mark.parametrize(
    ("worker_zone", "ps_zones", "parameter_bytes", "expected"),
    [
        ("a", ["a"], [MB], 0),  # same zone: free
        ("b", ["a"], [MB], 2 * MB),  # a pull and a push
        ("b", ["a", "b"], [3 * MB, MB], 6 * MB),  # only the PS in the other zone
        ("c", ["a", "b"], [3 * MB, MB], 8 * MB),
        (None, ["a"], [MB], 0),  # the worker's zone unknown: counted as the same
        ("b", [None, "a"], [5 * MB, MB], 2 * MB),  # a PS's zone unknown: likewise
        ("b", ["a"], [MB, MB], 2 * MB),  # a PS whose zone is not known yet (no pod): not counted
    ],
)
def test_a_step_crosses_zones_with_twice_the_bytes_of_each_server_elsewhere(
    worker_zone: str | None, ps_zones: list[str | None], parameter_bytes: list[int], expected: int
) -> None:
    assert cross_zone_bytes_per_step(worker_zone, ps_zones, parameter_bytes) == expected


def test_the_intervals_steps_are_shared_by_seconds_run_and_priced_per_gib() -> None:
    workers = [
        ZonedWorker("w0", "a", 600.0),  # beside the PS: its steps cost nothing
        ZonedWorker("w1", "b", 600.0),
        ZonedWorker("w2", "b", 300.0),  # started half-way
    ]
    traffic = cross_zone_traffic(workers, ps_zones=["a"], parameter_bytes=[GIB // 4], steps=1000, usd_per_gib=0.01)
    # w1 made 400 steps, w2 200, each moving half a GiB across
    assert traffic == CrossZoneTraffic(
        1000,
        {"w1": 400 * GIB / 2, "w2": 200 * GIB / 2},
        {"w1": pytest.approx(2.0), "w2": pytest.approx(1.0)},
    )
    assert traffic.usd == pytest.approx(3.0)
    assert traffic.bytes == 300 * GIB


@pytest.mark.parametrize(
    ("workers", "steps", "expected"),
    [
        ([], 100, CrossZoneTraffic(100, {}, {})),  # nobody to charge
        ([ZonedWorker("w", "b", 10.0)], 0, CrossZoneTraffic(0, {}, {})),
        # a worker measured twice as fast makes two thirds of the steps
        (
            [ZonedWorker("w", "b", 10.0, steps_per_second=4.0), ZonedWorker("v", "b", 10.0, steps_per_second=2.0)],
            30,
            CrossZoneTraffic(
                30, {"w": 20 * 2 * GIB, "v": 10 * 2 * GIB}, {"w": pytest.approx(0.4), "v": pytest.approx(0.2)}
            ),
        ),
        # one without a measured rate counts at the mean of the measured ones (3.0): w 4, v 3, u 2 of 9 parts
        (
            [
                ZonedWorker("w", "b", 10.0, steps_per_second=4.0),
                ZonedWorker("v", "b", 10.0),
                ZonedWorker("u", "b", 10.0, steps_per_second=2.0),
            ],
            90,
            CrossZoneTraffic(
                90,
                {"w": 40 * 2 * GIB, "v": 30 * 2 * GIB, "u": 20 * 2 * GIB},
                {"w": pytest.approx(0.8), "v": pytest.approx(0.6), "u": pytest.approx(0.4)},
            ),
        ),
        # rates and seconds together: w ran half the interval at twice v's rate, so as many steps as v
        (
            [ZonedWorker("w", "b", 5.0, steps_per_second=4.0), ZonedWorker("v", "b", 10.0, steps_per_second=2.0)],
            20,
            CrossZoneTraffic(
                20, {"w": 10 * 2 * GIB, "v": 10 * 2 * GIB}, {"w": pytest.approx(0.2), "v": pytest.approx(0.2)}
            ),
        ),
        # a measured rate of 0 (not stepping when measured): none of the steps
        (
            [ZonedWorker("w", "b", 10.0, steps_per_second=0.0), ZonedWorker("v", "b", 10.0, steps_per_second=1.5)],
            10,
            CrossZoneTraffic(10, {"v": 10 * 2 * GIB}, {"v": pytest.approx(0.2)}),
        ),
        # every measured rate 0 (a stale measurement): by seconds alone, as without rates
        (
            [ZonedWorker("w", "b", 30.0, steps_per_second=0.0), ZonedWorker("v", "b", 10.0)],
            40,
            CrossZoneTraffic(
                40, {"w": 30 * 2 * GIB, "v": 10 * 2 * GIB}, {"w": pytest.approx(0.6), "v": pytest.approx(0.2)}
            ),
        ),
        # nobody ran a measurable time in the interval (one pass after another at the same instant): evenly
        (
            [ZonedWorker("w", "b", 0.0), ZonedWorker("v", "a", 0.0)],
            10,
            CrossZoneTraffic(10, {"w": 5 * 2 * GIB}, {"w": pytest.approx(0.1)}),
        ),
    ],
)
def test_corner_cases_of_the_share(workers: list[ZonedWorker], steps: int, expected: CrossZoneTraffic) -> None:
    assert cross_zone_traffic(workers, ps_zones=["a"], parameter_bytes=[GIB], steps=steps, usd_per_gib=0.01) == expected


@pytest.mark.parametrize(
    ("measured", "expected"),
    [
        ([], []),
        ([None, None], [1.0, 1.0]),  # nothing measured: seconds alone
        ([2.0, None, 4.0], [2.0, 3.0, 4.0]),  # the unmeasured at the mean of the measured
        ([0.0, None], [1.0, 1.0]),  # all measured at 0: seconds alone
        ([0.0, 3.0, None], [0.0, 3.0, 1.5]),
    ],
)
def test_step_rates(measured: list[float | None], expected: list[float]) -> None:
    assert step_rates(measured) == expected


@pytest.mark.parametrize(
    ("priced_up_to", "global_step", "expected"),
    [(None, 500, 0), (500, 800, 300), (800, 800, 0), (800, 200, 0)],  # first time / on / still / restored
)
def test_steps_to_price(priced_up_to: int | None, global_step: int, expected: int) -> None:
    assert steps_to_price(priced_up_to, global_step) == expected


@pytest.mark.parametrize(
    ("started", "ended", "expected"),
    [
        (None, None, 0.0),
        (T0 - timedelta(hours=1), None, 600.0),  # ran through the interval
        (T0 + timedelta(minutes=5), None, 300.0),  # started in it
        (T0 - timedelta(hours=1), T0 + timedelta(minutes=2), 120.0),  # ended in it
        (T0 - timedelta(hours=1), T0 - timedelta(minutes=1), 0.0),  # ended before it
    ],
)
def test_seconds_in_the_interval(started: datetime | None, ended: datetime | None, expected: float) -> None:
    assert seconds_in(started, ended, T0, T0 + timedelta(minutes=10)) == expected


def test_traffic_goes_to_the_workers_entries_and_the_jobs_total_and_the_next_accrual_keeps_it() -> None:
    prices = load_price_table(table="gce-us-central1")
    node = NodeShape("n1-standard-4", "nvidia-tesla-t4", 1, Provisioning.SPOT)
    worker = PodObservation("w-0", "uid-w", "worker", T0, node=node, gpus=1, group="t4-b", zone="b")
    hour = T0 + timedelta(hours=1)
    first = accrue(None, [worker], hour, prices)
    gpu_usd = first.usd
    # the first report only marks where pricing starts
    marked = add_cross_zone(first, CrossZoneTraffic(0, {}, {}), global_step=500, now=hour)
    assert (marked.usd, marked.cross_zone) == (gpu_usd, CrossZoneStatus(step=500, priced_at=format_micro_time(hour)))
    # half an hour later, 200 steps: some of a worker still here, some of one gone since
    later = hour + timedelta(minutes=30)
    traffic = CrossZoneTraffic(200, {"uid-w": 2.5 * GIB, "uid-gone": 0.5 * GIB}, {"uid-w": 0.025, "uid-gone": 0.005})
    added = add_cross_zone(accrue(marked, [worker], later, prices), traffic, global_step=700, now=later)
    assert added.usd == pytest.approx(1.5 * gpu_usd + 0.03)
    assert added.cross_zone is not None
    assert added.cross_zone.model_dump() == {
        "usd": pytest.approx(0.03),
        "gib": pytest.approx(3.0),
        "step": 700,
        "priced_at": format_micro_time(later),
        "usd_per_hour": pytest.approx(0.06),
    }
    assert [(e.uid, e.cross_zone_usd) for e in added.pods or []] == [("uid-w", 0.025)]
    # no new step: the interval goes on, nothing changes
    assert (
        add_cross_zone(added, CrossZoneTraffic(0, {}, {}), global_step=700, now=later + timedelta(minutes=1)) == added
    )
    # the next accrual: the GPU's time more, the traffic kept in the job's total and in the entry
    then = accrue(added, [worker], T0 + timedelta(hours=2), prices)
    assert (then.usd, then.cross_zone) == (pytest.approx(2 * gpu_usd + 0.03), added.cross_zone)
    assert [(e.uid, e.cross_zone_usd) for e in then.pods or []] == [("uid-w", 0.025)]
    # the worker gone: its GPU cost is settled, the traffic stays in the job's total once
    gone = accrue(then, [], T0 + timedelta(hours=3), prices)
    assert (gone.usd, gone.settled_usd) == (pytest.approx(2 * gpu_usd + 0.03), pytest.approx(2 * gpu_usd))
    # the step went back (a PS restored from a checkpoint): the mark follows it, the rate stays
    restored = add_cross_zone(gone, CrossZoneTraffic(0, {}, {}), global_step=650, now=T0 + timedelta(hours=3))
    assert restored.cross_zone == added.cross_zone.model_copy(
        update={"step": 650, "priced_at": format_micro_time(T0 + timedelta(hours=3))}
    )


def test_a_ledger_written_before_cross_zone_pricing_reads_as_none_of_it() -> None:
    old = CostStatus.model_validate(
        {
            "usd": 1.0,
            "pods": [
                PodCost(
                    name="w",
                    uid="u",
                    role="worker",
                    started_at=format_micro_time(T0),
                    usd_per_hour=1.0,
                    on_demand_usd_per_hour=1.0,
                    usd=1.0,
                ).model_dump(by_alias=True, exclude_defaults=True)
            ],
            "accruedAt": format_micro_time(T0 + timedelta(hours=1)),
        }
    )
    assert (old.cross_zone, old.pods[0].cross_zone_usd if old.pods else None) == (None, 0.0)


def test_the_inter_zone_price_is_a_table_setting_with_a_default() -> None:
    assert load_price_table(table="gce-us-central1").inter_zone_usd_per_gib == 0.01
    assert DEFAULT_INTER_ZONE_USD_PER_GIB == 0.01
    text = "tables:\n  t:\n    machines: {m: {on-demand: 1, preemptible: 1, spot: 1}}\n"
    assert parse_price_book(text).table().inter_zone_usd_per_gib == DEFAULT_INTER_ZONE_USD_PER_GIB
    priced = text.replace("    machines:", "    interZoneUSDPerGiB: 0.02\n    machines:")
    assert parse_price_book(priced).table().inter_zone_usd_per_gib == 0.02
    with pytest.raises(ValueError, match=r"tables\.t\.interZoneUSDPerGiB: expected a price in USD per GiB"):
        parse_price_book(text.replace("    machines:", "    interZoneUSDPerGiB: cheap\n    machines:"))
