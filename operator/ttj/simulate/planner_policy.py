"""The project's policy in the simulator: the operator's real planner (``ttj.planner.plan``), unchanged.

The adapter keeps a small in-memory picture of the cluster as the planner observes it (worker and PS
pods, the nodes under the workers, the static children, the ``NAME-chief`` Lease, the job's status)
and turns the simulator's events into the cluster evidence a GKE preemption leaves:

- a revoked VM: its node object disappears and its pod is ``Failed`` with reason ``NodeShutdown`` and
  exit code 143 (kubelet graceful node shutdown), which the planner classifies as a preemption;
- a worker VM that has booted: its pod turns ``Running`` (with ``startTime``) on a node labelled
  ``cloud.google.com/gke-preemptible`` or ``gke-spot`` and created when the VM was;
- the chief renews the Lease (``renewTime``) while it runs, and publishes progress.

The planner's actions are applied to that picture and, where they touch training, to the simulation:
a worker pod created for a slot without a VM → :class:`StartWorker`; a Lease whose holder changes →
:class:`MakeChief`; a job status the planner turned ``Failed`` → :class:`FailJob`. Everything else
(events, labels, finalizers, deletes of counted pods, children) only updates the picture, so the
next plan sees what a real apiserver would show.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from ttj.api.models import CostStatus, TransientTrainingJobSpec
from ttj.planner import (
    CreateChild,
    DeleteChild,
    LabelPod,
    Observed,
    PlannerConfig,
    RemoveFinalizer,
    UpdateLease,
    plan,
)
from ttj.simulate.engine import FailJob, MakeChief, RunView, SimAction, SimJob, StartWorker
from ttj_contract import LABEL_ROLE, LABEL_SLOT, format_micro_time, format_time

#: Simulated time 0 on the planner's clock (any fixed instant keeps runs deterministic).
EPOCH = datetime(2026, 11, 21, tzinfo=UTC)
#: Plans per event at most: a loss is counted in one plan and its pod released in the next.
_MAX_PLANS_PER_EVENT = 6

Obj = dict[str, Any]


def _at(seconds: float) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


class PlannerPolicy:
    """Replace preempted workers, re-elect the chief, checkpoint on SIGTERM — as ``ttj.planner`` decides."""

    name = "ttj-planner"
    checkpoint_on_sigterm = True  # the trainer's contract: the chief checkpoints on SIGTERM

    def __init__(self, config: PlannerConfig | None = None) -> None:
        self.base_config = config or PlannerConfig()
        self.job: Obj = {}
        self.observed = Observed()
        self.pod_of_slot: dict[int, str] = {}  # the pod bound to each slot's live VM
        self.vm_of_pod: dict[str, tuple[int, float]] = {}  # pod → (slot, VM creation time)
        self.plans = 0

    # -- the simulator's side ------------------------------------------------------------------------
    def decide(self, view: RunView) -> list[SimAction]:
        if not self.job:
            self._start(view.job)
        now = _at(view.now)
        self._observe(view, now)
        wanted: list[SimAction] = []
        for _ in range(_MAX_PLANS_PER_EVENT):
            config = PlannerConfig(
                lease_duration_seconds=self.base_config.lease_duration_seconds,
                chief_startup_seconds=self.base_config.chief_startup_seconds,
                node_grace_seconds=self.base_config.node_grace_seconds,
                resync_seconds=self.base_config.resync_seconds,
                cost=self._cost_function(view),
            )
            result = plan(self.job, self.observed, now, config)
            self.plans += 1
            changed = self._apply(result.writes, view, now, wanted)
            status_changed = result.status != self.job.get("status")
            self.job["status"] = result.status
            if result.status.get("phase") == "Failed":
                return [FailJob(self._failure_reason(result.status))]
            if not changed and not status_changed:
                break
        return wanted

    # -- the picture -----------------------------------------------------------------------------------
    def _start(self, job: SimJob) -> None:
        spec: TransientTrainingJobSpec = job.spec
        self.job = {
            "apiVersion": "transient.training/v1alpha1",
            "kind": "TransientTrainingJob",
            "metadata": {"name": job.name, "namespace": "default", "uid": "sim-job", "generation": 1},
            "spec": spec.model_dump(by_alias=True, exclude_none=True, mode="json"),
        }

    def _observe(self, view: RunView, now: datetime) -> None:
        text = format_time(now)
        # revoked VMs: node gone, pod ended by the node shutdown
        for slot in view.lost_slots:
            pod_name = self.pod_of_slot.pop(slot, None)
            pod = self._pod(pod_name) if pod_name else None
            if pod is None:
                continue
            self.observed.nodes.pop(pod["spec"].get("nodeName", ""), None)
            pod["status"] = {
                "phase": "Failed",
                "reason": "NodeShutdown",
                "message": "Pod was terminated in response to imminent node shutdown.",
                "startTime": pod.get("status", {}).get("startTime"),
                "containerStatuses": [
                    {
                        "name": "trainer",
                        "state": {"terminated": {"exitCode": 143, "reason": "Error", "finishedAt": text}},
                    }
                ],
            }
        # booted VMs: pods run
        for slot, running in view.live_slots.items():
            pod = self._pod(self.pod_of_slot.get(slot))
            if pod is not None and running and pod["status"].get("phase") == "Pending":
                pod["status"] = {"phase": "Running", "startTime": text}
        # the chief renews its lease and reports progress while it runs
        lease = self.observed.lease
        if lease is not None:
            holder = lease["spec"].get("holderIdentity")
            holder_pod = self._pod(holder)
            if holder_pod is not None and holder_pod["status"].get("phase") == "Running":
                lease["spec"]["renewTime"] = format_micro_time(now)
                progress = {
                    "globalStep": int(view.global_step),
                    "checkpointStep": int(view.checkpoint_step),
                    "checkpointPath": f"{view.job.spec.checkpoint.uri}/model.ckpt-{int(view.checkpoint_step)}",
                    "checkpointTime": format_time(_at(view.checkpoint_time)),
                }
                lease["metadata"].setdefault("annotations", {})["transient.training/progress"] = json.dumps(progress)

    def _pod(self, name: str | None) -> Obj | None:
        if not name:
            return None
        for pod in self.observed.pods:
            if pod["metadata"]["name"] == name:
                return pod
        return None

    def _node(self, name: str, provisioning: str, accelerator: str, created: datetime) -> Obj:
        labels = {"cloud.google.com/gke-accelerator": accelerator, "kubernetes.io/hostname": name}
        if provisioning == "preemptible":
            labels["cloud.google.com/gke-preemptible"] = "true"
        elif provisioning == "spot":
            labels["cloud.google.com/gke-spot"] = "true"
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels, "creationTimestamp": format_time(created)},
            "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": format_time(created)}]},
        }

    # -- applying the planner's actions ------------------------------------------------------------------
    def _apply(self, actions: list[Any], view: RunView, now: datetime, wanted: list[SimAction]) -> bool:
        changed = False
        text = format_time(now)
        for action in actions:
            if isinstance(action, CreateChild):
                changed = True
                self._create(action.manifest, view, now, wanted)
            elif isinstance(action, UpdateLease):
                changed = True
                self._update_lease(action, wanted)
            elif isinstance(action, LabelPod):
                pod = self._pod(action.pod)
                if pod is not None:
                    labels = pod["metadata"].setdefault("labels", {})
                    for key, value in action.labels.items():
                        if value is None:
                            labels.pop(key, None)
                        else:
                            labels[key] = value
            elif isinstance(action, DeleteChild):
                changed = True
                self._delete(action, text)
            elif isinstance(action, RemoveFinalizer):
                pod = self._pod(action.pod)
                if pod is not None:
                    changed = True
                    pod["metadata"]["finalizers"] = []
        # pods deleted without a finalizer left vanish, as the apiserver would remove them
        before = len(self.observed.pods)
        self.observed.pods = [
            p
            for p in self.observed.pods
            if not (p["metadata"].get("deletionTimestamp") and not p["metadata"].get("finalizers"))
        ]
        return changed or len(self.observed.pods) != before

    def _create(self, manifest: Obj, view: RunView, now: datetime, wanted: list[SimAction]) -> None:
        kind = manifest["kind"]
        name = manifest["metadata"]["name"]
        obj = json.loads(json.dumps(manifest))
        obj["metadata"].setdefault("creationTimestamp", format_time(now))
        obj["metadata"].setdefault("uid", f"uid-{kind}-{name}")
        if kind == "Lease":
            obj["metadata"]["resourceVersion"] = "1"
            self.observed.lease = obj
            self._follow_holder(obj, wanted)
            return
        if kind != "Pod":
            self.observed.children[(kind, name)] = obj
            if kind == "Deployment":  # the PS runs on an on-demand node and is never preempted here
                labels = obj["spec"]["template"]["metadata"].get("labels", {})
                self.observed.pods.append(
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {"name": f"{name}-0", "labels": dict(labels), "uid": f"uid-ps-{name}"},
                        "spec": {"nodeName": "on-demand-cpu-0"},
                        "status": {"phase": "Running", "startTime": format_time(now)},
                    }
                )
            return
        labels = obj["metadata"].get("labels", {})
        if labels.get(LABEL_ROLE) != "worker":
            self.observed.pods.append(obj)
            return
        slot = int(labels[LABEL_SLOT])
        if slot in view.live_slots and slot not in self.pod_of_slot:
            created = view.vm_created_at.get(slot, view.now)  # a first VM, booted before training
        else:
            wanted.append(StartWorker(slot))
            created = view.now
        node_name = f"gke-sim-{slot}-{name}"
        self.observed.nodes[node_name] = self._node(
            node_name, view.job.provisioning, view.job.accelerator, _at(min(created, view.now))
        )
        obj["spec"]["nodeName"] = node_name
        running = slot in view.live_slots and view.live_slots[slot] and slot not in self.pod_of_slot
        obj["status"] = {"phase": "Running", "startTime": format_time(now)} if running else {"phase": "Pending"}
        self.pod_of_slot[slot] = name
        self.vm_of_pod[name] = (slot, created)
        self.observed.pods.append(obj)

    def _update_lease(self, action: UpdateLease, wanted: list[SimAction]) -> None:
        lease = self.observed.lease
        if lease is None:
            return
        spec = lease["spec"]
        if action.holder is not None:
            spec["holderIdentity"] = action.holder
        if action.epoch is not None:
            spec["leaseTransitions"] = action.epoch
        if action.acquire_time is not None:
            spec["acquireTime"] = action.acquire_time
        if action.renew_time is not None:
            spec["renewTime"] = action.renew_time
        if action.lease_duration_seconds is not None:
            spec["leaseDurationSeconds"] = action.lease_duration_seconds
        lease["metadata"].setdefault("annotations", {}).update(action.annotations)
        lease["metadata"]["resourceVersion"] = str(int(lease["metadata"].get("resourceVersion", "1")) + 1)
        self._follow_holder(lease, wanted)

    def _follow_holder(self, lease: Obj, wanted: list[SimAction]) -> None:
        holder = lease["spec"].get("holderIdentity")
        if holder and holder in self.vm_of_pod:
            wanted.append(MakeChief(self.vm_of_pod[holder][0]))

    def _delete(self, action: DeleteChild, text: str) -> None:
        if action.kind != "Pod":
            self.observed.children.pop((action.kind, action.name), None)
            return
        pod = self._pod(action.name)
        if pod is None:
            return
        pod["metadata"]["deletionTimestamp"] = text
        if action.mark_deliberate:
            pod["metadata"].setdefault("annotations", {})["transient.training/deleted-by-operator"] = "true"

    # -- cost and the end -----------------------------------------------------------------------------
    @staticmethod
    def _cost_function(view: RunView) -> Any:
        def accrue(
            spec: TransientTrainingJobSpec, observed: Observed, previous: CostStatus | None, now: datetime
        ) -> CostStatus:
            return CostStatus(usd=round(view.cost_usd, 6))

        return accrue

    @staticmethod
    def _failure_reason(status: Obj) -> str:
        for cond in status.get("conditions") or []:
            if cond.get("type") == "Failed" and cond.get("status") == "True":
                return str(cond.get("reason") or "Failed")
        return "Failed"
