"""The loop's pulse: the Lease is renewed only while the loop beats, or inside a bounded allowance."""

from __future__ import annotations

import pytest

from ttj_trainer import liveness
from ttj_trainer.liveness import Liveness


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(liveness.time, "monotonic", fake)
    return fake


def test_a_loop_that_stopped_beating_for_a_lease_is_not_alive(clock: Clock) -> None:
    pulse = Liveness(grace_seconds=15)
    clock.now += 14
    assert pulse.alive(15, stepped=True)
    clock.now += 2
    assert not pulse.alive(15, stepped=True)


def test_an_allowance_keeps_the_loop_alive_through_one_long_call_and_no_longer(clock: Clock) -> None:
    pulse = Liveness(grace_seconds=15)
    seen = []
    with pulse.allowance(600):
        clock.now += 300  # a long export: nothing beats meanwhile
        seen.append(pulse.alive(15, stepped=True))
        clock.now += 301  # past the allowance: a hung export loses the Lease
        seen.append(pulse.alive(15, stepped=True))
    seen.append(pulse.alive(15, stepped=True))  # leaving the allowance is a beat
    clock.now += 16
    seen.append(pulse.alive(15, stepped=True))
    assert seen == [True, False, True, False]
