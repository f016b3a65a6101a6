"""updateShare: each worker's learning-rate factor from its share of the updates (tables), the step rates
measured from the step reports, and two workers of different simulated speeds against one parameter store."""

from __future__ import annotations

import dataclasses
import heapq
from typing import NamedTuple

import pytest

from ttj_contract import LearningRateScaling
from ttj_trainer.training import SlotRate, StepRates, learning_rate_factor, update_share


def even(*rates: float) -> list[SlotRate]:
    """A fleet nobody pauses in: each worker's speed is its update rate."""
    return [SlotRate(rate, rate) for rate in rates]


UPDATE_SHARES = [
    # (own speed, every active worker's pace, share)
    (5.0, even(5.0, 5.0, 5.0, 5.0), 1.0),  # a uniform fleet: every factor is 1
    (1.0, even(1.0, 1.0, 3.0, 3.0), 0.4),  # update-weighted mean (1+1+9+9)/8 = 2.5
    (3.0, even(1.0, 1.0, 3.0, 3.0), 1.2),
    # a chief of speed 3 pausing a third of the time: fewer updates, but its gradients are no staler
    (3.0, [SlotRate(2.0, 3.0), *even(1.0, 1.0, 3.0)], 3.0 / ((2 * 3 + 1 + 1 + 9) / 7)),
    (3.0, [SlotRate(2.0, 3.0), *even(3.0, 3.0, 3.0)], 1.0),  # ... and in a uniform fleet it stays 1
    (None, even(1.0, 3.0), 1.0),  # own pace not measured yet
    (2.0, [], 1.0),  # nobody measured
    (2.0, [*even(2.0), SlotRate(0.0, 0.0)], 1.0),  # a worker that took no step counts for nothing
    (0.1, even(0.1, 10.0, 10.0), 0.25),  # clamped: 0.1/9.95
    (8.0, even(8.0, *[1.0] * 200), 4.0),  # clamped: 8/1.27
    (4.0, even(4.0, *[1.0] * 99), pytest.approx(4 / (115 / 103))),  # just inside
]


@pytest.mark.parametrize(("own", "fleet", "share"), UPDATE_SHARES)
def test_update_share(own: float | None, fleet: list[SlotRate], share: float) -> None:
    assert update_share(own, fleet) == pytest.approx(share)


def test_the_update_weighted_mean_keeps_the_average_step_per_update_at_the_base_rate() -> None:
    fleet = [SlotRate(1.0, 1.0), SlotRate(1.0, 1.5), SlotRate(3.0, 3.0), SlotRate(3.0, 3.0), SlotRate(2.0, 2.0)]
    per_update = sum(slot.updates * update_share(slot.speed, fleet) for slot in fleet) / sum(s.updates for s in fleet)
    assert per_update == pytest.approx(1.0)  # no share clamped here


class Factor(NamedTuple):
    scaling: str
    desired: int
    active: int | None
    own: float | None
    fleet: list[SlotRate]
    batch_ratio: float
    factor: float


FACTORS = [
    Factor(LearningRateScaling.NONE, 4, 1, 1.0, even(1.0, 3.0), 2.0, 1.0),
    Factor(LearningRateScaling.ACTIVE_WORKERS, 4, 2, 1.0, even(1.0, 3.0), 2.0, 0.5),  # speed and batch do not count
    Factor(LearningRateScaling.ACTIVE_WORKERS, 4, None, None, [], 1.0, 1.0),
    Factor(LearningRateScaling.UPDATE_SHARE, 4, 4, 3.0, even(3.0, 3.0, 3.0, 3.0), 1.0, 1.0),
    Factor(LearningRateScaling.UPDATE_SHARE, 4, 2, 1.0, even(1.0, 1.0, 3.0, 3.0), 1.0, 0.5 * 0.4),
    Factor(LearningRateScaling.UPDATE_SHARE, 4, 3, 1.0, even(1.0, 1.0, 3.0), 2.0, 0.75 * (5 / 11) * 2),  # batch 2x
    Factor(LearningRateScaling.UPDATE_SHARE, 4, 6, None, even(1.0, 3.0), 0.5, 0.5),  # more active than desired: 1
]


@pytest.mark.parametrize("case", FACTORS)
def test_learning_rate_factor(case: Factor) -> None:
    got = learning_rate_factor(
        case.scaling, case.desired, case.active, own_speed=case.own, fleet=case.fleet, batch_ratio=case.batch_ratio
    )
    assert got == pytest.approx(case.factor)


def test_step_rates_from_reports() -> None:
    """Rows (time, steps, started, seconds stepping) per slot: the pace over the window, a replaced pod starting
    again, a slot gone stale or cleared, and one whose reports span too little."""
    rates = StepRates(window_seconds=30.0)
    for second in range(41):
        replaced = second >= 20
        rates.observe(
            [
                (100.0 + second, 2.0 * second, 99.0, 0.5 * second),  # 2 steps/s, 4 steps/s stepping (a chief)
                (100.0 + second, 3.0 * (second - 20) if replaced else 5.0 * second, 119.5 if replaced else 99.0, 0.0),
                (100.0 + min(second, 10), 10.0 * min(second, 10), 99.0, 0.0),  # stopped reporting at 110
                (100.0 + second, float(second), 99.0, 0.0) if second < 40 else (0.0, 0.0, 0.0, 0.0),  # cleared
                (140.0, 7.0, 139.0, 1.0) if second == 40 else (0.0, 0.0, 0.0, 0.0),  # one report only
            ]
        )
    assert rates.rates(now=140.5) == {0: SlotRate(2.0, 4.0), 1: SlotRate(3.0, 0.0)}
    assert len(rates.history[0]) <= 32  # a window's worth, not the whole history


def test_a_replaced_pod_whose_count_passes_its_predecessors_still_starts_again() -> None:
    rates = StepRates()
    rates.observe([(100.0, 50.0, 1.0, 10.0)])
    rates.observe([(104.0, 60.0, 1.0, 14.0)])
    rates.observe([(108.0, 70.0, 2.0, 3.0)])  # another process: only its own rows count
    rates.observe([(112.0, 82.0, 2.0, 7.0)])
    assert rates.rates(now=112.0) == {0: SlotRate(3.0, 3.0)}


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
    measured = workers[0].slot_rates
    assert measured[0].updates == pytest.approx(1 / 0.3, rel=0.1)
    assert measured[1].updates == pytest.approx(1 / 0.1, rel=0.1)
    assert (measured[0].speed, measured[1].speed) == (pytest.approx(1 / 0.3), pytest.approx(1 / 0.1))
    assert store.global_step() == workers[0].local_steps + workers[1].local_steps
