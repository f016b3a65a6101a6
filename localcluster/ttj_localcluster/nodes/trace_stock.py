"""A pool's stock following a spot availability trace: out while the trace says 0, back while it says more.

The trace (``trace=FILE`` of a pool, the format of :mod:`ttj.preemption.traces`) is replayed from its
``trace-start`` at the pool's ``time-scale`` (trace seconds per real second). A stock-out and a restock are
the fleet's own (:meth:`~.fleet.NodeFleet.stock_out`: new nodes fail and the live ones are preempted with
GKE's notice; :meth:`~.fleet.NodeFleet.restock`: back to the pool's size), so the autoscaler's Events and
the preemption records read as for a stock-out asked by hand. Past the trace's end its last sample holds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

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
    timer at a time, however long the trace), each at its offset from the start so that delays do not add up.

    ``stock_out(pool, cause)`` and ``restock(pool)`` are the fleet's."""

    def __init__(
        self,
        pool: NodePool,
        trace: SpotTrace,
        *,
        timers: Timers,
        stop: threading.Event,
        stock_out: Callable[[str, str], object],
        restock: Callable[[str], object],
    ) -> None:
        self.pool = pool
        self.trace = trace
        self.timers = timers
        self.stop = stop
        self.stock_out = stock_out
        self.restock = restock
        self.changes = timed_changes(pool, trace)
        self._origin = 0.0

    def start(self) -> None:
        self._origin = time.monotonic()
        self._time(0)

    def _time(self, index: int) -> None:
        if index < len(self.changes) and not self.stop.is_set():
            due = self._origin + self.changes[index].after_seconds
            self.timers.later(due - time.monotonic(), self._apply, index)

    def _apply(self, index: int) -> None:
        if self.stop.is_set():
            return
        change = self.changes[index]
        try:
            if change.in_stock:
                log.info(
                    "pool %s back in stock (trace %s at %gs)", self.pool.name, self.trace.name, change.trace_seconds
                )
                self.restock(self.pool.name)
            else:
                self.stock_out(
                    self.pool.name,
                    f"stock-out of pool {self.pool.name} (trace {self.trace.name} at {change.trace_seconds:g}s)",
                )
        finally:
            self._time(index + 1)
