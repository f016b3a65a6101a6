"""spec.suspend, as a batch/v1 Job has it: whether the job is suspended, still stopping, or resuming now.

Suspending stops the workers gracefully (the chief writes its SIGTERM checkpoint, which needs the parameter
servers), and only once no worker pod runs any more scales the parameter servers to 0. A resumed job starts
again from that checkpoint: new parameter servers (which hold no state until the chief restores it), new
workers, a chief elected in a new epoch. As in batch/v1, activeDeadlineSeconds does not run while the job is
suspended and starts again from zero when it resumes (``status.startTime`` is reset).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ttj.api.models import Condition, ConditionType, TransientTrainingJobSpec
from ttj.planner.observed import Obj, has_role, phase_of
from ttj_contract import Role


@dataclass(frozen=True)
class Suspension:
    #: spec.suspend.
    suspended: bool
    #: Worker pods whose containers still run (being stopped, or not yet told to stop).
    stopping: int
    #: The job was suspended before this pass and no longer is: the deadline timer and stall clock restart.
    resuming: bool
    #: The job has been suspended at some time: its Suspended condition stays, False once resumed.
    ever: bool
    #: Resumed, and nothing lost since (the Recovering condition last written is not True): the job runs as a
    #: new one does, and the pods the suspension stopped, the parameter servers it scaled down and the chief
    #: elected after the resume are no loss. A loss counted after the resume ends it.
    restarting: bool = False

    @property
    def servers_down(self) -> bool:
        """The parameter servers scale to 0: suspended, and no worker needs them for its checkpoint."""
        return self.suspended and self.stopping == 0

    @property
    def parameter_server_replicas(self) -> int:
        return 0 if self.servers_down else 1


def suspension_of(
    spec: TransientTrainingJobSpec, previous: Sequence[Condition] | None, pods: Iterable[Obj]
) -> Suspension:
    """From spec.suspend, the Suspended condition last written, and the job's pods."""
    before = next((c for c in previous or [] if c.type == ConditionType.SUSPENDED), None)
    stopping = sum(has_role(p, Role.WORKER) and phase_of(p) in (None, "Pending", "Running") for p in pods)
    was_suspended = before is not None and before.status == "True"
    recovering = next((c for c in previous or [] if c.type == ConditionType.RECOVERING), None)
    return Suspension(
        suspended=spec.suspend,
        stopping=stopping,
        resuming=was_suspended and not spec.suspend,
        ever=spec.suspend or before is not None,
        restarting=before is not None
        and not spec.suspend
        and (was_suspended or recovering is None or recovering.status != "True"),
    )
