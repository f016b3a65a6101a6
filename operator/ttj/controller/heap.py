"""What holds the operator's memory, for a measurement run only: with ``TTJ_HEAP_SUMMARY=FILE`` set, the
operator traces its allocations (``tracemalloc``, which slows it and costs memory of its own) and, on each
SIGUSR1, appends to FILE the lines of code holding the most memory and the most numerous kinds of object."""

from __future__ import annotations

import collections
import gc
import os
import signal
import time
import tracemalloc
from pathlib import Path
from types import FrameType

ENV = "TTJ_HEAP_SUMMARY"
#: Lines of code and kinds of object listed per summary.
TOP = 30


def install_from_env() -> bool:
    """Start tracing and summarise on SIGUSR1 when :data:`ENV` names a file; whether it does."""
    target = os.environ.get(ENV)
    if not target:
        return False
    tracemalloc.start()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        with Path(target).open("a") as out:
            out.write(summary())

    signal.signal(signal.SIGUSR1, on_signal)
    return True


def summary() -> str:
    """The traced memory by line of code, and the live objects by type."""
    snapshot = tracemalloc.take_snapshot().filter_traces(
        (tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen importlib._bootstrap>"))
    )
    stats = snapshot.statistics("lineno")
    total = sum(stat.size for stat in stats)
    lines = [f"== {time.strftime('%H:%M:%S')} traced {total / 2**20:.1f} MiB in {len(stats)} lines of code"]
    for stat in stats[:TOP]:
        frame = stat.traceback[0]
        lines.append(f"{stat.size / 2**20:8.2f} MiB {stat.count:9d} blocks  {frame.filename}:{frame.lineno}")
    kinds = collections.Counter(type(obj).__name__ for obj in gc.get_objects())
    lines.append(f"-- {sum(kinds.values())} objects tracked by the collector, by type")
    lines += [f"{count:9d}  {kind}" for kind, count in kinds.most_common(TOP)]
    return "\n".join(lines) + "\n"
