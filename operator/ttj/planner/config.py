"""The operator settings that shape the planner's decisions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from ttj.api.models import CostStatus, TransientTrainingJobSpec
from ttj.cost.prices import PriceTable
from ttj.planner.observed import Observed
from ttj_contract import CHIEF_STARTUP_SECONDS

#: A cost override for simulators: (spec, observed, previous cost status, now) → new cost status.
CostFunction = Callable[[TransientTrainingJobSpec, Observed, CostStatus | None, datetime], CostStatus]


@dataclass(frozen=True)
class PlannerConfig:
    """Operator settings that shape decisions."""

    #: Lease duration the operator writes; a chief silent for longer than this is replaced.
    lease_duration_seconds: int = 30
    #: A newly elected chief that has never renewed is given this long to start (TensorFlow start-up).
    chief_startup_seconds: int = CHIEF_STARTUP_SECONDS
    #: A node NotReady (or a bound pod's node missing) for this long means its pods are lost.
    node_grace_seconds: int = 30
    #: Replan at least this often even when nothing changes (leases expire without events).
    resync_seconds: float = 60.0
    #: Prices for cost accrual and budgets (ttj.cost); None leaves status.cost at zero and budgets unchecked.
    prices: PriceTable | None = None
    #: Instead of ``prices``: a function computing status.cost; the budget then only stops the job.
    cost: CostFunction | None = None
