"""Liveness is not progress: when the global step the chief reports has stood still for too long.

The chief renews the Lease only while its training loop turns, but a loop may turn without training
(a checkpoint store refusing writes, a parameter server that never gets initialised). The operator
remembers when it last saw the global step advance (``status.progress.lastProgressTime``, on its own
clock) and calls the job stalled once ``spec.progress.stallTimeoutSeconds`` pass without an advance
and without a new chief.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from ttj.api.models import ChiefStatus, ProgressStatus, TransientTrainingJobSpec
from ttj_contract import format_time, parse_time


def track_progress(
    progress: ProgressStatus | None, previous: ProgressStatus | None, now: datetime
) -> ProgressStatus | None:
    """``progress`` with ``lastProgressTime`` moved to now when its global step is past the previous one."""
    if progress is None:
        return None
    advanced = previous is None or previous.last_progress_time is None or progress.global_step > previous.global_step
    if not advanced:
        return progress
    return progress.model_copy(update={"last_progress_time": format_time(now)})


@dataclass(frozen=True)
class Stall:
    #: Why the job is stalled, in words (the chief's last error included); empty when it is not.
    message: str
    #: Elect another chief: stalled, and the current one had the whole timeout since its election.
    replace_chief: bool
    #: When something will change if nothing else does.
    wake: datetime | None


def stall_of(
    spec: TransientTrainingJobSpec,
    progress: ProgressStatus | None,
    chief: ChiefStatus | None,
    *,
    chief_running: bool,
    now: datetime,
) -> Stall:
    """Stalled: a running chief, and the global step still for stallTimeoutSeconds. The condition holds until
    the step advances; the chief is replaced once it has had the whole timeout since its own election."""
    timeout = spec.progress.stall_timeout_seconds
    if not timeout or not chief_running or chief is None:
        return Stall("", False, None)
    elected = parse_time(chief.elected_at)
    advanced = parse_time(progress.last_progress_time) if progress is not None else None
    since = advanced or elected
    if since is None:
        return Stall("", False, None)
    limit = timedelta(seconds=timeout)
    chief_since = max(since, elected) if elected is not None else since
    if now < since + limit:
        return Stall("", False, since + limit)
    step = progress.global_step if progress else 0
    message = f"global step {step} has not advanced for {int((now - since).total_seconds())}s"
    if progress is not None and progress.last_error:
        message += f"; the chief's last error: {progress.last_error}"
    replace = now >= chief_since + limit
    return Stall(message, replace, None if replace else chief_since + limit)
