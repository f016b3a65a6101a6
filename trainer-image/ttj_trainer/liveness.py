"""The training loop's pulse and its end: the Lease is renewed only while the loop beats, and SIGTERM ends it.

The worker's loop beats at every turn (and a long wait or an evaluation beats as it goes); the Lease watcher
asks :meth:`Liveness.alive` before each renewal, so a renewed Lease means a working loop, not a live thread.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from ttj_contract import CHIEF_STARTUP_SECONDS
from ttj_trainer.logs import event

log = logging.getLogger("ttj_trainer.worker")


class Terminated(Exception):
    """SIGTERM arrived while waiting."""


class Liveness:
    def __init__(self, grace_seconds: float) -> None:
        self.grace_seconds = grace_seconds
        self.terminating = threading.Event()
        self.sigterm_at = 0.0
        self.beat_at = time.monotonic()

    def beat(self) -> None:
        self.beat_at = time.monotonic()

    def alive(self, lease_seconds: float, stepped: bool) -> bool:
        """The loop turned within a lease (before its first step, within the start-up allowance: the first
        step traces the model): renewing now says something true."""
        limit = lease_seconds if stepped else max(lease_seconds, CHIEF_STARTUP_SECONDS)
        return time.monotonic() - self.beat_at < limit

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
