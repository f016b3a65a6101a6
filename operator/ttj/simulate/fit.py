"""Fitting the simulator's models to the ICAC'19 measurements (pure; milliseconds, done at every run).

What is fitted on which file (docs/simulate.md says the same, with the numbers):

- Throughput ``X(n) = 1 / (1/(n·r) + 1/C)`` global steps/s for n K80 workers sharing one PS: r is the
  per-worker rate, C the parameter-server ceiling (the paper's Figure 6 bottleneck). Least squares of
  ``1/X = (1/r)·(1/n) + 1/C`` over the runs without revocations of ``agg_data.csv`` of
  ``{2,4,8}-demand`` and ``{2,4}-spot`` (runs with a revoked VM, per ``vm_data.csv``, are left out),
  and the single K80 baseline ``k80-demand/cost.csv`` (duration = cost / K80 on-demand price).
- Run-to-run noise: the standard deviation of log(duration / fitted duration) over those same runs.
- Start-up delay (VM boot until training starts; the time a replacement worker takes to join): the
  median of master uptime minus run duration in ``vm_data.csv`` of runs without revocations.
- Revocations of K80s: Kaplan-Meier over ``lifetime.csv`` (K80 section; 24 h survivors censored) pooled
  with every VM of ``{2,4}-spot/vm_data.csv`` (revoked = event, the rest censored at their uptime),
  because the training runs saw more early revocations than the lifetime study (13 % of 4-spot VMs
  within the first hour against 8 %). ``--lifetimes measured`` uses ``lifetime.csv`` alone (through
  ``ttj.preemption.lifetimes``). P100 and V100 have lifetimes only, so they always use the file.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ttj.preemption.lifetimes import (
    ACCELERATOR_TO_GPU_TYPE,
    PREEMPTIBLE_MAX_LIFETIME_S,
    LifetimeDistribution,
    MeasuredLifetime,
    load_lifetimes,
)
from ttj.simulate.icac19 import ICAC19_TRAIN_STEPS, MeasuredCluster, TrainingData
from ttj.simulate.prices import price_per_hour

#: Per-worker ResNet-32 speed relative to a K80. ASSUMED, not fitted: the ICAC'19 files have training
#: runs on K80s only. Ratios of published single-GPU ResNet/CIFAR throughputs; change them here.
RELATIVE_SPEED: dict[str, float] = {
    "nvidia-tesla-k80": 1.0,
    "nvidia-tesla-p100": 2.6,
    "nvidia-tesla-v100": 3.4,
    "nvidia-tesla-t4": 1.9,
}

#: Size of the quantile sample that carries a Kaplan-Meier curve into ``LifetimeDistribution``.
_KM_SAMPLE_SIZE = 2000


@dataclass(frozen=True)
class ThroughputModel:
    """Global steps per second of n workers of one type behind the parameter servers."""

    per_worker_steps_s: float  # r, K80
    ps_ceiling_steps_s: float  # C, for one PS
    noise_sigma: float  # lognormal, per run

    def steps_per_second(self, workers: int, accelerator: str = "nvidia-tesla-k80", ps_replicas: int = 1) -> float:
        if workers <= 0:
            return 0.0
        speed = RELATIVE_SPEED.get(accelerator)
        if speed is None:
            known = ", ".join(sorted(RELATIVE_SPEED))
            raise ValueError(f"no throughput model for accelerator {accelerator!r} (known: {known})")
        raw = workers * self.per_worker_steps_s * speed
        ceiling = self.ps_ceiling_steps_s * max(1, ps_replicas)
        return 1.0 / (1.0 / raw + 1.0 / ceiling)


@dataclass(frozen=True)
class FittedModel:
    throughput: ThroughputModel
    startup_s: float
    #: KM pseudo-sample of K80 lifetimes (seconds), pooled from lifetime.csv and the training VMs
    k80_pooled_lifetimes: tuple[float, ...]
    #: the runs the throughput was fitted on: workers → steps/s of each run
    fit_points: dict[int, tuple[float, ...]]

    def lifetimes(self, accelerator: str, provisioning: str, source: str = "pooled") -> LifetimeDistribution | None:
        """The lifetime distribution of one worker VM, or None for on-demand (never revoked)."""
        if provisioning == "on-demand":
            return None
        if source not in ("pooled", "measured"):
            raise ValueError(f"lifetime source must be 'pooled' or 'measured', not {source!r}")
        if source == "pooled" and accelerator == "nvidia-tesla-k80":
            return LifetimeDistribution(self.k80_pooled_lifetimes, provisioning=provisioning)
        return LifetimeDistribution.for_accelerator(accelerator, provisioning=provisioning, measured=_measured())


_MEASURED: list[list[MeasuredLifetime]] = []


def _measured() -> list[MeasuredLifetime]:
    if not _MEASURED:
        _MEASURED.append(load_lifetimes())
    return _MEASURED[0]


def _clean_runs(cluster: MeasuredCluster) -> list[float]:
    """Durations of the completed runs in which no VM was revoked."""
    return [r.duration_s for r in cluster.completed if cluster.revocations_of(r.zone, r.run) == 0]


def fit_throughput(data: TrainingData) -> tuple[ThroughputModel, dict[int, tuple[float, ...]]]:
    points: dict[int, list[float]] = {}
    k80_on_demand = price_per_hour("nvidia-tesla-k80", "on-demand")
    points[1] = [ICAC19_TRAIN_STEPS / (cost / k80_on_demand * 3600.0) for cost in data.single_k80_costs]
    for cluster in data.clusters():
        points.setdefault(cluster.workers, []).extend(ICAC19_TRAIN_STEPS / d for d in _clean_runs(cluster))
    # weighted least squares of 1/X on 1/n with weights X², i.e. on relative errors, so the fast
    # 8-worker runs count as much as the slow single-K80 ones
    sw = sx = sy = sxx = sxy = 0.0
    for workers, rates in points.items():
        for rate in rates:
            weight, x, y = rate * rate, 1.0 / workers, 1.0 / rate
            sw += weight
            sx += weight * x
            sy += weight * y
            sxx += weight * x * x
            sxy += weight * x * y
    slope = (sw * sxy - sx * sy) / (sw * sxx - sx * sx)
    intercept = (sy - slope * sx) / sw
    if slope <= 0 or intercept <= 0:
        raise ValueError(f"throughput fit failed (slope {slope}, intercept {intercept}): check the training data")
    model = ThroughputModel(1.0 / slope, 1.0 / intercept, 0.0)
    residuals = [
        math.log(model.steps_per_second(workers) / rate) for workers, rates in points.items() for rate in rates
    ]
    sigma = statistics.pstdev(residuals)
    return ThroughputModel(model.per_worker_steps_s, model.ps_ceiling_steps_s, sigma), {
        n: tuple(v) for n, v in sorted(points.items())
    }


def fit_startup(data: TrainingData) -> float:
    gaps: list[float] = []
    for cluster in data.clusters():
        by_run = cluster.runs_vms()
        for run in cluster.completed:
            vms = by_run.get((run.zone, run.run), [])
            if vms and not any(v.revoked for v in vms):
                gaps.extend(v.uptime_s - run.duration_s for v in vms if v.is_master)
    if not gaps:
        raise ValueError("start-up fit failed: no vm_data rows match the completed runs")
    return float(statistics.median(gaps))


def kaplan_meier(observations: Sequence[tuple[float, bool]]) -> list[tuple[float, float]]:
    """Survival curve [(time, S(time))] from (duration, event) pairs; censored pairs have event False."""
    ordered = sorted(observations)
    at_risk = len(ordered)
    survival = 1.0
    curve: list[tuple[float, float]] = []
    index = 0
    while index < len(ordered):
        moment = ordered[index][0]
        events = 0
        leaving = 0
        while index < len(ordered) and ordered[index][0] == moment:
            events += 1 if ordered[index][1] else 0
            leaving += 1
            index += 1
        if events:
            survival *= 1.0 - events / at_risk
            curve.append((moment, survival))
        at_risk -= leaving
    return curve


def km_quantile_sample(curve: Sequence[tuple[float, float]], size: int = _KM_SAMPLE_SIZE) -> tuple[float, ...]:
    """Quantiles of the KM lifetime distribution; mass past the last event sits at the 24 h limit."""
    sample = []
    for i in range(size):
        share_gone = (i + 0.5) / size
        value = PREEMPTIBLE_MAX_LIFETIME_S
        for moment, survival in curve:
            if 1.0 - survival >= share_gone:
                value = min(moment, PREEMPTIBLE_MAX_LIFETIME_S)
                break
        sample.append(value)
    return tuple(sample)


def pooled_k80_observations(data: TrainingData) -> list[tuple[float, bool]]:
    observations = [
        (min(m.seconds, PREEMPTIBLE_MAX_LIFETIME_S), not m.reached_limit)
        for m in _measured()
        if m.gpu_type == ACCELERATOR_TO_GPU_TYPE["nvidia-tesla-k80"]
    ]
    for cluster in data.transient.values():
        observations.extend((vm.uptime_s, vm.revoked) for vm in cluster.vms)
    return observations


def fit(data: TrainingData) -> FittedModel:
    throughput, points = fit_throughput(data)
    curve = kaplan_meier(pooled_k80_observations(data))
    return FittedModel(throughput, fit_startup(data), km_quantile_sample(curve), points)
