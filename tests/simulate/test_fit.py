"""The models fitted on the bundled ICAC'19 files reproduce the measured figures they come from."""

from __future__ import annotations

import statistics

import pytest

from ttj.preemption.lifetimes import PREEMPTIBLE_MAX_LIFETIME_S
from ttj.simulate.fit import (
    PS_NETWORK_CEILING_STEPS_S,
    FittedModel,
    fit,
    kaplan_meier,
    kaplan_meier_band,
    km_quantile_sample,
)
from ttj.simulate.icac19 import ICAC19_TRAIN_STEPS, TrainingData, load_training_data
from ttj.simulate.report import measured_summaries

#: The fitted throughput must match each cluster size's measured mean steps/s this closely.
THROUGHPUT_TOLERANCE = 0.02


@pytest.fixture(scope="module")
def data() -> TrainingData:
    return load_training_data()


@pytest.fixture(scope="module")
def fitted(data: TrainingData) -> FittedModel:
    return fit(data)


def test_files_hold_the_paper_runs(data: TrainingData) -> None:
    for workers in (2, 4):
        cluster = data.transient[workers]
        assert cluster.launched_runs == 32
        assert len(cluster.completed) == 31
        assert cluster.failed_runs == 1  # one run per configuration lost its master
    assert [len(c.completed) for c in data.on_demand.values()] == [10, 10, 10]
    assert len(data.single_k80_costs) == 10


def test_measured_r1_overheads_are_the_papers_table_iv(data: TrainingData) -> None:
    measured = {m.config: m for m in measured_summaries(data)}
    assert measured["K80 transient x2"].r1_time_overhead == pytest.approx(0.617, abs=0.001)
    assert measured["K80 transient x2"].r1_runs == 5
    assert measured["K80 transient x4"].r1_time_overhead == pytest.approx(0.153, abs=0.005)
    assert measured["K80 transient x4"].r1_runs == 8


def test_throughput_reproduces_measured_rates(fitted: FittedModel) -> None:
    for workers, rates in fitted.fit_points.items():
        measured = statistics.fmean(rates)
        ps = 0 if workers == 1 else 1  # the one-worker runs are the paper's single-GPU baseline, without a PS
        predicted = fitted.throughput.steps_per_second(workers, ps_replicas=ps)
        assert predicted == pytest.approx(measured, rel=THROUGHPUT_TOLERANCE), workers
    # the PS bottleneck: per-worker throughput falls as workers are added
    per_worker = [fitted.throughput.steps_per_second(n) / n for n in (1, 2, 4, 8, 16, 32)]
    assert per_worker == sorted(per_worker, reverse=True)
    assert 0 < fitted.throughput.noise_sigma < 0.05


def test_startup_and_lifetimes(fitted: FittedModel) -> None:
    assert 200 < fitted.startup_s < 400  # VM boot + TensorFlow start, from vm_data uptimes
    pooled = fitted.lifetimes("nvidia-tesla-k80", "preemptible")
    measured = fitted.lifetimes("nvidia-tesla-k80", "preemptible", source="measured")
    assert pooled is not None
    assert measured is not None
    # the training VMs saw more early revocations than the lifetime study alone
    assert pooled.revoked_within(3600) > measured.revoked_within(3600)
    assert fitted.lifetimes("nvidia-tesla-k80", "on-demand") is None
    assert ICAC19_TRAIN_STEPS == 64_000


def test_kaplan_meier_on_a_known_sample() -> None:
    # 4 servers: revoked at 1 h and 3 h, one censored at 2 h, one alive at the limit
    curve = kaplan_meier([(3600, True), (7200, False), (10800, True), (PREEMPTIBLE_MAX_LIFETIME_S, False)])
    assert curve == [(3600, 0.75), (10800, pytest.approx(0.375))]
    sample = km_quantile_sample(curve, size=8)
    assert sample.count(3600) == 2
    assert sample.count(10800) == 3
    assert sample.count(PREEMPTIBLE_MAX_LIFETIME_S) == 3


def test_ps_capacity_is_bounded_by_data_below_and_physics_above(fitted: FittedModel) -> None:
    model = fitted.throughput
    low, high = model.ps_capacity_range
    # 8 K80s measured at 35 steps/s scale near-linearly: the PS serves more than that ...
    assert 35 < low <= model.ps_capacity_steps_s <= high
    # ... and never more than its machine's network can carry for ResNet-32 (0.46 M float32 pushed + pulled)
    assert high <= PS_NETWORK_CEILING_STEPS_S
    assert pytest.approx(1e9 / (4 * 0.46e6)) == PS_NETWORK_CEILING_STEPS_S
    # sharper than the harmonic form: the data and the fast-GPU hold-outs reject k = 1
    assert all(shape.sharpness > 1 for shape in model.plausible)


def test_predictions_outside_the_fitted_domain_are_flagged_with_an_interval(fitted: FittedModel) -> None:
    model = fitted.throughput
    inside = model.predict(4, "nvidia-tesla-k80")
    assert not inside.extrapolated
    assert inside.low <= inside.central <= inside.high
    for workers, accelerator in ((16, "nvidia-tesla-k80"), (4, "nvidia-tesla-v100"), (1, "nvidia-tesla-t4")):
        outside = model.predict(workers, accelerator)
        assert outside.extrapolated, (workers, accelerator)
        assert outside.why
        assert outside.low < outside.central < outside.high
    # four fast GPUs saturate the PS: well below four times one of them
    one, four = model.predict(1, "nvidia-tesla-v100"), model.predict(4, "nvidia-tesla-v100")
    assert four.central < 0.8 * 4 * one.central


def test_revocation_bands_and_trust(fitted: FittedModel) -> None:
    k80 = fitted.revocation_summary("nvidia-tesla-k80")
    v100 = fitted.revocation_summary("nvidia-tesla-v100")
    assert k80.trusted
    assert k80.revocations >= 20
    assert not v100.trusted
    assert v100.revocations == 5
    survival, low, high = k80.survival_1h
    assert low < survival < high
    pessimistic = fitted.lifetimes("nvidia-tesla-k80", "preemptible", band="low")
    optimistic = fitted.lifetimes("nvidia-tesla-k80", "preemptible", band="high")
    assert pessimistic is not None
    assert optimistic is not None
    assert pessimistic.revoked_within(3600) > optimistic.revoked_within(3600)


def test_greenwood_band_on_a_known_sample() -> None:
    points = kaplan_meier_band([(1.0, True), (2.0, True), (3.0, False), (4.0, True), (5.0, False)])
    first = points[0]
    assert first.survival == pytest.approx(0.8)
    # Greenwood: var = S^2 * d / (n (n - d)) = 0.64 * 1/20
    assert first.low < 0.8 < first.high
    assert 0.0 <= points[-1].low <= points[-1].survival <= points[-1].high <= 1.0
