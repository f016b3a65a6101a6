"""Container restarts: whether a finished container runs again, and after how long (CrashLoopBackOff)."""

from __future__ import annotations

from ttj.kubeapi import JSON

#: 1 s doubling to 30 s (the kubelet's is 10 s to 5 min: too slow for tests and the demo)
FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0


def restarts(restart_policy: str, exit_code: int | None) -> bool:
    """``Always`` restarts every exit, ``OnFailure`` a non-zero one, ``Never`` none."""
    return restart_policy == "Always" or (restart_policy == "OnFailure" and exit_code != 0)


def backoff_seconds(restart_count: int) -> float:
    """The wait before restart number ``restart_count`` (counting from 1)."""
    return min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2.0 ** (restart_count - 1))


def backoff_state(container: str, seconds: float) -> JSON:
    """The container's ``waiting`` state until it restarts."""
    message = f"back-off {seconds:.0f}s restarting failed container={container}"
    return {"waiting": {"reason": "CrashLoopBackOff", "message": message}}
