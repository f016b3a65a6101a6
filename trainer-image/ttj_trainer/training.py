"""A worker's own training: one step of the program against the parameter servers at ttj's learning-rate
scale, its metrics and log lines, and the heartbeat that tells the chief this worker is active."""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from typing import Any

import numpy as np

from ttj_contract import LearningRateScaling
from ttj_trainer import STARTED_AT, metrics, simulated
from ttj_trainer.config import TrainerConfig
from ttj_trainer.lease import LeaseView
from ttj_trainer.logs import event

log = logging.getLogger("ttj_trainer.worker")
HEARTBEAT_PERIOD_SECONDS = 1.0
HEARTBEAT_FRESH_SECONDS = 10.0


class LossNotFiniteError(Exception):
    """The loss, or a value about to be checkpointed, is NaN or infinite: the trainer stops
    (``TrainerExit.LOSS_NOT_FINITE``) and no checkpoint holds it."""


def scaled_learning_rate(base: float, scaling: str, desired: int, active: int | None) -> float:
    """The paper's adaptive rate: base × min(1, active/desired); an unknown active count means all are active."""
    if scaling == LearningRateScaling.NONE or active is None:
        return base
    return base * min(1.0, active / max(1, desired))


class Training:
    """The global step as this worker last saw it, and the steps it took."""

    def __init__(self, cfg: TrainerConfig) -> None:
        self.cfg = cfg
        self.global_step = 0
        self.step_times: deque[float] = deque(maxlen=200)
        self.simulated_gpu_seconds = simulated.gpu_seconds_per_step()
        self.last_heartbeat = 0.0

    @property
    def stepped(self) -> bool:
        """This process has taken a training step (its model is traced)."""
        return bool(self.step_times)

    def learning_rate_scale(self, view: LeaseView | None) -> float:
        """ttj's factor on the program's own learning rate: min(1, active/desired) under activeWorkers."""
        active = view.active_workers if view is not None else None
        desired = view.desired_workers if view is not None and view.desired_workers else self.cfg.desired_workers
        return scaled_learning_rate(1.0, self.cfg.learning_rate_scaling, desired, active)

    def heartbeat(self, store: Any, chief: bool) -> None:
        """Marks this slot active on the PS (once a period); the chief also counts the fresh marks."""
        now = time.time()
        if now - self.last_heartbeat < HEARTBEAT_PERIOD_SECONDS:
            return
        store.heartbeat(self.cfg.task_index, now)
        self.last_heartbeat = now
        if chief:
            fresh = int(np.sum(store.heartbeats() > now - HEARTBEAT_FRESH_SECONDS))
            metrics.active_workers.set(fresh)

    def step(self, store: Any, batch: tuple[Any, Any], view: LeaseView | None, chief: bool) -> int:
        """One training step on ``batch``; returns the global step after it."""
        features, labels = batch
        scale = self.learning_rate_scale(view)
        rate = scale * self.cfg.learning_rate if not self.cfg.program else scale
        loss, step = store.train_step(features, labels, scale)
        if not math.isfinite(loss):
            raise LossNotFiniteError(
                f"the loss is {loss} at global step {step}: stopped; the last good checkpoint stays"
            )
        if self.simulated_gpu_seconds:  # local cluster only (simulated.py); never on GKE
            time.sleep(self.simulated_gpu_seconds)
        self.global_step = step
        now = time.monotonic()
        if not self.step_times:
            event(log, "first step", global_step=step, seconds_since_start=round(now - STARTED_AT, 2))
        self.step_times.append(now)
        recent = [t for t in self.step_times if t > now - 10]
        metrics.local_steps.inc()
        metrics.loss.set(loss)
        metrics.global_step.set(step)
        metrics.learning_rate.set(rate)
        if len(recent) > 1:
            metrics.steps_per_second.set((len(recent) - 1) / max(recent[-1] - recent[0], 1e-6))
        if step % 100 == 0 or step >= self.cfg.train_steps:
            event(log, "training", global_step=step, loss=round(loss, 4), learning_rate=rate, chief=chief)
        return step
