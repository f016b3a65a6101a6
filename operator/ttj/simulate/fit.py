"""Fitting the simulator's models to the ICAC'19 measurements (pure; milliseconds, done at every run).

What is fitted on which file (docs/simulate.md says the same, with the numbers):

- Throughput ``X(n) = ((n·r·s)^-k + (C·P)^-k)^(-1/k)`` global steps/s for n workers of relative speed s
  behind P parameter servers (one worker without a PS: r·s): r the per-K80 rate, C one PS's capacity,
  k how sharply the PS saturates (1: the harmonic form; large: the min of the two bounds). Least squares
  of log X over a grid of (k, C), r fitted for each, on the runs without revocations of ``agg_data.csv``
  of ``{2,4,8}-demand`` and ``{2,4}-spot`` (runs with a revoked VM, per ``vm_data.csv``, are left out)
  and the single K80 baseline ``k80-demand/cost.csv`` (no PS; duration = cost / K80 on-demand price).
  The K80 runs bound C from below only; the PS machine's line rate bounds it from above. Every shape in
  the 95 % likelihood region is kept: predictions carry their range, and those outside the fitted
  domain (other GPU types, more workers or PS than measured) are flagged extrapolated.
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

import dataclasses
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
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

#: The accelerator every training run of the ICAC'19 files used: the only one the throughput is fitted on.
FITTED_ACCELERATOR = "nvidia-tesla-k80"

#: Per-worker ResNet-32 speed relative to a K80: (low, central, high). ASSUMED, not fitted: the ICAC'19 files
#: have training runs on K80s only. Ranges of published single-GPU ResNet/CIFAR throughput ratios; every
#: prediction that uses one is flagged extrapolated and carries the range. Change them here.
RELATIVE_SPEED: dict[str, tuple[float, float, float]] = {
    "nvidia-tesla-k80": (1.0, 1.0, 1.0),
    "nvidia-tesla-p4": (1.0, 1.3, 1.6),
    "nvidia-tesla-t4": (1.5, 1.9, 2.3),
    "nvidia-tesla-p100": (2.2, 2.6, 3.0),
    "nvidia-l4": (2.4, 3.0, 3.8),
    "nvidia-tesla-v100": (2.8, 3.4, 4.0),
    "nvidia-tesla-a100": (4.5, 6.0, 8.0),
}

#: What a parameter server moves per global step of ResNet-32 (He et al. 2016: 0.46 M parameters, float32):
#: one push of gradients and one pull of parameters by the worker that made the step.
RESNET32_PARAMETERS = 0.46e6
PS_BYTES_PER_STEP = 2 * 4 * RESNET32_PARAMETERS
#: Egress line rate of the paper's PS machine (n1-standard-4: GCE allows 2 Gbit/s per vCPU), bytes/s per
#: direction. The physical ceiling of one PS: no fit may put its capacity above this.
PS_LINE_RATE_BYTES_S = 8e9 / 8
PS_NETWORK_CEILING_STEPS_S = PS_LINE_RATE_BYTES_S / (PS_BYTES_PER_STEP / 2)

#: Sharpness of the saturation ``X = ((n·r·s)^-k + C^-k)^(-1/k)`` searched by the fit: k=1 is the harmonic
#: form (the PS's time adds to every step even when it idles), k→∞ the min of the two bounds (a PS that
#: costs nothing until it saturates, as in the asymptotic bounds of a closed queueing network).
SHARPNESS_GRID: tuple[float, ...] = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0)
#: Candidate PS capacities (steps/s): geometric from well below the measured 35 steps/s to the line rate.
CAPACITY_GRID: tuple[float, ...] = tuple(30.0 * (PS_NETWORK_CEILING_STEPS_S / 30.0) ** (i / 80) for i in range(81))
#: Likelihood-ratio bound of the fit's 95 % region over (k, C): chi-square with 2 degrees of freedom.
_CHI2_2DF_95 = 5.991
#: Size of the quantile sample that carries a Kaplan-Meier curve into ``LifetimeDistribution``.
_KM_SAMPLE_SIZE = 2000


def blended(raw: float, capacity: float, sharpness: float) -> float:
    """Steps/s of workers that would make ``raw`` steps/s alone, behind a PS that serves ``capacity``."""
    if raw <= 0:
        return 0.0
    return float((raw**-sharpness + capacity**-sharpness) ** (-1.0 / sharpness))


@dataclass(frozen=True)
class ShapeFit:
    """One saturation shape: sharpness k, PS capacity C (one PS), per-K80 rate r, its log residual sum."""

    sharpness: float
    capacity: float
    per_worker: float
    sse: float


@dataclass(frozen=True)
class ThroughputPrediction:
    """Global steps/s of one configuration: the central value and the interval the data and assumptions allow."""

    central: float
    low: float
    high: float
    extrapolated: bool
    why: tuple[str, ...]  # why it is extrapolated (empty inside the fitted domain)


@dataclass(frozen=True)
class ThroughputModel:
    """Global steps per second of n workers of one type behind the parameter servers.

    ``X = ((n·r·s)^-k + (C·P)^-k)^(-1/k)`` for n workers of relative speed s and P parameter servers; one
    worker without a PS (the paper's single-GPU baseline) trains at r·s. ``plausible`` holds every shape
    (k, C, r) inside the fit's 95 % likelihood region: predictions give its range as their interval.
    """

    per_worker_steps_s: float  # r, K80
    ps_capacity_steps_s: float  # C, for one PS
    sharpness: float  # k
    noise_sigma: float  # lognormal, per run
    plausible: tuple[ShapeFit, ...] = ()
    max_fitted_workers: int = 8
    #: "central", "low" or "high": the simulator runs the bounds to carry the interval into time and cost
    bound: str = "central"

    @property
    def ps_capacity_range(self) -> tuple[float, float]:
        capacities = [s.capacity for s in self.plausible] or [self.ps_capacity_steps_s]
        return min(capacities), max(capacities)

    def with_bound(self, bound: str) -> ThroughputModel:
        return dataclasses.replace(self, bound=bound)

    def _speeds(self, accelerator: str) -> tuple[float, float, float]:
        speeds = RELATIVE_SPEED.get(accelerator)
        if speeds is None:
            known = ", ".join(sorted(RELATIVE_SPEED))
            raise ValueError(f"no throughput model for accelerator {accelerator!r} (known: {known})")
        return speeds

    def _rate(self, shape: ShapeFit, workers: int, speed: float, ps_replicas: int) -> float:
        raw = workers * shape.per_worker * speed
        if ps_replicas <= 0:
            return raw
        return blended(raw, shape.capacity * ps_replicas, shape.sharpness)

    def _central_shape(self) -> ShapeFit:
        return ShapeFit(self.sharpness, self.ps_capacity_steps_s, self.per_worker_steps_s, 0.0)

    def predict(
        self, workers: int, accelerator: str = FITTED_ACCELERATOR, ps_replicas: int = 1
    ) -> ThroughputPrediction:
        low_speed, speed, high_speed = self._speeds(accelerator)
        if workers <= 0:
            return ThroughputPrediction(0.0, 0.0, 0.0, False, ())
        central = self._rate(self._central_shape(), workers, speed, ps_replicas)
        shapes = self.plausible or (self._central_shape(),)
        lows = [self._rate(s, workers, low_speed, ps_replicas) for s in shapes]
        highs = [self._rate(s, workers, high_speed, ps_replicas) for s in shapes]
        why: list[str] = []
        if accelerator != FITTED_ACCELERATOR:
            why.append(f"no training runs on {accelerator}: speed {low_speed:g}-{high_speed:g}x a K80 assumed")
        if workers > self.max_fitted_workers:
            why.append(f"{workers} workers: runs measured up to {self.max_fitted_workers}")
        if ps_replicas > 1:
            why.append(f"{ps_replicas} parameter servers: runs measured with one")
        if ps_replicas <= 0 and workers > 1:
            why.append("several workers without a parameter server")
        return ThroughputPrediction(central, min([*lows, central]), max([*highs, central]), bool(why), tuple(why))

    def steps_per_second(self, workers: int, accelerator: str = FITTED_ACCELERATOR, ps_replicas: int = 1) -> float:
        prediction = self.predict(workers, accelerator, ps_replicas)
        return {"low": prediction.low, "high": prediction.high}.get(self.bound, prediction.central)

    def predict_mix(self, counts: Mapping[str, int], ps_replicas: int = 1) -> ThroughputPrediction:
        """Global steps/s of a mixed fleet: ``counts`` workers of each GPU type behind ``ps_replicas`` PS.

        Asynchronous workers push to the PS independently, so their raw rates add: ``Σ n_t·r·s_t``; the PS
        bandwidth caps the sum through the same fitted saturation as one type (spotDNN, IWQoS'23, models the
        PS bandwidth as the bottleneck of a heterogeneous cluster). One type is exactly :meth:`predict`.
        """
        present = {accelerator: n for accelerator, n in counts.items() if n > 0}
        if len(present) <= 1:
            accelerator, workers = next(iter(present.items()), (FITTED_ACCELERATOR, 0))
            return self.predict(workers, accelerator, ps_replicas)
        speeds = {accelerator: self._speeds(accelerator) for accelerator in present}
        central_shape = self._central_shape()

        def rate(shape: ShapeFit, end: int) -> float:
            raw = sum(n * shape.per_worker * speeds[a][end] for a, n in present.items())
            return blended(raw, shape.capacity * ps_replicas, shape.sharpness) if ps_replicas > 0 else raw

        central = rate(central_shape, 1)
        shapes = self.plausible or (central_shape,)
        low = min([*(rate(s, 0) for s in shapes), central])
        high = max([*(rate(s, 2) for s in shapes), central])
        workers = sum(present.values())
        why = ["mixed GPU types: no heterogeneous runs measured; per-type rates summed behind the PS"]
        why += [
            f"no training runs on {a}: speed {speeds[a][0]:g}-{speeds[a][2]:g}x a K80 assumed"
            for a in sorted(present)
            if a != FITTED_ACCELERATOR
        ]
        if workers > self.max_fitted_workers:
            why.append(f"{workers} workers: runs measured up to {self.max_fitted_workers}")
        if ps_replicas > 1:
            why.append(f"{ps_replicas} parameter servers: runs measured with one")
        return ThroughputPrediction(central, low, high, True, tuple(why))

    def mix_steps_per_second(self, counts: Mapping[str, int], ps_replicas: int = 1) -> float:
        prediction = self.predict_mix(counts, ps_replicas)
        return {"low": prediction.low, "high": prediction.high}.get(self.bound, prediction.central)


@dataclass(frozen=True)
class FittedModel:
    throughput: ThroughputModel
    startup_s: float
    #: KM pseudo-sample of K80 lifetimes (seconds), pooled from lifetime.csv and the training VMs
    k80_pooled_lifetimes: tuple[float, ...]
    #: the runs the throughput was fitted on: workers → steps/s of each run
    fit_points: dict[int, tuple[float, ...]]
    #: K80 observations pooled from lifetime.csv and the training VMs, for the confidence band
    k80_pooled_observations: tuple[tuple[float, bool], ...] = ()

    def lifetimes(
        self, accelerator: str, provisioning: str, source: str = "pooled", band: str = "central"
    ) -> LifetimeDistribution | None:
        """The lifetime distribution of one worker VM, or None for on-demand (never revoked).

        ``band`` "low" draws from the lower 95 % Greenwood band of the Kaplan-Meier survival (VMs revoked
        sooner: the pessimistic case), "high" from the upper one.
        """
        if provisioning == "on-demand":
            return None
        if source not in ("pooled", "measured"):
            raise ValueError(f"lifetime source must be 'pooled' or 'measured', not {source!r}")
        if band != "central":
            observations = self.revocation_observations(accelerator, source)
            points = kaplan_meier_band(observations)
            curve = [(p.time, p.low if band == "low" else p.high) for p in points]
            return LifetimeDistribution(km_quantile_sample(curve), provisioning=provisioning)
        if source == "pooled" and accelerator == "nvidia-tesla-k80":
            return LifetimeDistribution(self.k80_pooled_lifetimes, provisioning=provisioning)
        return LifetimeDistribution.for_accelerator(accelerator, provisioning=provisioning, measured=_measured())

    def revocation_observations(self, accelerator: str, source: str = "pooled") -> list[tuple[float, bool]]:
        """(lifetime, revoked) of every VM the revocations of ``accelerator`` are fitted on."""
        if source == "pooled" and accelerator == FITTED_ACCELERATOR and self.k80_pooled_observations:
            return list(self.k80_pooled_observations)
        gpu_type = ACCELERATOR_TO_GPU_TYPE.get(accelerator)
        rows = [m for m in _measured() if gpu_type is None or m.gpu_type == gpu_type]
        return [(min(m.seconds, PREEMPTIBLE_MAX_LIFETIME_S), not m.reached_limit) for m in rows]

    def revocation_summary(self, accelerator: str, source: str = "pooled") -> RevocationSummary:
        observations = self.revocation_observations(accelerator, source)
        band = kaplan_meier_band(observations)
        events = sum(1 for _, revoked in observations if revoked)
        gpu_type = ACCELERATOR_TO_GPU_TYPE.get(accelerator)
        basis = (
            "lifetime.csv K80 pooled with the k80_spot training VMs"
            if source == "pooled" and accelerator == FITTED_ACCELERATOR and self.k80_pooled_observations
            else f"lifetime.csv {gpu_type}"
            if gpu_type
            else f"no lifetimes of {accelerator}: all GPU types of lifetime.csv pooled"
        )
        return RevocationSummary(
            accelerator=accelerator,
            basis=basis,
            vms=len(observations),
            revocations=events,
            trusted=events >= MIN_TRUSTED_REVOCATIONS and gpu_type is not None,
            survival_1h=survival_at(band, 3600.0),
            survival_6h=survival_at(band, 6 * 3600.0),
        )


#: Fewer revocations than this per GPU type and the output says the rates are not to be trusted: the
#: Greenwood band of a Kaplan-Meier curve on fewer events is wider than the differences between types.
MIN_TRUSTED_REVOCATIONS = 20
#: Two-sided 95 % normal quantile for the confidence bands.
_Z95 = 1.959964


@dataclass(frozen=True)
class BandPoint:
    """One step of a Kaplan-Meier curve with its pointwise 95 % band (Greenwood, log-log transformed)."""

    time: float
    survival: float
    low: float
    high: float
    at_risk: int
    events: int


def kaplan_meier_band(observations: Sequence[tuple[float, bool]]) -> list[BandPoint]:
    """The Kaplan-Meier survival with Greenwood's variance; the band on log(-log S) stays inside [0, 1]."""
    ordered = sorted(observations)
    at_risk = len(ordered)
    survival, greenwood = 1.0, 0.0
    points: list[BandPoint] = []
    index = 0
    while index < len(ordered):
        moment = ordered[index][0]
        events = leaving = 0
        while index < len(ordered) and ordered[index][0] == moment:
            events += 1 if ordered[index][1] else 0
            leaving += 1
            index += 1
        if events:
            survival *= 1.0 - events / at_risk
            if at_risk > events:
                greenwood += events / (at_risk * (at_risk - events))
            if 0.0 < survival < 1.0 and greenwood > 0:
                spread = _Z95 * math.sqrt(greenwood) / abs(math.log(survival))
                low, high = survival ** math.exp(spread), survival ** math.exp(-spread)
            else:
                low, high = survival, survival
            points.append(BandPoint(moment, survival, low, high, at_risk, events))
        at_risk -= leaving
    return points


def survival_at(points: Sequence[BandPoint], seconds: float) -> tuple[float, float, float]:
    """(S, low, high) at ``seconds``: the last step at or before it (1 before the first revocation)."""
    chosen = (1.0, 1.0, 1.0)
    for point in points:
        if point.time > seconds:
            break
        chosen = (point.survival, point.low, point.high)
    return chosen


@dataclass(frozen=True)
class RevocationSummary:
    """What the revocation rates of one GPU type rest on, with their uncertainty."""

    accelerator: str
    basis: str
    vms: int
    revocations: int  # before the 24 h limit
    trusted: bool
    survival_1h: tuple[float, float, float]  # S, 95 % band low, high
    survival_6h: tuple[float, float, float]


_MEASURED: list[list[MeasuredLifetime]] = []


def _measured() -> list[MeasuredLifetime]:
    if not _MEASURED:
        _MEASURED.append(load_lifetimes())
    return _MEASURED[0]


def _clean_runs(cluster: MeasuredCluster) -> list[float]:
    """Durations of the completed runs in which no VM was revoked."""
    return [r.duration_s for r in cluster.completed if cluster.revocations_of(r.zone, r.run) == 0]


def _golden_min(function: Callable[[float], float], low: float, high: float, iterations: int = 60) -> float:
    ratio = (math.sqrt(5) - 1) / 2
    a, b = low, high
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = function(c), function(d)
    for _ in range(iterations):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = function(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = function(d)
    return (a + b) / 2


def _shape_fit(points: dict[int, list[float]], sharpness: float, capacity: float) -> ShapeFit:
    """The per-worker rate that best fits ``points`` (log residuals) for one saturation shape."""
    groups = [(n, len(rates), statistics.fmean(math.log(x) for x in rates)) for n, rates in points.items()]
    # the spread of each cluster size around its own mean: the part of the residuals no shape can remove
    within = sum((math.log(x) - mean) ** 2 for workers, _, mean in groups for x in points[workers])

    def sse(rate: float) -> float:
        total = within
        for workers, count, mean in groups:
            # the one-worker runs are the paper's single-GPU baseline: no parameter server
            predicted = rate if workers == 1 else blended(workers * rate, capacity, sharpness)
            total += count * (math.log(predicted) - mean) ** 2
        return total

    guess = min(statistics.fmean(rates) / n for n, rates in points.items())
    rate = _golden_min(sse, 0.8 * guess, 1.5 * guess)
    return ShapeFit(sharpness, capacity, rate, sse(rate))


def fit_throughput(data: TrainingData) -> tuple[ThroughputModel, dict[int, tuple[float, ...]]]:
    """Fit r, C and k on the clean K80 runs; keep every shape inside the 95 % likelihood region.

    The runs reach 35 steps/s (8 K80s), far from any PS ceiling, so they bound C from below only; the
    line rate of the PS machine bounds it from above. The likelihood ratio (normal log errors, variance
    profiled out) keeps the shapes with ``N·ln(SSE/SSE_min) <= chi2_2(95 %)``.
    """
    points: dict[int, list[float]] = {}
    k80_on_demand = price_per_hour("nvidia-tesla-k80", "on-demand")
    points[1] = [ICAC19_TRAIN_STEPS / (cost / k80_on_demand * 3600.0) for cost in data.single_k80_costs]
    for cluster in data.clusters():
        points.setdefault(cluster.workers, []).extend(ICAC19_TRAIN_STEPS / d for d in _clean_runs(cluster))
    if any(not rates for rates in points.values()) or len(points) < 2:
        raise ValueError("throughput fit failed: the training data hold no clean runs of two cluster sizes")
    shapes = [_shape_fit(points, k, c) for k in SHARPNESS_GRID for c in CAPACITY_GRID]
    best = min(shapes, key=lambda s: s.sse)
    runs = sum(len(rates) for rates in points.values())
    plausible = tuple(s for s in shapes if runs * math.log(s.sse / best.sse) <= _CHI2_2DF_95)
    residuals = [
        math.log((best.per_worker if n == 1 else blended(n * best.per_worker, best.capacity, best.sharpness)) / x)
        for n, rates in points.items()
        for x in rates
    ]
    model = ThroughputModel(
        per_worker_steps_s=best.per_worker,
        ps_capacity_steps_s=best.capacity,
        sharpness=best.sharpness,
        noise_sigma=statistics.pstdev(residuals),
        plausible=plausible,
        max_fitted_workers=max(points),
    )
    return model, {n: tuple(v) for n, v in sorted(points.items())}


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
    return [(point.time, point.survival) for point in kaplan_meier_band(observations)]


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
    observations = pooled_k80_observations(data)
    curve = kaplan_meier(observations)
    return FittedModel(throughput, fit_startup(data), km_quantile_sample(curve), points, tuple(observations))
