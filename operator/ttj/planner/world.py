"""One job and its children in memory: operator passes without a cluster, for tests and the simulator.

A pass plans, applies the writes in order through the :class:`~ttj.planner.interpreter.Interpreter` (the
API rules the planner relies on), then writes the status and keeps the events, as the controller does;
a :class:`Conflict` drops the rest of the pass, status included, to be planned again.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ttj.planner.actions import EmitEvent, Write
from ttj.planner.core import Plan, PlannerConfig, plan
from ttj.planner.interpreter import Conflict, Interpreter, WriteHook
from ttj.planner.observed import Obj, Observed

__all__ = ["Conflict", "World"]


@dataclass
class World:
    """The job, its children as the planner observes them, and what the passes told."""

    job: dict[str, Any]
    observed: Observed = field(default_factory=Observed)
    #: Called after each write that changed an object (see :data:`~ttj.planner.interpreter.WriteHook`).
    on_applied: WriteHook | None = None
    events: list[EmitEvent] = field(default_factory=list)
    job_deleted: bool = False
    api: Interpreter = field(init=False)

    def __post_init__(self) -> None:
        self.api = Interpreter(self.observed, self.on_applied)

    @property
    def revision(self) -> int:
        """Moves with every change a write made: equal before and after a pass that changed nothing."""
        return self.api.revision

    def pod(self, name: str) -> Obj | None:
        return self.api.pod(name)

    def apply(self, write: Write, now: datetime) -> bool:
        return self.api.apply(write, now)

    def reconcile(self, now: datetime, config: PlannerConfig | None = None) -> Plan:
        """Plan, apply every write, write the status when due, keep the events: one operator pass."""
        result = plan(self.job, self.observed, now, config)
        try:
            for write in result.writes:
                self.api.apply(write, now)
        except Conflict:
            return result
        if result.status_due:
            self.job["status"] = copy.deepcopy(result.status)
        self.events.extend(result.events)
        self.job_deleted = self.job_deleted or result.delete_job
        return result
