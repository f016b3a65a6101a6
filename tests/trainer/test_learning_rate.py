"""updateShare: each worker's learning-rate factor from its share of the updates (tables), the step rates
measured from the step reports, and two workers of different simulated speeds against one parameter store."""

from __future__ import annotations

import dataclasses
import heapq
from typing import NamedTuple

import pytest

from ttj_contract import LearningRateScaling
from ttj_trainer.training import StepRates, learning_rate_factor, update_share

UPDATE_SHARES = [
    # (own rate, every active worker's rate, share)
    (5.0, [5.0, 5.0, 5.0, 5.0], 1.0),  # a uniform fleet: every factor is 1
    (1.0, [1.0, 1.0, 3.0, 3.0], 0.4),  # update-weighted mean (1+1+9+9)/8 = 2.5
    (3.0, [1.0, 1.0, 3.0, 3.0], 1.2),
    (None, [1.0, 3.0], 1.0),  # own rate not measured yet
    (2.0, [], 1.0),  # nobody measured
    (2.0, [2.0, 0.0], 1.0),  # a worker that took no step counts for nothing
    (0.1, [0.1, 10.0, 10.0], 0.25),  # clamped: 0.1/9.95
    (8.0, [8.0] + [1.0] * 200, 4.0),  # clamped: 8/1.27
    (4.0, [4.0] + [1.0] * 99, pytest.approx(4 / (115 / 103))),  # just inside
]


@pytest.mark.parametrize(("own", "rates", "share"), UPDATE_SHARES)
def test_update_share(own: float | None, rates: list[float], share: float) -> None:
    assert update_share(own, rates) == pytest.approx(share)


def test_the_update_weighted_mean_keeps_the_average_step_per_update_at_the_base_rate() -> None:
    rates = [1.0, 1.0, 3.0, 3.0, 2.0]  # no share clamped
    per_update = sum(rate * update_share(rate, rates) for rate in rates) / sum(rates)
    assert per_update == pytest.approx(1.0)


class Factor(NamedTuple):
    scaling: str
    desired: int
    active: int | None
    own: float | None
    rates: list[float]
    batch_ratio: float
    factor: float


FACTORS = [
    Factor(LearningRateScaling.NONE, 4, 1, 1.0, [1.0, 3.0], 2.0, 1.0),
    Factor(LearningRateScaling.ACTIVE_WORKERS, 4, 2, 1.0, [1.0, 3.0], 2.0, 0.5),  # speed and batch do not count
    Factor(LearningRateScaling.ACTIVE_WORKERS, 4, None, None, [], 1.0, 1.0),
    Factor(LearningRateScaling.UPDATE_SHARE, 4, 4, 3.0, [3.0, 3.0, 3.0, 3.0], 1.0, 1.0),
    Factor(LearningRateScaling.UPDATE_SHARE, 4, 2, 1.0, [1.0, 1.0, 3.0, 3.0], 1.0, 0.5 * 0.4),
    Factor(LearningRateScaling.UPDATE_SHARE, 4, 3, 1.0, [1.0, 1.0, 3.0], 2.0, 0.75 * (5 / 11) * 2),  # batch 2x job's
    Factor(LearningRateScaling.UPDATE_SHARE, 4, 6, None, [1.0, 3.0], 0.5, 0.5),  # more active than desired: 1
]


@pytest.mark.parametrize("case", FACTORS)
def test_learning_rate_factor(case: Factor) -> None:
    got = learning_rate_factor(
        case.scaling, case.desired, case.active, own_rate=case.own, rates=case.rates, batch_ratio=case.batch_ratio
    )
    assert got == pytest.approx(case.factor)


