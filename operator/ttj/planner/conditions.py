"""Kubernetes-shaped conditions, set by one pure function."""

from __future__ import annotations

from dataclasses import dataclass

from ttj.api.models import Condition

#: Order in which conditions are listed in status.
CONDITION_ORDER = [
    "Invalid",
    "Created",
    "Running",
    "Recovering",
    "ChiefElected",
    "BudgetExceeded",
    "Succeeded",
    "Failed",
]


@dataclass(frozen=True)
class Wanted:
    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str = ""


def set_conditions(
    previous: list[Condition] | None, wanted: list[Wanted], now: str, generation: int | None
) -> tuple[list[Condition], list[Wanted]]:
    """The new condition list and the conditions that changed (status or reason).

    ``lastTransitionTime`` moves only when the status flips; conditions not wanted any more are
    dropped. A message-only change updates the message without being a transition.
    """
    before = {c.type: c for c in previous or []}
    result: list[Condition] = []
    changed: list[Wanted] = []
    for want in sorted(wanted, key=lambda w: CONDITION_ORDER.index(w.type) if w.type in CONDITION_ORDER else 99):
        old = before.get(want.type)
        flipped = old is None or old.status != want.status
        if flipped or old is None or old.reason != want.reason:
            changed.append(want)
        result.append(
            Condition(
                type=want.type,
                status=want.status,
                reason=want.reason,
                message=want.message,
                last_transition_time=now if flipped or old is None else old.last_transition_time,
                observed_generation=generation,
            )
        )
    return result, changed
