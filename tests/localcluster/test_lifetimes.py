"""The lifetime model reproduces the ICAC'19 measured revocation shares."""

from __future__ import annotations

import math
import random

import pytest

from ttj.preemption.lifetimes import (
    PREEMPTIBLE_MAX_LIFETIME_S,
    LifetimeDistribution,
    load_lifetimes,
    parse_lifetimes,
)

HOUR = 3600.0
#: the share of 20 000 draws may differ from the file's share by this much (binomial sd ≈ 0.003)
TOLERANCE = 0.02


def test_file_sections_and_shares() -> None:
    measured = load_lifetimes()
    counts = {t: sum(1 for m in measured if m.gpu_type == t) for t in ("K80", "P100", "V100")}
    assert counts == {"K80": 64, "P100": 40, "V100": 48}
    k80 = LifetimeDistribution.for_accelerator("nvidia-tesla-k80", measured=measured)
    # Facts of the file (2019 sections): 5 of 64 K80s revoked within 2 h, 44 lived to 24 h.
    assert k80.revoked_within(2 * HOUR) == pytest.approx(5 / 64)
    assert k80.survived_limit() == pytest.approx(44 / 64)


@pytest.mark.parametrize(
    "accelerator", ["nvidia-tesla-k80", "nvidia-tesla-p100", "nvidia-tesla-v100", "nvidia-tesla-t4"]
)
def test_samples_reproduce_revocation_shares(accelerator: str) -> None:
    dist = LifetimeDistribution.for_accelerator(accelerator)
    rng = random.Random(7)
    draws = [dist.sample(rng) for _ in range(20_000)]
    for hours in (2, 6, 12, 20):
        drawn = sum(1 for d in draws if d <= hours * HOUR) / len(draws)
        assert drawn == pytest.approx(dist.revoked_within(hours * HOUR), abs=TOLERANCE), hours
    survived = sum(1 for d in draws if d >= PREEMPTIBLE_MAX_LIFETIME_S) / len(draws)
    assert survived == pytest.approx(dist.survived_limit(), abs=TOLERANCE)
    assert max(draws) == PREEMPTIBLE_MAX_LIFETIME_S  # preemptible VMs end at 24 h


def test_pooled_shares_match_paper_shape() -> None:
    dist = LifetimeDistribution.for_accelerator(None)
    assert dist.sample_size == 152
    assert dist.survived_limit() == pytest.approx(0.78, abs=0.01)  # paper: ~70 % live the full 24 h
    assert dist.revoked_within(2 * HOUR) == pytest.approx(7 / 152)


def test_spot_survivors_are_not_preempted_and_seed_reproduces() -> None:
    dist = LifetimeDistribution.for_accelerator("nvidia-tesla-k80", provisioning="spot")
    a = [dist.sample(random.Random(3)) for _ in range(5)]
    b = [dist.sample(random.Random(3)) for _ in range(5)]
    assert a == b
    draws = [dist.sample(random.Random(i)) for i in range(500)]
    assert any(math.isinf(d) for d in draws)
    assert all(d < PREEMPTIBLE_MAX_LIFETIME_S or math.isinf(d) for d in draws)


def test_bad_file_is_reported() -> None:
    with pytest.raises(ValueError, match="no K80"):
        parse_lifetimes(["nothing,here,"])
    with pytest.raises(ValueError, match="bad timestamps"):
        parse_lifetimes(["K80,,", "VM name,Start,Terminate", "x,yesterday,today"])
