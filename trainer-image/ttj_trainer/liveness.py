"""The training loop's pulse and its end: the Lease is renewed only while the loop beats, and SIGTERM ends it.

The worker's loop beats at every turn (and a long wait or an evaluation beats as it goes); the Lease watcher
asks :meth:`Liveness.alive` before each renewal, so a renewed Lease means a working loop, not a live thread.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ttj_contract import CHIEF_STARTUP_SECONDS
from ttj_trainer.logs import event

log = logging.getLogger("ttj_trainer.worker")

#: How long one piece of work the loop cannot beat through (exporting the final model: a deep network's
#: ``.keras`` file and SavedModel take minutes on a busy CPU) may hold the loop without losing the Lease;
#: bounded, so that a hung export still does.
EXPORT_ALLOWANCE_SECONDS = 600.0


class Terminated(Exception):
    """SIGTERM arrived while waiting."""


class Liveness:
    def __init__(self, grace_seconds: float) -> None:
        self.grace_seconds = grace_seconds
        self.terminating = threading.Event()
        self.sigterm_at = 0.0
        self.beat_at = time.monotonic()
        self.allowed_until = 0.0

    def beat(self) -> None:
        self.beat_at = time.monotonic()

    def alive(self, lease_seconds: float, stepped: bool) -> bool:
        """The loop turned within a lease (before its first step, within the start-up allowance: the first
        step traces the model), or is inside an :meth:`allowance`: renewing now says something true."""
        now = time.monotonic()
        limit = lease_seconds if stepped else max(lease_seconds, CHIEF_STARTUP_SECONDS)
        return now - self.beat_at < limit or now < self.allowed_until

    @contextmanager
    def allowance(self, seconds: float) -> Iterator[None]:
        """The loop counts as alive for up to ``seconds`` while inside: one long call it cannot beat through."""
        self.beat()
        self.allowed_until = time.monotonic() + seconds
        try:
            yield
        finally:
            self.allowed_until = 0.0
            self.beat()

    def sleep(self, seconds: float) -> None:
        """Waits, beating; raises Terminated when SIGTERM comes meanwhile."""
        self.beat()
        if self.terminating.wait(seconds):
            raise Terminated
        self.beat()

    def on_sigterm(self, *_: Any) -> None:
        if self.terminating.is_set():
            return
        self.terminating.set()
        self.sigterm_at = time.monotonic()
        # If the PS or the API hangs, still leave inside the grace period Kubernetes gives us.
        grace = self.grace_seconds

        def force_exit() -> None:
            time.sleep(grace)
            event(log, "could not stop cleanly within the grace period; exiting", logging.ERROR, grace=grace)
            os._exit(143)

        threading.Thread(target=force_exit, name="sigterm-watchdog", daemon=True).start()
