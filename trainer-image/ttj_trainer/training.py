"""A worker's own training: one step of the program against the parameter servers at ttj's learning-rate
scale, its metrics and log lines, and the heartbeat and step report that tell the chief (and, under
``updateShare``, every worker) which workers are active and how fast each steps."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
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
#: updateShare's smoothing: a slot's step rate is measured over its reports of about this many seconds.
STEP_RATE_WINDOW_SECONDS = 30.0
#: A slot's rate is known once its reports span this long (a few heartbeats).
MIN_RATE_SPAN_SECONDS = 3.0
#: updateShare's clamp on a worker's share of the updates (see :func:`update_share`).
SHARE_BOUNDS = (0.25, 4.0)


class LossNotFiniteError(Exception):
    """The loss, or a value about to be checkpointed, is NaN or infinite: the trainer stops
    (``TrainerExit.LOSS_NOT_FINITE``) and no checkpoint holds it."""


@dataclass(frozen=True)
class SlotRate:
    """A slot's measured pace: ``updates`` per second of wall time (its share of the updates, what status
    shows) and its ``speed``, steps per second of stepping (the time it spent in training steps: a chief's
    pauses to checkpoint and evaluate are not in it; elsewhere the two are about equal)."""

    updates: float
    speed: float


def update_share(own: float | None, fleet: Iterable[SlotRate], bounds: tuple[float, float] = SHARE_BOUNDS) -> float:
    """A worker's share of the asynchronous updates relative to an even share: its speed ``own`` over the
    update-weighted mean speed of the active workers (Σ updates·speed / Σ updates, Σr²/Σr when nobody
    pauses: the speed of the worker an update comes from, on average), clamped to ``bounds``.

    Staleness-aware asynchronous SGD: a worker's gradient is about as stale as the updates the others apply
    while it computes it, which grows as its speed falls, so a slow worker takes proportionally smaller
    steps. Weighting the mean by updates keeps the average step per update at the base rate (in a uniform
    fleet every factor is 1); the plain mean would raise it by mean(r²)/mean(r)². Speed rather than updates
    per wall second in the numerator: a chief that pauses to checkpoint applies fewer updates, but each of its
    gradients is no staler. The clamp bounds what a wrong measurement can do (a rate measured across a
    stall, a worker that just started). 1 when ``own`` or every rate is unknown."""
    measured = [slot for slot in fleet if slot.updates > 0 and slot.speed > 0]
    if own is None or own <= 0 or not measured:
        return 1.0
    weighted_mean = sum(slot.updates * slot.speed for slot in measured) / sum(slot.updates for slot in measured)
    low, high = bounds
    return min(high, max(low, own / weighted_mean))


def learning_rate_factor(
    scaling: str,
    desired: int,
    active: int | None,
    *,
    own_speed: float | None = None,
    fleet: Iterable[SlotRate] = (),
    batch_ratio: float = 1.0,
) -> float:
    """ttj's factor on a worker's learning rate.

    ``activeWorkers``: min(1, active/desired), the paper's adaptive rate (an unknown active count means all
    are active). ``updateShare``: that × :func:`update_share` of ``own_speed`` in ``fleet`` × ``batch_ratio``
    (the worker's batch size over the job's: the linear scaling rule for a group with its own batch size)."""
    if scaling == LearningRateScaling.NONE:
        return 1.0
    heads = 1.0 if active is None else min(1.0, active / max(1, desired))
    if scaling != LearningRateScaling.UPDATE_SHARE:
        return heads
    return heads * update_share(own_speed, fleet) * batch_ratio


def scaled_learning_rate(base: float, scaling: str, desired: int, active: int | None) -> float:
    """The paper's adaptive rate: base × min(1, active/desired); an unknown active count means all are active."""
    return base * learning_rate_factor(scaling, desired, active)


@dataclass(frozen=True)
class StepReport:
    """One slot's row of the step reports on PS 0 (:data:`ttj_trainer.parameters.STEP_REPORTS`)."""

    time: float
    steps: float
    started: float
    stepping: float


class StepRates:
    """Each slot's pace, from the reports its worker writes once a heartbeat period: steps over the writer's
    own clock, and over its own seconds of stepping, across the latest :data:`STEP_RATE_WINDOW_SECONDS`. A
    report from another process (a replaced pod: another start time, or a count or clock going back) starts
    the slot's history again."""

    def __init__(self, window_seconds: float = STEP_RATE_WINDOW_SECONDS) -> None:
        self.window_seconds = window_seconds
        self.history: dict[int, deque[StepReport]] = {}

    def observe(self, rows: Sequence[Sequence[float]]) -> None:
        for slot, row in enumerate(rows):
            report = StepReport(*(float(value) for value in row[:4]))
            if report.time <= 0:  # never reported, or cleared by a worker that finished
                self.history.pop(slot, None)
                continue
            seen = self.history.get(slot)
            if seen and (
                report.started != seen[-1].started or report.steps < seen[-1].steps or report.time < seen[-1].time
            ):
                seen = None
            if seen is None:
                seen = self.history[slot] = deque()
            if seen and report.time == seen[-1].time:
                continue
            seen.append(report)
            while len(seen) > 2 and seen[1].time <= report.time - self.window_seconds:
                seen.popleft()

    def rates(self, now: float, fresh_seconds: float = HEARTBEAT_FRESH_SECONDS) -> dict[int, SlotRate]:
        """The pace of every slot whose latest report is fresh and whose reports span long enough."""
        rates = {}
        for slot, seen in self.history.items():
            first, last = seen[0], seen[-1]
            span, steps, stepping = last.time - first.time, last.steps - first.steps, last.stepping - first.stepping
            if last.time > now - fresh_seconds and span >= MIN_RATE_SPAN_SECONDS:
                rates[slot] = SlotRate(steps / span, steps / stepping if stepping > 0 else 0.0)
        return rates


