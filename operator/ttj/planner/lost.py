"""What one stage finds lost and another accounts for: a value below the stages, so that neither imports the
other (:mod:`ttj.planner.stages.parameter_servers` finds a parameter server replaced, :mod:`ttj.planner.stages.losses`
records what that cost)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerLoss:
    """A parameter server whose model state was lost: ``old`` replaced by the running ``new``."""

    index: int
    old: str
    new: str
