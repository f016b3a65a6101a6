"""The pure planner of the ttj operator.

``plan(job, observed, now, config) -> Plan`` is the whole decision procedure: a controller (the kopf
operator in ttj.controller) or a simulator (ttj.simulate) observes the job's children, calls it,
applies ``Plan.writes`` in order, writes ``Plan.status`` if it changed, then posts ``Plan.events``. It imports neither
kopf nor the Kubernetes client. :mod:`ttj.planner.world` applies actions to an in-memory
:class:`Observed`, for tests and simulation.
"""

from ttj.planner.actions import (
    CreateChild,
    DeleteChild,
    EmitEvent,
    LabelPod,
    Observation,
    Refusal,
    RemoveFinalizer,
    ReplaceChild,
    UpdateLease,
    Write,
)
from ttj.planner.classify import PodState, PodVerdict, classify_pod
from ttj.planner.config import CostFunction, PlannerConfig
from ttj.planner.core import Plan, plan
from ttj.planner.election import choose_chief, preemption_risk
from ttj.planner.observed import Observed, observed_child, observed_pod

__all__ = [
    "CostFunction",
    "CreateChild",
    "DeleteChild",
    "EmitEvent",
    "LabelPod",
    "Observation",
    "Observed",
    "Plan",
    "PlannerConfig",
    "PodState",
    "PodVerdict",
    "Refusal",
    "RemoveFinalizer",
    "ReplaceChild",
    "UpdateLease",
    "Write",
    "choose_chief",
    "classify_pod",
    "observed_child",
    "observed_pod",
    "plan",
    "preemption_risk",
]
