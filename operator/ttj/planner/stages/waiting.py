"""What a job that is short of pods waits for, in words for its conditions: which pods, in which state, since
when. A job whose replacement is never scheduled (a scheduler that dropped it, a pool that never came back)
would otherwise say only "2/3 workers active" for as long as it lasts. The words hold no durations, so that
the status does not change, and is not written again, on every pass while nothing changes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ttj.planner.classify import PodState, PodVerdict
from ttj.planner.observed import Obj, has_role, labels_of, meta, name_of, node_name_of, phase_of
from ttj_contract import LABEL_PS_INDEX, Role

#: How many pods a message names; it counts the others.
NAMED_PODS = 2


def waiting_workers(workers: Iterable[Obj], verdicts: Mapping[str, PodVerdict]) -> str:
    """The worker pods that are alive but not running yet (e.g. "job-worker-1-3 Pending since
    2026-11-28T13:09:40Z, not scheduled"); "" when none."""
    pending = [pod for pod in workers if verdicts[name_of(pod)].state == PodState.PENDING]
    return _named([_pod_state(pod, verdicts[name_of(pod)].pending_reason) for pod in pending])


def waiting_parameter_servers(pods: Iterable[Obj], replicas: int) -> str:
    """The parameter servers without a running pod: the pods each has that do not run yet, in their state, or
    that it has none."""
    servers = [pod for pod in pods if has_role(pod, Role.PS) and not meta(pod).get("deletionTimestamp")]
    described = []
    for index in range(replicas):
        own = [pod for pod in servers if labels_of(pod).get(LABEL_PS_INDEX) == str(index)]
        if any(_running(pod) for pod in own):
            continue
        waiting = sorted((pod for pod in own if phase_of(pod) in ("Pending", "Unknown", None)), key=name_of)
        described += [_pod_state(pod, "") for pod in waiting] or [f"parameter server {index} has no pod yet"]
    return _named(described)


def _running(pod: Obj) -> bool:
    return phase_of(pod) == "Running"


def _pod_state(pod: Obj, pending_reason: str) -> str:
    since = meta(pod).get("creationTimestamp")
    state = f"{name_of(pod)} {phase_of(pod) or 'Pending'}" + (f" since {since}" if since else "")
    if pending_reason:
        return f"{state}: {pending_reason}"
    node = node_name_of(pod)
    return f"{state}, on node {node}" if node else f"{state}, not scheduled"


def _named(described: list[str]) -> str:
    more = len(described) - NAMED_PODS
    return "; ".join(described[:NAMED_PODS]) + (f" (and {more} more)" if more > 0 else "")
