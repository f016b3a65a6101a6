"""Cross-zone traffic between workers and parameter servers: how many bytes cross, and what they cost.

Pure: no kopf, no Kubernetes client (import-linter enforces). In asynchronous parameter-server training each
worker step pulls the model's variables from every PS and pushes their gradients back: a worker in another
zone than a PS sends ``2 × parameterBytes[ps]`` across zones per step (the chief reports ``parameterBytes``
per PS; embedding tables looked up by row are not in it, since a step moves only the rows it touches). GCP
charges traffic between zones of one region per GiB in each direction; same-zone traffic is free
(docs/cost.md has the price and its source).

Per-worker step counts are not reported, only the global step and each slot's current steps/s: the job's
global steps in an interval are shared out among the workers by the seconds each ran in it times its measured
steps/s, so a worker twice as fast is charged for twice the steps. A worker without a measured rate (not
stepping yet when the chief measured, or gone since) counts at the mean rate of those measured; without any
measured rate the share is by seconds alone. The rate is the latest measurement, not the interval's average;
the job's total is right either way whenever all workers of the interval sit in the same zones relative to the
parameter servers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from ttj.api.models import CostStatus, CrossZoneStatus
from ttj_contract import format_micro_time, format_usd, parse_time

GIB = 1 << 30


@dataclass(frozen=True)
class ZonedWorker:
    """A worker pod as the traffic is priced: its ledger uid, its node's zone, how long it ran in the interval
    priced (seconds), and its training steps per second as the chief last measured them (None when not)."""

    uid: str
    zone: str | None
    seconds: float
    steps_per_second: float | None = None


@dataclass(frozen=True)
class CrossZoneTraffic:
    """What crossed zones in one interval: by worker (ledger uid), bytes and USD."""

    steps: int
    bytes_by_worker: Mapping[str, float]
    usd_by_worker: Mapping[str, float]

    @property
    def bytes(self) -> float:
        return sum(self.bytes_by_worker.values())

    @property
    def usd(self) -> float:
        return sum(self.usd_by_worker.values())


def cross_zone_bytes_per_step(
    worker_zone: str | None, ps_zones: Sequence[str | None], parameter_bytes: Sequence[int]
) -> int:
    """Bytes one step of a worker in ``worker_zone`` sends across zones: a pull and a push of each PS's bytes
    whose zone differs. An unknown zone (a node without ``topology.kubernetes.io/zone``) counts as the same."""
    if worker_zone is None:
        return 0
    return sum(
        2 * size
        for size, zone in zip(parameter_bytes, ps_zones, strict=False)
        if zone is not None and zone != worker_zone
    )


def cross_zone_traffic(
    workers: Iterable[ZonedWorker],
    *,
    ps_zones: Sequence[str | None],
    parameter_bytes: Sequence[int],
    steps: int,
    usd_per_gib: float,
) -> CrossZoneTraffic:
    """The cross-zone bytes and USD of ``steps`` global steps made by ``workers``, shared out by their seconds
    in the interval times their steps per second (:func:`step_rates`; evenly when none made a measurable
    contribution)."""
    present = list(workers)
    if steps <= 0 or not present:
        return CrossZoneTraffic(max(0, steps), {}, {})
    rates = step_rates([worker.steps_per_second for worker in present])
    weights = [max(0.0, worker.seconds) * rate for worker, rate in zip(present, rates, strict=True)]
    total = sum(weights)
    moved: dict[str, float] = {}
    for worker, weight in zip(present, weights, strict=True):
        share = weight / total if total > 0 else 1.0 / len(present)
        per_step = cross_zone_bytes_per_step(worker.zone, ps_zones, parameter_bytes)
        moved[worker.uid] = moved.get(worker.uid, 0.0) + steps * share * per_step
    crossed = {uid: amount for uid, amount in moved.items() if amount > 0}
    return CrossZoneTraffic(steps, crossed, {uid: amount / GIB * usd_per_gib for uid, amount in crossed.items()})


def step_rates(measured: Sequence[float | None]) -> list[float]:
    """The rate each worker's seconds are weighed by: its measured steps per second, the mean of the measured
    ones where it has none; 1.0 for every worker when none is measured or all measured ones are 0 (a stale
    measurement cannot tell which workers made the steps the global step says were made)."""
    known = [max(0.0, rate) for rate in measured if rate is not None]
    mean = sum(known) / len(known) if known else 0.0
    if mean <= 0:
        return [1.0] * len(measured)
    return [mean if rate is None else max(0.0, rate) for rate in measured]


def steps_to_price(priced_up_to: int | None, global_step: int) -> int:
    """Global steps since the step cross-zone traffic was last priced up to; none the first time, nor when the
    step went back (the parameter servers were restored from a checkpoint): the mark moves to it."""
    if priced_up_to is None or global_step < priced_up_to:
        return 0
    return global_step - priced_up_to


def seconds_in(started: datetime | None, ended: datetime | None, since: datetime, until: datetime) -> float:
    """Seconds of [started, ended or until] within [since, until]."""
    if started is None:
        return 0.0
    end = until if ended is None else min(ended, until)
    return max(0.0, (end - max(started, since)).total_seconds())


def add_cross_zone(cost: CostStatus, traffic: CrossZoneTraffic, *, global_step: int, now: datetime) -> CostStatus:
    """``cost`` (just accrued) with ``traffic`` (the steps from ``cost.crossZone.step`` to ``global_step``) added:
    to each worker's ledger entry, to the job's cross-zone total and its cost. The mark moves to ``global_step``
    at ``now`` when steps were priced, the first time, and when the step went back; without new steps the
    interval goes on. The hourly rate is the priced interval's."""
    before = cost.cross_zone
    if before is not None and traffic.steps == 0 and global_step >= before.step:
        return cost
    rate = before.usd_per_hour if before is not None else 0.0
    if before is not None and traffic.steps > 0:
        hours = (now - _recorded(before.priced_at)).total_seconds() / 3600.0
        rate = traffic.usd / hours if hours > 0 else rate
    entries = [
        entry.model_copy(update={"cross_zone_usd": entry.cross_zone_usd + traffic.usd_by_worker[entry.uid]})
        if entry.uid in traffic.usd_by_worker
        else entry
        for entry in cost.pods or []
    ]
    # A worker the traffic names that left the ledger meanwhile: its share is the job's alone.
    usd = cost.usd + traffic.usd
    return cost.model_copy(
        update={
            "pods": entries or None,
            "usd": usd,
            "summary": format_usd(usd),
            "cross_zone": CrossZoneStatus(
                usd=(before.usd if before is not None else 0.0) + traffic.usd,
                gib=(before.gib if before is not None else 0.0) + traffic.bytes / GIB,
                step=global_step,
                priced_at=format_micro_time(now),
                usd_per_hour=rate,
            ),
        }
    )


def _recorded(text: str) -> datetime:
    moment = parse_time(text)
    if moment is None:
        raise ValueError(f"not a time: {text!r}")
    return moment
