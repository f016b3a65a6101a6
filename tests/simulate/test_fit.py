"""The models fitted on the bundled ICAC'19 files reproduce the measured figures they come from."""

from __future__ import annotations

import statistics

import pytest

from ttj.preemption.lifetimes import PREEMPTIBLE_MAX_LIFETIME_S
from ttj.simulate.fit import FittedModel, fit, kaplan_meier, km_quantile_sample
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
        assert fitted.throughput.steps_per_second(workers) == pytest.approx(measured, rel=THROUGHPUT_TOLERANCE), workers
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
