"""Spot availability traces: the file format, and when a pool replaying one runs out and comes back (pure).

The format is that of the measured traces published with "Can't Be Late" (NSDI 2024): JSON
``{"metadata": {"gap_seconds": G}, "data": [n0, n1, ...]}``, where ``data[i]`` spot instances could be had at
``i·G`` seconds from the trace's start (0: none could). The local cluster's pools and the simulator both read
traces through this module, so the format lives in one place.

A replay reads a sample as *in stock* (n > 0) or *out* (n = 0); the published traces sample one instance at
a time, so their counts are 0 or 1 and a count says nothing about how many nodes a pool could get.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class SpotTrace:
    """A trace's samples: ``counts[i]`` instances available at ``i · gap_seconds`` trace seconds."""

    name: str
    gap_seconds: float
    counts: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.gap_seconds <= 0 or not self.counts or min(self.counts) < 0:
            raise ValueError(f"spot trace {self.name}: needs gap_seconds > 0 and at least one count, all >= 0")

    @property
    def seconds(self) -> float:
        """Trace seconds covered: the last sample holds for one gap."""
        return len(self.counts) * self.gap_seconds

    @property
    def availability(self) -> float:
        """Share of the samples in stock."""
        return sum(1 for n in self.counts if n > 0) / len(self.counts)

    def in_stock_at(self, seconds: float) -> bool:
        """Whether the sample covering ``seconds`` (trace seconds from its start) is in stock; past the end,
        the last sample holds."""
        index = min(len(self.counts) - 1, max(0, int(seconds // self.gap_seconds)))
        return self.counts[index] > 0

    def changes(self, start: float = 0.0) -> list[StockChange]:
        """The stock changes after ``start`` trace seconds, as trace seconds from ``start``: one per sample
        whose in-stock reading differs from the one before it (the state at ``start`` is
        :meth:`in_stock_at`)."""
        first = max(0, int(start // self.gap_seconds))
        changes: list[StockChange] = []
        previous = self.in_stock_at(start)
        for index in range(first + 1, len(self.counts)):
            in_stock = self.counts[index] > 0
            if in_stock != previous:
                changes.append(StockChange(index * self.gap_seconds - start, in_stock))
                previous = in_stock
        return changes


@dataclass(frozen=True)
class StockChange:
    """At ``after_seconds`` (trace seconds from the replay's start) the pool runs out or comes back."""

    after_seconds: float
    in_stock: bool


def parse_trace(document: Any, name: str) -> SpotTrace:
    """A trace from its decoded JSON; ``ValueError`` naming ``name`` when it is not one."""
    try:
        if not isinstance(document, Mapping) or not isinstance(document["metadata"], Mapping):
            raise TypeError("not a mapping with 'metadata'")
        gap = float(document["metadata"]["gap_seconds"])
        data = document["data"]
        if not isinstance(data, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in data):
            raise TypeError("'data' is not a list of integers")
        return SpotTrace(name, gap, tuple(data))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"{name}: not a spot trace (JSON {{'metadata': {{'gap_seconds': G}}, 'data': [n0, n1, ...]}}): {exc}"
        ) from None


def load_trace(path: str | Path) -> SpotTrace:
    """The trace in the JSON file ``path``, named by the file's stem."""
    source = Path(path)
    try:
        document = json.loads(source.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{source}: cannot read a spot trace: {exc}") from None
    trace = parse_trace(document, str(source))
    return SpotTrace(source.stem, trace.gap_seconds, trace.counts)
