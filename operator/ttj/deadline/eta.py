"""How long the remaining steps take when spot capacity comes and goes: mean and spread of the time.

Spot capacity is an alternating renewal process: up periods (the spot workers train) and outages (they are
gone and none can start), each taken as exponential with the means observed. Over a long horizon, progress
is a renewal-reward process: its mean rate is ``a·r_up + (1 - a)·r_down`` (``a`` the share of time spot is
up) and its variance grows linearly in time with the rate of
``(r_up - r_down)² · ((1 - a)²·U² + a²·D²) / (U + D)`` (the variance of one cycle's progress around the
mean rate, per second of cycle; U and D the mean up period and outage). The time to make W steps is the
inverse: mean W / rate, standard deviation ``sqrt(variance rate · time) / rate`` (the central limit
theorem for renewal-reward processes). A job whose spot is out now first waits the rest of the outage
(memoryless: a full mean outage, with its variance).

Pure arithmetic, no datetimes: :mod:`ttj.deadline.policy` turns it into an ETA.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class SpotCapacity:
    """What is known of the spot group's capacity: the share of time it is up, and its mean outage."""

    availability: float = 1.0
    mean_outage_seconds: float = 0.0
    #: whether the spot workers are out right now
    out_now: bool = False

    @property
    def steady(self) -> bool:
        """Spot never goes out (or nothing is known of its outages): no capacity term."""
        return self.availability >= 1.0 or self.mean_outage_seconds <= 0.0

    @property
    def mean_up_seconds(self) -> float:
        if self.steady:
            return math.inf
        if self.availability <= 0.0:
            return 0.0
        return self.mean_outage_seconds * self.availability / (1.0 - self.availability)


@dataclass(frozen=True)
class Duration:
    """Seconds to finish: the mean and one standard deviation (None: it never finishes)."""

    mean: float
    deviation: float


def time_to_finish(
    steps: float, rate_up: float, rate_down: float, capacity: SpotCapacity, join_seconds: float
) -> Duration | None:
    """Seconds to make ``steps`` at ``rate_up`` steps/s while spot is up and ``rate_down`` while it is out.

    Each outage ends with the spot workers joining again, so ``join_seconds`` of every up period is spent
    before they train: the outage is lengthened by it and the up period shortened.
    """
    if steps <= 0:
        return Duration(0.0, 0.0)
    if capacity.steady or rate_up <= rate_down:
        # nothing known of outages, or no spot worker to lose: the fleet of now carries on as it is
        rate = rate_down if capacity.out_now or rate_up <= rate_down else rate_up
        return Duration(steps / rate, 0.0) if rate > 0 else None
    outage = capacity.mean_outage_seconds + join_seconds
    up = max(capacity.mean_up_seconds - join_seconds, 0.0)
    cycle = outage + up
    share_up = up / cycle
    rate = share_up * rate_up + (1.0 - share_up) * rate_down
    if rate <= 0:
        return None
    variance_rate = (rate_up - rate_down) ** 2 * ((1 - share_up) ** 2 * up**2 + share_up**2 * outage**2) / cycle
    waited, waited_variance = 0.0, 0.0
    if capacity.out_now:
        # the rest of the present outage and the spot workers' join, at the down rate meanwhile
        if rate_down * outage >= steps:
            return Duration(steps / rate_down, 0.0)
        steps -= rate_down * outage
        waited = outage
        waited_variance = (capacity.mean_outage_seconds * (1.0 - rate_down / rate)) ** 2
    mean = waited + steps / rate
    deviation = math.sqrt(waited_variance + variance_rate * (steps / rate) / rate**2)
    return Duration(mean, deviation)
