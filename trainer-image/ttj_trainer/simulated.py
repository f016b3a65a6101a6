"""Simulated GPU time, on the ttj local cluster only: its kubelet tells each container its pool's GPU speed.

A local cluster pool with ``step-seconds: 0.2`` and ``speed: 2.0`` sets ``TTJ_LOCAL_SIMULATED_STEP_SECONDS=0.2``
and ``TTJ_LOCAL_SIMULATED_SPEED=2`` in its pods, and a worker there sleeps 0.1 s per step, so that a worker on
a faster pool steps faster. GKE sets neither: there this is 0 and the GPU's own speed counts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ttj_contract import LocalSimulation


def gpu_seconds_per_step(env: Mapping[str, str] = os.environ) -> float:
    """Simulated GPU seconds one training step takes on this node (0 when not on a local cluster pool)."""
    try:
        base = float(env.get(LocalSimulation.STEP_SECONDS, "0") or 0)
        speed = float(env.get(LocalSimulation.SPEED, "1") or 1)
    except ValueError:
        return 0.0
    return base / speed if base > 0 and speed > 0 else 0.0