def test_step_rates_from_reports() -> None:
    """Rows (time, steps, started) per slot: the rate over the window, a replaced pod starting again, a slot
    gone stale or cleared, and one whose reports span too little."""
    rates = StepRates(window_seconds=30.0)
    for second in range(0, 41):
        rates.observe(
            [
                (100.0 + second, 2.0 * second, 99.0),  # 2 steps/s all along
                (100.0 + second, 5.0 * second if second < 20 else 3.0 * (second - 20), 99.0 if second < 20 else 119.5),
                (100.0 + min(second, 10), 10.0 * min(second, 10), 99.0),  # stopped reporting at 110
                (100.0 + second, float(second), 99.0) if second < 40 else (0.0, 0.0, 0.0),  # cleared at the end
                (140.0, 7.0, 139.0) if second == 40 else (0.0, 0.0, 0.0),  # one report only
            ]
        )
    assert rates.rates(now=140.5) == {0: pytest.approx(2.0), 1: pytest.approx(3.0)}
    assert len(rates.history[0]) <= 32  # a window's worth, not the whole history


def test_a_replaced_pod_whose_count_passes_its_predecessors_still_starts_again() -> None:
    rates = StepRates()
    rates.observe([(100.0, 50.0, 1.0)])
    rates.observe([(104.0, 60.0, 1.0)])
    rates.observe([(108.0, 70.0, 2.0)])  # another process: only its own rows count
    rates.observe([(112.0, 82.0, 2.0)])
    assert rates.rates(now=112.0) == {0: pytest.approx(3.0)}


def test_two_workers_of_different_speeds_get_factors_in_the_order_of_their_speeds() -> None:
    """Two Training objects of one job, slots 0 and 1, step against one real parameter store in this process
    at simulated speeds 1 and 3 (0.3 and 0.1 simulated GPU seconds a step) on one simulated clock: under
    updateShare each factor is r·Σr/Σr² with r = 10/3 and 10 steps/s: 0.4 for the slow worker, 1.2 for the fast."""
    from ttj_trainer import program, simulated
    from ttj_trainer.config import load, program_of
    from ttj_trainer.parameters import ParameterStore
    from ttj_trainer.selfcheck import sample_env
    from ttj_trainer.training import Training

    cfg = load(sample_env() | {"TTJ_MODEL": "small-cnn", "TTJ_DATASET": "synthetic", "TTJ_BATCH_SIZE": "4"})
    cfg = dataclasses.replace(cfg, learning_rate_scaling=LearningRateScaling.UPDATE_SHARE, desired_workers=2)
    entrypoint, args = program_of(cfg)
    prepared = program.prepare(entrypoint, program.load(entrypoint, args), program.InputContext(0, 2, 4, 0))
    store = ParameterStore.of(
        prepared, ps_count=1, worker_slots=2, local_device="/device:CPU:0", ps_device_of=lambda _i: "/device:CPU:0"
    )
    store.open()
    store.assign_all(store.initial_values())

    now = [1000.0]
    wakes: list[tuple[float, int]] = []

    def worker(slot: int, speed: float) -> Training:
        def sleep(seconds: float) -> None:
            heapq.heappush(wakes, (now[0] + seconds, slot))

        gpu_seconds = simulated.gpu_seconds_per_step(
            {"TTJ_LOCAL_SIMULATED_STEP_SECONDS": "0.3", "TTJ_LOCAL_SIMULATED_SPEED": str(speed)}
        )
        return Training(
            dataclasses.replace(cfg, task_index=slot),
            simulated_gpu_seconds=gpu_seconds,
            clock=lambda: now[0],
            sleep=sleep,
        )

    workers = [worker(0, 1.0), worker(1, 3.0)]
    wakes = [(now[0], 0), (now[0], 1)]
    batch = prepared.first
    while now[0] < 1012.0:
        now[0], slot = heapq.heappop(wakes)
        workers[slot].heartbeat(store, chief=slot == 0)
        workers[slot].step(store, batch, None, chief=slot == 0)
    slow, fast = (w.learning_rate_scale(None) for w in workers)
    assert slow < 1.0 < fast
    assert slow == pytest.approx(0.4, rel=0.1)
    assert fast == pytest.approx(1.2, rel=0.1)
    # The chief (slot 0) measured both slots, as it publishes them.
    assert workers[0].slot_rates == {0: pytest.approx(1 / 0.3, rel=0.1), 1: pytest.approx(1 / 0.1, rel=0.1)}
    assert store.global_step() == workers[0].local_steps + workers[1].local_steps
