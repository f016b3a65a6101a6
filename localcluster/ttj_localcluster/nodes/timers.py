"""Delayed actions of the fleet (timed preemptions, pool restores, container restarts), cancelled together."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class Timers:
    """``later(delay, function, *args)`` on daemon timer threads; failures are logged unless stopping."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self._lock = threading.Lock()
        self._timers: list[threading.Timer] = []

    def later(self, delay: float, function: Callable[..., Any], *args: Any) -> None:
        def guarded() -> None:
            try:
                function(*args)
            except Exception:
                if not self.stop.is_set():
                    log.exception("local cluster: %s%r failed", getattr(function, "__name__", function), args)

        timer = threading.Timer(max(0.0, delay), guarded)
        timer.daemon = True
        with self._lock:
            self._timers = [t for t in self._timers if t.is_alive()]
            self._timers.append(timer)
        timer.start()

    def cancel_all(self) -> None:
        with self._lock:
            timers, self._timers = self._timers, []
        for timer in timers:
            timer.cancel()
