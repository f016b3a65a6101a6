"""The one back-off of the controller: the wait before the ``attempt``-th retry, doubling from a base up to a
cap, with "equal jitter" (uniform over the upper half) so that jobs failing together (an API outage) spread
out instead of retrying in lockstep, and never sooner than the server's Retry-After."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """By default, the wait after a pass that failed (an API error, a bug): its job's loop waits this long,
    wake-ups ignored."""

    base: float = 0.5
    cap: float = 30.0
    rng: random.Random = field(default_factory=random.Random, compare=False)

    def delay(self, attempt: int, retry_after_seconds: float | None = None) -> float:
        """Seconds before the ``attempt``-th retry (1 for the first)."""
        ceiling = min(self.cap, self.base * 2 ** max(0, min(attempt - 1, 16)))
        return max(self.rng.uniform(ceiling / 2, ceiling), retry_after_seconds or 0.0)


#: After writes the API refused (a quota, admission): the next pass retries them this much later.
REFUSED_WRITES_BACKOFF = Backoff(base=1.0, cap=60.0)
