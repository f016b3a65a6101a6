"""The two baseline policies the project is compared with. Neither is the project's planner.

- :class:`PaperStaticPolicy`: the ICAC'19 setup. A static cluster: a revoked worker is not replaced,
  training goes on with the others; the job is lost when the master (the chief) is revoked.
- :class:`TFJobLikePolicy`: what Kubeflow's TFJob does with preemptible nodes. A preempted pod is a
  failed pod: it counts toward ``backoffLimit`` and is restarted in place (a new pod of the same
  name, on a new node); the job fails once the failures pass the limit. The chief keeps its slot:
  while it is away training stops, and it comes back from its last periodic checkpoint (no
  checkpoint on SIGTERM), so the steps since that checkpoint are lost.

The project's policy is the operator's real planner, driven through ``planner_policy.py``.
"""

from __future__ import annotations

from ttj.simulate.engine import FailJob, RestoreCheckpoint, RunView, SimAction, StartWorker


class PaperStaticPolicy:
    name = "paper-static"
    checkpoint_on_sigterm = False

    def decide(self, view: RunView) -> list[SimAction]:
        if view.chief_slot is not None and view.chief_slot in view.lost_slots:
            return [FailJob("MasterRevoked")]
        return []

    def published_checkpoint_interval_s(self) -> float | None:
        return None


class TFJobLikePolicy:
    name = "tfjob-like"
    checkpoint_on_sigterm = False

    def decide(self, view: RunView) -> list[SimAction]:
        if not view.lost_slots:
            return []
        if view.preemptions > view.job.spec.backoff_limit:
            return [FailJob("BackoffLimitExceeded")]
        actions: list[SimAction] = [StartWorker(slot) for slot in view.lost_slots]
        if view.chief_slot in view.lost_slots:
            actions.append(RestoreCheckpoint())
        return actions

    def published_checkpoint_interval_s(self) -> float | None:
        return None
