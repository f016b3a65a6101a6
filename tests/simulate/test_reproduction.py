"""Simulating the paper's own setup reproduces the ICAC'19 measured averages within the stated error.

Stated error (docs/simulate.md): mean time and mean cost within 3 % of the measured means for every
measured configuration, except 2 transient workers: time within 5 % (the measured masters were revoked
1 time in 32, their workers 6 times; the model treats every VM alike, so fewer simulated runs complete
after a revocation) and cost within 10 % (that file bills the whole cluster for the whole run even
after a worker is revoked; the simulator bills each VM's uptime, as the 4-worker file does); the
time overhead of a run with one revocation within 2 standard errors of the measured mean (5 and 8
runs); completion rates consistent with the measured 31 of 32.
"""

from __future__ import annotations

import math

import pytest

from ttj.api.models import TransientTrainingJobSpec
from ttj.simulate.engine import SimJob
from ttj.simulate.fit import fit
from ttj.simulate.icac19 import load_training_data
from ttj.simulate.report import MeasuredSummary, Summary
from ttj.simulate.study import Study

TIME_TOLERANCE = {"K80 transient x2": 0.05}
DEFAULT_TIME_TOLERANCE = 0.03
COST_TOLERANCE = {"K80 transient x2": 0.10}
DEFAULT_COST_TOLERANCE = 0.03


@pytest.fixture(scope="module")
def pairs() -> list[tuple[MeasuredSummary, Summary]]:
    data = load_training_data()
    template = SimJob(
        "icac19",
        TransientTrainingJobSpec.model_validate({"trainSteps": 64000, "checkpoint": {"uri": "gs://ttj-test/ckpt"}}),
    )
    return Study(fit(data), runs=300, seed=1).validate(template, data)


def test_every_measured_configuration_is_simulated(pairs: list[tuple[MeasuredSummary, Summary]]) -> None:
    assert [m.config for m, _ in pairs] == [
        "K80 transient x2",
        "K80 transient x4",
        "K80 on-demand x2",
        "K80 on-demand x4",
        "K80 on-demand x8",
        "K80 on-demand x1 no PS",  # the paper's single-GPU baseline
    ]
    assert all(s.config == m.config and s.policy == "paper-static" for m, s in pairs)


def test_mean_time_and_cost(pairs: list[tuple[MeasuredSummary, Summary]]) -> None:
    for measured, simulated in pairs:
        time_tolerance = TIME_TOLERANCE.get(measured.config, DEFAULT_TIME_TOLERANCE)
        assert simulated.time_mean_s == pytest.approx(measured.time_mean_s, rel=time_tolerance), measured.config
        tolerance = COST_TOLERANCE.get(measured.config, DEFAULT_COST_TOLERANCE)
        assert simulated.cost_mean_usd == pytest.approx(measured.cost_mean_usd, rel=tolerance), measured.config


def test_revocation_overhead_and_completion(pairs: list[tuple[MeasuredSummary, Summary]]) -> None:
    for measured, simulated in pairs:
        if measured.provisioning == "on-demand":
            assert simulated.completion_rate == 1.0
            assert simulated.revocations_mean == 0
            continue
        assert not math.isnan(measured.r1_time_overhead_se)
        gap = abs(simulated.r1_time_overhead - measured.r1_time_overhead)
        assert gap <= 2 * measured.r1_time_overhead_se, measured.config
        # 31 of 32 measured: a simulated rate of 85 % or more makes that outcome plausible (p > 0.1)
        assert 0.85 <= simulated.completion_rate < 1.0, measured.config
        assert simulated.revocations_mean == pytest.approx(measured.revocations_mean, abs=0.15), measured.config
