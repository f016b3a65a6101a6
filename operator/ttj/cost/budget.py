"""Budget decisions for ``spec.budget.maxCostUSD``: how many workers may still be added, and when to stop.

Pure: the planner calls :func:`budget_decision` with the ledger in ``status.cost`` (see
:mod:`ttj.cost.model`) and acts on the result:

- ``allow_new_workers``: create at most this many worker pods now (scale-out and replacements alike),
  so that the projected cost — what is spent, plus the running and pending pods and the new workers
  for ``horizon_seconds`` — stays within the budget; ``None`` when nothing limits them.
- ``exceeded``: the cost has reached the budget (or will within ``stop_lead_seconds``, the time the
  chief needs to write its checkpoint after SIGTERM): create nothing, terminate the workers gracefully
  so the chief checkpoints on SIGTERM, set the ``BudgetExceeded`` condition (reason
  ``BudgetExceeded``, message :attr:`BudgetDecision.message` plus the final checkpoint), and once no
  worker runs, finish the job as Failed with reason ``BudgetExceeded``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ttj.api.models import CostStatus, TransientTrainingJobSpec

#: How far ahead the running rate is projected when deciding to add workers: long enough for a new
#: GPU node to boot and the worker to do useful work before the budget would stop it.
DEFAULT_HORIZON_SECONDS = 900.0


@dataclass(frozen=True)
class BudgetDecision:
    """What the budget allows now."""

    #: Workers that may be created now (never more than were asked for); None: no limit.
    allow_new_workers: int | None
    #: The budget is used up: checkpoint and stop.
    exceeded: bool
    #: For the BudgetExceeded condition or an event; empty when the budget does not constrain anything.
    message: str
    spent_usd: float
    max_cost_usd: float | None
    #: Spent plus the running rate (with the allowed new workers) over the horizon.
    projected_usd: float

    def cap(self, new_workers: int) -> int:
        """How many of ``new_workers`` may be created now."""
        return new_workers if self.allow_new_workers is None else min(new_workers, self.allow_new_workers)


def budget_decision(
    spec: TransientTrainingJobSpec,
    cost: CostStatus | None,
    *,
    requested_new_workers: int,
    worker_usd_per_hour: float,
    pending_workers: int = 0,
    pending_usd_per_hour: float | None = None,
    horizon_seconds: float = DEFAULT_HORIZON_SECONDS,
    stop_lead_seconds: float = 0.0,
) -> BudgetDecision:
    """Decides how many of ``requested_new_workers`` may be created, and whether the job must stop.

    ``cost`` is the ledger just accrued (``status.cost``); its ``usdPerHour`` is the rate of the pods
    running now, to which the cross-zone traffic's latest rate (``crossZone.usdPerHour``) is added.
    ``worker_usd_per_hour`` is what one more worker costs (``ttj.cost.model.worker_hourly_rate``);
    ``pending_workers`` are created but not running yet, so they will cost that much soon too;
    ``pending_usd_per_hour``, when given, is what they will cost together (workers of different groups).
    """
    requested = max(0, requested_new_workers)
    spent = cost.usd if cost is not None else 0.0
    running_rate = cost.usd_per_hour if cost is not None else 0.0
    if cost is not None and cost.cross_zone is not None:
        running_rate += cost.cross_zone.usd_per_hour  # the workers' traffic with PS in other zones goes on too
    limit = spec.budget.max_cost_usd if spec.budget is not None else None
    pending_rate = (
        max(0, pending_workers) * worker_usd_per_hour if pending_usd_per_hour is None else pending_usd_per_hour
    )
    committed_rate = running_rate + pending_rate
    if limit is None:
        projected = spent + (committed_rate + requested * worker_usd_per_hour) * horizon_seconds / 3600.0
        return BudgetDecision(requested, False, "", spent, None, projected)

    if spent + running_rate * max(0.0, stop_lead_seconds) / 3600.0 >= limit:
        return BudgetDecision(
            allow_new_workers=0,
            exceeded=True,
            message=f"cost ${spent:.2f} reached budget.maxCostUSD ${limit:.2f}: checkpointing and stopping the job",
            spent_usd=spent,
            max_cost_usd=limit,
            projected_usd=spent,
        )

    hours = horizon_seconds / 3600.0
    committed = spent + committed_rate * hours
    if worker_usd_per_hour <= 0 or hours <= 0:
        allowed = requested
    else:
        room = (limit - committed) / (worker_usd_per_hour * hours)
        allowed = max(0, min(requested, math.floor(room + 1e-9)))
    projected = committed + allowed * worker_usd_per_hour * hours
    message = ""
    if allowed < requested:
        message = (
            f"budget.maxCostUSD ${limit:.2f}: adding {requested} worker(s) at ${worker_usd_per_hour:.3f}/h each "
            f"would bring the projected cost over {horizon_seconds / 60:.0f} min to "
            f"${committed + requested * worker_usd_per_hour * hours:.2f} (spent ${spent:.2f}); adding {allowed}"
        )
    return BudgetDecision(allowed, False, message, spent, limit, projected)


def spending_decision(spec: TransientTrainingJobSpec, cost: CostStatus) -> BudgetDecision | None:
    """The budget when only the spending is known (no prices, hence no projection): stop once the cost
    reaches ``budget.maxCostUSD``, never hold new workers back. None when the job has no budget."""
    limit = spec.budget.max_cost_usd if spec.budget is not None else None
    if limit is None:
        return None
    exceeded = cost.usd >= limit
    return BudgetDecision(
        allow_new_workers=None,
        exceeded=exceeded,
        message=f"cost ${cost.usd:.2f} reached budget.maxCostUSD ${limit:.2f}" if exceeded else "",
        spent_usd=cost.usd,
        max_cost_usd=limit,
        projected_usd=cost.usd,
    )