class Training:
    """The global step as this worker last saw it, and the steps it took."""

    def __init__(
        self,
        cfg: TrainerConfig,
        *,
        simulated_gpu_seconds: float | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """``simulated_gpu_seconds``: per step, default from the local cluster's environment (simulated.py);
        ``clock`` (wall time, for the heartbeats and step reports) and ``sleep`` (the simulated GPU time)
        are replaceable to run workers of different speeds on one simulated clock."""
        self.cfg = cfg
        self.global_step = 0
        self.step_times: deque[float] = deque(maxlen=200)
        self.simulated_gpu_seconds = (
            simulated.gpu_seconds_per_step() if simulated_gpu_seconds is None else simulated_gpu_seconds
        )
        self.clock = clock
        self.sleep = sleep
        self.last_heartbeat = 0.0
        self.local_steps = 0
        self.stepping_seconds = 0.0  # in training steps, simulated GPU time included
        self.started = clock()  # tells this process's step reports from a predecessor's in the slot
        self.step_rates = StepRates()
        #: The latest pace of every active slot (replaced whole, read by the Lease watcher's thread).
        self.slot_rates: dict[int, SlotRate] = {}
        self.batch_ratio = cfg.batch_size / cfg.job_batch_size
        #: The losses of the steps since the last progress report (sum, count) and the mean that report gave:
        #: the step adds, the Lease watcher's thread takes.
        self._losses = (0.0, 0)
        self._reported_loss: float | None = None
        self._losses_lock = threading.Lock()

    def mean_loss_since_last_report(self) -> float | None:
        """The mean loss of this worker's steps since the previous call, or the previous mean when it took none
        meanwhile (a checkpoint pause reports the same loss, not none)."""
        with self._losses_lock:
            total, count = self._losses
            self._losses = (0.0, 0)
            if count:
                self._reported_loss = total / count
            return self._reported_loss

    @property
    def stepped(self) -> bool:
        """This process has taken a training step (its model is traced)."""
        return bool(self.step_times)

    def learning_rate_scale(self, view: LeaseView | None) -> float:
        """ttj's factor on the program's own learning rate (:func:`learning_rate_factor`)."""
        active = view.active_workers if view is not None else None
        desired = view.desired_workers if view is not None and view.desired_workers else self.cfg.desired_workers
        rates = self.slot_rates
        own = rates.get(self.cfg.task_index)
        return learning_rate_factor(
            self.cfg.learning_rate_scaling,
            desired,
            active,
            own_speed=own.speed if own is not None else None,
            fleet=rates.values(),
            batch_ratio=self.batch_ratio,
        )

    def heartbeat(self, store: Any, chief: bool) -> None:
        """Marks this slot active on the PS and reports its step count (once a period); the chief counts the
        fresh marks, and the chief (for its report) and every worker under updateShare read the step rates."""
        now = self.clock()
        if now - self.last_heartbeat < HEARTBEAT_PERIOD_SECONDS:
            return
        store.report_steps(self.cfg.task_index, now, self.local_steps, self.started, self.stepping_seconds)
        store.heartbeat(self.cfg.task_index, now)
        self.last_heartbeat = now
        if chief:
            fresh = int(np.sum(store.heartbeats() > now - HEARTBEAT_FRESH_SECONDS))
            metrics.active_workers.set(fresh)
        if chief or self.cfg.learning_rate_scaling == LearningRateScaling.UPDATE_SHARE:
            self.step_rates.observe(store.step_reports())
            self.slot_rates = self.step_rates.rates(now)

    def step(self, store: Any, batch: tuple[Any, Any] | Any, view: LeaseView | None, chief: bool) -> int:
        """One training step on ``batch`` (features, labels), or on the next batch of an iterator the step
        reads from; returns the global step after it."""
        scale = self.learning_rate_scale(view)
        rate = scale * self.cfg.learning_rate if not self.cfg.program else scale
        began = self.clock()
        try:
            if isinstance(batch, tuple):
                loss, step = store.train_step(*batch, scale)
            else:
                loss, step = store.train_step_reading(batch, scale)
        except StopIteration as err:
            from ttj_trainer.program import ProgramError  # the program module loads Keras

            raise ProgramError(
                f"train_input's dataset ended after {self.local_steps} steps of this worker: training runs by "
                "steps (trainSteps), not epochs, so the dataset must repeat()"
            ) from err
        self.stepping_seconds += max(0.0, self.clock() - began) + self.simulated_gpu_seconds
        if not math.isfinite(loss):
            raise LossNotFiniteError(
                f"the loss is {loss} at global step {step}: stopped; the last good checkpoint stays"
            )
        if self.simulated_gpu_seconds:  # local cluster only (simulated.py); never on GKE
            self.sleep(self.simulated_gpu_seconds)
        self.global_step = step
        self.local_steps += 1
        with self._losses_lock:
            total, count = self._losses
            self._losses = (total + loss, count + 1)
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
            event(log, "training", global_step=step, loss=round(loss, 4), learning_rate=rate, scale=scale, chief=chief)
        return step
