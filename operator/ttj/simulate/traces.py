"""Measured spot availability traces read as the capacity of a job's spot group, for the deadline replay.

The file format lives in :mod:`ttj.preemption.traces` (the local cluster's pools read it there too). Replayed
as a spot group's capacity: 0 is an outage (its spot workers are preempted and none can start), anything more is
a group with capacity for all its workers.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from pathlib import Path

from ttj.preemption.traces import load_trace as read_trace


@dataclass(frozen=True)
class CapacityTrace:
    name: str
    gap_seconds: float
    capacity: tuple[int, ...]
    #: how many samples before index i had capacity, and how many outages had begun before it
    _up_before: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _outages_before: tuple[int, ...] = field(init=False, repr=False, compare=False)
    #: indexes of the samples without capacity, in order
    _out_samples: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        up, outages = [0], [0]
        for index, count in enumerate(self.capacity):
            up.append(up[-1] + (count > 0))
            began = count == 0 and (index == 0 or self.capacity[index - 1] > 0)
            outages.append(outages[-1] + began)
        object.__setattr__(self, "_up_before", tuple(up))
        object.__setattr__(self, "_outages_before", tuple(outages))
        object.__setattr__(self, "_out_samples", tuple(i for i, n in enumerate(self.capacity) if n == 0))

    @property
    def seconds(self) -> float:
        return len(self.capacity) * self.gap_seconds

    @property
    def availability(self) -> float:
        return self._up_before[-1] / len(self.capacity) if self.capacity else 0.0

    def up_throughout(self, start: float, end: float) -> bool:
        """Whether every sample overlapping ``[start, end)`` seconds had capacity (past the end: none had)."""
        first = int(start // self.gap_seconds)
        last = int(-(-end // self.gap_seconds))  # the first sample at or after ``end``
        if first < 0 or last > len(self.capacity):
            return False
        index = bisect_left(self._out_samples, first)
        return index == len(self._out_samples) or self._out_samples[index] >= last

    def share_up(self, start: float, end: float) -> float:
        """Share of the samples in ``[start, end)`` seconds with capacity."""
        first, last = int(start // self.gap_seconds), min(len(self.capacity), int(end // self.gap_seconds))
        return (self._up_before[last] - self._up_before[first]) / (last - first) if last > first else 0.0

    def observed(self, until: float, since: float = 0.0) -> tuple[float, float]:
        """What could be known at ``until`` seconds of the samples from ``since``: the share of time with
        capacity, and the mean outage in seconds (0 when none was seen; an outage already under way at
        ``since`` counts from there)."""
        samples = min(len(self.capacity), int(until // self.gap_seconds))
        first = min(samples, max(0, int(since // self.gap_seconds)))
        if samples == first:
            return 1.0, 0.0
        up = self._up_before[samples] - self._up_before[first]
        outages = self._outages_before[samples] - self._outages_before[first]
        if first > 0 and self.capacity[first] == 0 and self.capacity[first - 1] == 0:
            outages += 1
        down = samples - first - up
        return up / (samples - first), down * self.gap_seconds / outages if outages else 0.0


def load_trace(path: Path, name: str | None = None) -> CapacityTrace:
    """The trace in ``path`` (read by :mod:`ttj.preemption.traces`, the one reader of the format), named
    ``name`` or by the file's stem."""
    trace = read_trace(path)
    return CapacityTrace(name or path.stem, trace.gap_seconds, trace.counts)


def load_traces(root: Path) -> list[CapacityTrace]:
    """Every ``*.json`` trace under ``root`` (or ``root`` itself), named by its path below ``root``."""
    if root.is_file():
        return [load_trace(root)]
    paths = sorted(root.rglob("*.json"))
    if not paths:
        raise ValueError(f"no spot traces (*.json) under {root}")
    return [load_trace(p, str(p.relative_to(root).with_suffix(""))) for p in paths]
