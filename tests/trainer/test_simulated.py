"""The local cluster's simulated GPU time as the trainer reads it (no TensorFlow)."""

from __future__ import annotations

from ttj_contract import LocalSimulation
from ttj_trainer.simulated import gpu_seconds_per_step


def test_gpu_seconds_per_step() -> None:
    speed, step = LocalSimulation.SPEED, LocalSimulation.STEP_SECONDS
    cases = [
        ({}, 0.0),  # GKE: neither is set
        ({speed: "2"}, 0.0),  # a speed alone adds no time
        ({step: "0.2"}, 0.2),
        ({step: "0.2", speed: "2"}, 0.1),
        ({step: "0.3", speed: "0.5"}, 0.6),
        ({step: "0.2", speed: "0"}, 0.0),
        ({step: "fast"}, 0.0),
    ]
    assert [round(gpu_seconds_per_step(env), 9) for env, _ in cases] == [expected for _, expected in cases]
