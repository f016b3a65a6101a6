"""A pool's stock following a spot availability trace: out while the trace says 0, back while it says more.

The trace (``trace=FILE`` of a pool, the format of :mod:`ttj.preemption.traces`) is replayed from its
``trace-start`` at the pool's ``time-scale`` (trace seconds per real second). A stock-out and a restock are
the fleet's own (:meth:`~.fleet.NodeFleet.stock_out`: new nodes fail and the live ones are preempted with
GKE's notice; :meth:`~.fleet.NodeFleet.restock`: back to the pool's size), so the autoscaler's Events and
the preemption records read as for a stock-out asked by hand. Past the trace's end its last sample holds.
The control's ``replay-trace`` starts the replay over now, from any trace second: a window of a trace is then
replayed from a moment of one's choosing (a job's start), whatever the fleet's start.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from ttj.kubeapi import JSON
from ttj.preemption.traces import SpotTrace, StockChange

from .pools import NodePool
from .timers import Timers

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TimedStockChange:
    """At ``after_seconds`` real seconds from the fleet's start the pool runs out (or comes back)."""

    after_seconds: float
    in_stock: bool
    #: where in the trace, for the log and the preemption's cause
    trace_seconds: float


def timed_changes(pool: NodePool, trace: SpotTrace) -> list[TimedStockChange]:
    """The trace's stock changes from the pool's ``trace_start``, in real seconds at its ``time_scale``."""
    return [_timed(pool, change) for change in trace.changes(pool.trace_start)]


def _timed(pool: NodePool, change: StockChange) -> TimedStockChange:
    return TimedStockChange(
        change.after_seconds / pool.time_scale, change.in_stock, pool.trace_start + change.after_seconds
    )


class TraceStock:
    """Replays one pool's trace: ``start()`` times the first change, and each change times the next (one
    timer at a time, however long the trace), each at its offset from the replay's start so that delays do
    not add up. ``replay(from_seconds)`` starts over now from another trace second; the changes timed by the
    replay before are dropped.

    ``stock_out(pool, cause)`` and ``restock(pool)`` are the fleet's; ``stocked_out()`` says the pool's stock."""

    def __init__(
        self,
        pool: NodePool,
        trace: SpotTrace,
        *,
        timers: Timers,
        stop: threading.Event,
        stock_out: Callable[[str, str], object],
        restock: Callable[[str], object],
        stocked_out: Callable[[], bool],
    ) -> None:
        self.pool = pool
        self.trace = trace
        self.timers = timers
        self.stop = stop
        self.stock_out = stock_out
        self.restock = restock
        self.stocked_out = stocked_out
        self._lock = threading.Lock()
        self._replay = _Replay(pool.trace_start, timed_changes(pool, trace), 0.0, 0)

    def start(self) -> None:
        with self._lock:
            self._replay = replace(self._replay, origin=time.monotonic())
            replay = self._replay
        self._time(replay, 0)

    def replay(self, from_seconds: float) -> JSON:
        """Replays the trace from ``from_seconds`` (trace seconds) now: the pool's stock becomes what the trace
        says there (a stock-out or a restock when it differs), then its changes follow."""
        if from_seconds < 0:
            raise ValueError("a trace is replayed from a second >= 0")
        changes = timed_changes(replace(self.pool, trace_start=from_seconds), self.trace)
        with self._lock:
            self._replay = _Replay(from_seconds, changes, time.monotonic(), self._replay.generation + 1)
            replay = self._replay
        in_stock = self.trace.in_stock_at(from_seconds)
        if in_stock and self.stocked_out():
            self.restock(self.pool.name)
        elif not in_stock and not self.stocked_out():
            self.stock_out(self.pool.name, self._cause(from_seconds))
        self._time(replay, 0)
        return {
            "pool": self.pool.name,
            "trace": self.trace.name,
            "fromSeconds": from_seconds,
            "stockedOut": not in_stock,
            "changes": [{"afterSeconds": c.after_seconds, "inStock": c.in_stock} for c in changes],
        }

    def _cause(self, trace_seconds: float) -> str:
        return f"stock-out of pool {self.pool.name} (trace {self.trace.name} at {trace_seconds:g}s)"

    def _time(self, replay: _Replay, index: int) -> None:
        if index < len(replay.changes) and not self.stop.is_set():
            due = replay.origin + replay.changes[index].after_seconds
            self.timers.later(due - time.monotonic(), self._apply, replay, index)

    def _apply(self, replay: _Replay, index: int) -> None:
        with self._lock:
            current = self._replay.generation == replay.generation
        if self.stop.is_set() or not current:
            return
        change = replay.changes[index]
        try:
            if change.in_stock:
                log.info(
                    "pool %s back in stock (trace %s at %gs)", self.pool.name, self.trace.name, change.trace_seconds
                )
                self.restock(self.pool.name)
            else:
                self.stock_out(self.pool.name, self._cause(change.trace_seconds))
        finally:
            self._time(replay, index + 1)


@dataclass(frozen=True)
class _Replay:
    """One replay of the trace: from which trace second, its changes, when it began (monotonic seconds)."""

    from_seconds: float
    changes: list[TimedStockChange]
    origin: float
    generation: int
