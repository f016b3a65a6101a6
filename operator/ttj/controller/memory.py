"""What the operator keeps in memory between passes: per job, its wake-up, the fingerprint of its spec and the
objects as our own writes left them while a watch lags; the loop the handlers share. Never across restarts:
nothing a pass needs is kept only here."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ttj.planner.observed import json_copy

JobKey = tuple[str, str]


def resource_version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


@dataclass(frozen=True)
class OwnWrite:
    """An object as our own writes left it, and the resourceVersions it had before them: while a watch still
    shows one of those, a pass plans on this instead, as the watch has not delivered our writes yet."""

    before: frozenset[str]
    obj: dict[str, Any]

    def over(self, seen: Mapping[str, Any]) -> dict[str, Any] | None:
        """A copy of ours when ``seen`` is from before our writes; None once the watch shows them (or newer)."""
        return json_copy(self.obj) if resource_version(seen) in self.before else None


class Wakeup(asyncio.Event):
    """What wakes a job's daemon: set now, or after a delay. Clearing it (a pass starts, and sees everything
    there is) also cancels a pending delayed set."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: asyncio.TimerHandle | None = None

    def set_after(self, seconds: float) -> None:
        """Set in ``seconds``, unless already due sooner; call in the loop that waits on it."""
        if self.pending is None:
            self.pending = asyncio.get_running_loop().call_later(seconds, self._due)

    def _due(self) -> None:
        self.pending = None
        self.set()

    def clear(self) -> None:
        super().clear()
        if self.pending is not None:
            self.pending.cancel()
            self.pending = None


@dataclass
class JobMemory:
    """What the operator keeps of one job between its passes, while its daemon runs (never across restarts)."""

    #: Set to run a pass: now (a change of the job or of one of its children), or soon (of a node).
    wakeup: Wakeup = field(default_factory=Wakeup)
    #: The job's metadata and spec as the jobs index last saw them: a pass is due only when they change.
    seen: str = ""
    #: The job as the last status write left it, over the resourceVersion that write was based on.
    written: OwnWrite | None = None
    #: The chief's Lease as our latest writes of it left it, over the versions it had before each. A pass that
    #: elects a chief right after a pass that published the worker counts would otherwise send a stale
    #: precondition, and lose a round trip to the 409 and the pass planned again.
    lease_written: OwnWrite | None = None
    #: The children as our passes' creates and pod label patches left them, (kind, name) → the API's answer,
    #: until the watch shows them: a pass planned on an index without them writes them again. At start-up, with
    #: the watches seconds behind, each job's pods were sent three times over, and its chief labelled four.
    written_children: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    #: The PS Deployments as the planner reads them, (kind, name) → what it reads, as of the last event that woke
    #: a pass (see :meth:`ttj.controller.context.OperatorContext.child_news`).
    children_seen: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)


@dataclass
class OperatorState:
    """All the operator holds in memory besides the indexes; nothing a pass needs is kept only here."""

    #: The operator's event loop: the watches' threads and the passes' request threads hand their results to it.
    loop: asyncio.AbstractEventLoop | None = None
    jobs: dict[JobKey, JobMemory] = field(default_factory=dict)
    #: Tasks the operator runs besides kopf's (kept referenced until done).
    background: set[asyncio.Task[None]] = field(default_factory=set)

    #: node name → the (job, pod name) of the pods indexed on it, until their deletion is seen: which jobs a node's
    #: change concerns. A pod's nodeName never changes once set.
    pods_on_nodes: dict[str, set[tuple[JobKey, str]]] = field(default_factory=dict)

    def job(self, key: JobKey) -> JobMemory:
        return self.jobs.setdefault(key, JobMemory())

    def pod_bound(self, node: str, key: JobKey, pod: str) -> None:
        self.pods_on_nodes.setdefault(node, set()).add((key, pod))

    def pod_gone(self, node: str, key: JobKey, pod: str) -> None:
        on_node = self.pods_on_nodes.get(node)
        if on_node is not None:
            on_node.discard((key, pod))
            if not on_node:
                del self.pods_on_nodes[node]

    def jobs_on_node(self, node: str) -> list[JobKey]:
        """The jobs with pods indexed on ``node`` (perhaps a few more: pods deleted while a watch was away)."""
        return sorted({key for key, _pod in self.pods_on_nodes.get(node, ())})

    def call_soon(self, callback: Callable[[], Any]) -> None:
        """Run ``callback`` in the operator's loop, from any thread (asyncio's events are not thread-safe:
        set from another thread, a waiter can miss it and the loop is not woken); at once when called from the
        loop itself (most handlers run there) or before it runs."""
        if self.loop is None or _running_loop() is self.loop:
            callback()
        elif not self.loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: the operator is stopping
                self.loop.call_soon_threadsafe(callback)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # a thread without a loop: one of kopf's executor threads
        return None
