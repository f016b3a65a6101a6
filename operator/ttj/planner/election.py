"""Choose the chief: the Running worker least likely to be preempted next.

The ICAC'19 lifetime measurements (152 preemptible K80 VMs, /work/shared/data/icac19/lifetime)
show a falling hazard with age — about 2 % per hour in a VM's first 8 hours, about 0.4 % per hour
after — and then the certain reclaim of every preemptible VM at 24 hours. So the best chief is on an
on-demand node, else on an older spot node, else on a preemptible node old enough to have
survived the early hours but well short of 24 h. Spot VMs have no 24-hour limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from ttj.planner.observed import Obj, labels_of, meta, name_of, pod_status
from ttj_contract import Provisioning, parse_time, provisioning_of

#: Preemption hazard per hour by VM age, from the ICAC'19 lifetime data (hazard in 2-hour buckets).
EARLY_HAZARD_PER_HOUR = 0.019  # age < 8 h
LATE_HAZARD_PER_HOUR = 0.004  # 8 h ≤ age < 24 h
EARLY_HOURS = 8.0
PREEMPTIBLE_MAX_HOURS = 24.0
#: How far ahead the chief should last: at least the time to the next checkpoint, and a handover costs more.
HORIZON_HOURS = 2.0


def preemption_risk(node: Obj | None, now: datetime, horizon_hours: float = HORIZON_HOURS) -> float:
    """Probability that the node is preempted within the horizon (0 for on-demand)."""
    kind = provisioning_of(labels_of(node or {}))
    if kind == Provisioning.ON_DEMAND:
        return 0.0
    created = parse_time(meta(node or {}).get("creationTimestamp"))
    age = max(0.0, (now - created).total_seconds() / 3600) if created else 0.0
    if kind == Provisioning.PREEMPTIBLE and age + horizon_hours >= PREEMPTIBLE_MAX_HOURS:
        # Certain reclaim inside the horizon; the nearer the 24 h mark, the worse.
        return 1.0 + (age + horizon_hours - PREEMPTIBLE_MAX_HOURS) / horizon_hours
    survive = 1.0
    remaining, at = horizon_hours, age
    while remaining > 1e-9:
        span = min(remaining, EARLY_HOURS - at) if at < EARLY_HOURS else remaining
        rate = EARLY_HAZARD_PER_HOUR if at < EARLY_HOURS else LATE_HAZARD_PER_HOUR
        survive *= (1.0 - rate) ** span
        at += span
        remaining -= span
    return 1.0 - survive


@dataclass(frozen=True)
class Candidate:
    pod: Obj
    node: Obj | None
    slot: int


def choose_chief(candidates: Sequence[Candidate], now: datetime) -> Candidate | None:
    """The safest running worker, by these rules in turn:

    1. on an on-demand node (a worker of an on-demand group lands on one: its pods require it);
    2. the lowest preemption risk over the horizon (:func:`preemption_risk`: the node's provisioning, age and
       the ICAC'19 lifetimes), so the node expected to live longest;
    3. the pod running longest, then the lowest slot (a stable choice).

    Speed never counts: a worker of a faster group is chosen only as the safer one. And an election happens
    only when there is no chief or it is lost (:mod:`ttj.planner.stages.chief`), never because a faster or safer worker
    appeared: moving a healthy chief costs a handover and risks its checkpoint.
    """
    if not candidates:
        return None

    def key(c: Candidate) -> tuple[bool, float, float, int, str]:
        started = parse_time(pod_status(c.pod).get("startTime")) or now
        transient = provisioning_of(labels_of(c.node or {})) != Provisioning.ON_DEMAND
        return (
            transient,
            round(preemption_risk(c.node, now), 6),
            -(now - started).total_seconds(),
            c.slot,
            name_of(c.pod),
        )

    return min(candidates, key=key)
