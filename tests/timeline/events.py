"""The planner's Events as the API server keeps them, for the timeline's tests."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from ttj.planner import EmitEvent
from ttj_contract import KIND, format_time


def as_kept(events: Iterable[EmitEvent], now: datetime) -> list[dict[str, Any]]:
    """``events``, posted at ``now`` about the job ``mnist``, as the API server returns them."""
    return [
        {
            "type": event.type,
            "reason": event.reason,
            "message": event.message,
            "lastTimestamp": format_time(now),
            "involvedObject": {"kind": KIND, "name": "mnist"},
        }
        for event in events
    ]
