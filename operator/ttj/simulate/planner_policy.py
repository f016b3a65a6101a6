"""The project's policy in the simulator: the operator's real planner (``ttj.planner.plan``), unchanged.

The job and its children live in a :class:`~ttj.planner.world.World`: the planner's writes mean there
what they mean to the API server (the shared in-memory interpreter). This adapter adds only what is
the simulation's own. It turns the simulator's events into the cluster evidence a GKE preemption leaves:

- a revoked VM: its node object disappears and its pod is ``Failed`` with reason ``NodeShutdown`` and
  exit code 143 (kubelet graceful node shutdown), which the planner classifies as a preemption;
- a worker VM that has booted: its pod turns ``Running`` (with ``startTime``) on a node labelled
  ``cloud.google.com/gke-preemptible`` or ``gke-spot`` and created when the VM was;
- the chief renews the Lease (``renewTime``) while it runs, and publishes its progress there.

It stands in for the scheduler and the Deployment controller: a worker pod is bound to its VM's node
when created, and a PS Deployment gets its running pod. And it follows the writes that touch training:
a worker pod created for a slot without a VM → :class:`StartWorker`; a Lease whose holder changes →
:class:`MakeChief`; a job status the planner turned ``Failed`` → :class:`FailJob`.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

from ttj.api.models import CostStatus, TransientTrainingJobSpec
from ttj.planner import CreateChild, Observed, PlannerConfig, UpdateLease, Write
from ttj.planner.observed import Obj, annotations_of, labels_of, name_of
from ttj.planner.world import World
from ttj.simulate.engine import FailJob, MakeChief, RunView, SimAction, SimJob, StartWorker
from ttj_contract import (
    ACCELERATOR_LABEL,
    ANNOTATION_CHECKPOINT_INTERVAL,
    ANNOTATION_PROGRESS,
    API_VERSION,
    CONTAINER_NAME,
    KIND,
    LABEL_ROLE,
    LABEL_SLOT,
    LeaseProgress,
    Role,
    format_micro_time,
    format_time,
    lease_name,
    provisioning_labels,
)

#: Simulated time 0 on the planner's clock (any fixed instant keeps runs deterministic).
EPOCH = datetime(2026, 11, 21, tzinfo=UTC)
#: Plans per event at most: a loss is counted in one plan and its pod released in the next.
_MAX_PLANS_PER_EVENT = 6
#: Where the simulated parameter servers run: an on-demand node that is never revoked.
_PS_NODE = "on-demand-cpu-0"


def _at(seconds: float) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


class PlannerPolicy:
    """Replace preempted workers, re-elect the chief, checkpoint on SIGTERM — as ``ttj.planner`` decides."""

    name = "ttj-planner"
    checkpoint_on_sigterm = True  # the trainer's contract: the chief checkpoints on SIGTERM

    def __init__(self, config: PlannerConfig | None = None) -> None:
        self.base_config = config or PlannerConfig()
        self.world: World | None = None
        self.pod_of_slot: dict[int, str] = {}  # the pod bound to each slot's live VM
        self.vm_of_pod: dict[str, tuple[int, float]] = {}  # pod → (slot, VM creation time)
        self.holder: str | None = None  # the Lease holder the simulation has made chief
        self.plans = 0
        self._view: RunView | None = None
        self._wanted: list[SimAction] = []

    @property
    def job(self) -> Obj:
        return self.world.job if self.world is not None else {}

    # -- the simulator's side ------------------------------------------------------------------------
    def decide(self, view: RunView) -> list[SimAction]:
        if self.world is None:
            self.world = World(self._manifest(view.job), on_applied=self._follow)
        world = self.world
        now = _at(view.now)
        self._view, self._wanted = view, []
        self._observe(world, view, now)
        config = dataclasses.replace(self.base_config, cost=self._cost_function(view))
        for _ in range(_MAX_PLANS_PER_EVENT):
            revision, status = world.revision, world.job.get("status")
            world.reconcile(now, config)
            self.plans += 1
            if world.job["status"].get("phase") == "Failed":
                return [FailJob(self._failure_reason(world.job["status"]))]
            if world.revision == revision and world.job["status"] == status:
                break
        return self._wanted

    def published_checkpoint_interval_s(self) -> float | None:
        """The adaptive interval the planner wrote on the Lease (``checkpoint.adaptive``), as the trainer reads it."""
        lease = self.world.observed.lease if self.world is not None else None
        raw = annotations_of(lease or {}).get(ANNOTATION_CHECKPOINT_INTERVAL)
        return float(raw) if raw is not None and raw.isdigit() and int(raw) > 0 else None

    # -- cluster evidence of the simulation's events ---------------------------------------------------
    @staticmethod
    def _manifest(job: SimJob) -> Obj:
        spec: TransientTrainingJobSpec = job.spec
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": job.name, "namespace": "default", "uid": "sim-job", "generation": 1},
            "spec": spec.model_dump(by_alias=True, exclude_none=True, mode="json"),
        }

    def _observe(self, world: World, view: RunView, now: datetime) -> None:
        text = format_time(now)
        # revoked VMs: node gone, pod ended by the node shutdown
        for slot in view.lost_slots:
            pod_name = self.pod_of_slot.pop(slot, None)
            pod = world.pod(pod_name) if pod_name else None
            if pod is None:
                continue
            world.observed.nodes.pop(pod["spec"].get("nodeName", ""), None)
            pod["status"] = {
                "phase": "Failed",
                "reason": "NodeShutdown",
                "message": "Pod was terminated in response to imminent node shutdown.",
                "startTime": pod.get("status", {}).get("startTime"),
                "containerStatuses": [
                    {
                        "name": CONTAINER_NAME,
                        "state": {"terminated": {"exitCode": 143, "reason": "Error", "finishedAt": text}},
                    }
                ],
            }
        # booted VMs: pods run
        for slot, running in view.live_slots.items():
            name = self.pod_of_slot.get(slot)
            pod = world.pod(name) if name else None
            if pod is not None and running and pod["status"].get("phase") == "Pending":
                pod["status"] = {"phase": "Running", "startTime": text}
        # the chief renews its lease and reports progress while it runs
        lease = world.observed.lease
        holder = lease["spec"].get("holderIdentity") if lease is not None else None
        holder_pod = world.pod(holder) if holder else None
        if holder_pod is not None and holder_pod["status"].get("phase") == "Running":
            progress = LeaseProgress(
                global_step=int(view.global_step),
                checkpoint_step=int(view.checkpoint_step),
                checkpoint_path=f"{view.job.spec.checkpoint.uri}/model.ckpt-{int(view.checkpoint_step)}",
                checkpoint_time=format_time(_at(view.checkpoint_time)),
                checkpoint_write_seconds=view.checkpoint_write_s if view.checkpoint_write_s > 0 else None,
            )
            renewal = UpdateLease(
                name=lease_name(view.job.name),
                renew_time=format_micro_time(now),
                annotations={ANNOTATION_PROGRESS: progress.to_annotation()},
            )
            world.apply(renewal, now)

    # -- the writes that touch training ---------------------------------------------------------------
    def _follow(self, write: Write, obj: Obj) -> None:
        view = self._view
        assert view is not None
        if isinstance(write, CreateChild) and write.kind == "Deployment":
            self._run_parameter_server(obj, view)
        elif isinstance(write, CreateChild) and write.kind == "Pod" and labels_of(obj).get(LABEL_ROLE) == Role.WORKER:
            self._bind_worker(obj, view)
        if isinstance(write, UpdateLease) or (isinstance(write, CreateChild) and write.kind == "Lease"):
            holder = obj["spec"].get("holderIdentity")
            if holder != self.holder:
                self.holder = holder
                if holder in self.vm_of_pod:
                    self._wanted.append(MakeChief(self.vm_of_pod[holder][0]))

    def _run_parameter_server(self, deployment: Obj, view: RunView) -> None:
        """The Deployment controller and the kubelet: the PS pod runs at once, and is never preempted."""
        assert self.world is not None
        name = name_of(deployment)
        labels = deployment["spec"]["template"]["metadata"].get("labels", {})
        self.world.observed.pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{name}-0", "labels": dict(labels), "uid": f"uid-ps-{name}"},
                "spec": {"nodeName": _PS_NODE},
                "status": {"phase": "Running", "startTime": format_time(_at(view.now))},
            }
        )

    def _bind_worker(self, pod: Obj, view: RunView) -> None:
        """The scheduler: a worker pod goes to its slot's VM, the first one or a new one asked for here."""
        assert self.world is not None
        name = name_of(pod)
        slot = int(labels_of(pod)[LABEL_SLOT])
        first = slot in view.live_slots and slot not in self.pod_of_slot
        if first:
            created = view.vm_created_at.get(slot, view.now)  # a first VM, booted before training
        else:
            self._wanted.append(StartWorker(slot))
            created = view.now
        node_name = f"gke-sim-{slot}-{name}"
        accelerator, provisioning = view.job.hardware(slot)
        node = self._node(node_name, accelerator, provisioning, _at(min(created, view.now)))
        self.world.observed.nodes[node_name] = node
        pod["spec"]["nodeName"] = node_name
        running = first and view.live_slots[slot]
        pod["status"] = (
            {"phase": "Running", "startTime": format_time(_at(view.now))} if running else {"phase": "Pending"}
        )
        self.pod_of_slot[slot] = name
        self.vm_of_pod[name] = (slot, created)

    @staticmethod
    def _node(name: str, accelerator: str, provisioning: str, created: datetime) -> Obj:
        """A node of the slot's own GPU type and provisioning (a mixed fleet's slots differ)."""
        labels = {ACCELERATOR_LABEL: accelerator, "kubernetes.io/hostname": name} | provisioning_labels(provisioning)
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels, "creationTimestamp": format_time(created)},
            "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": format_time(created)}]},
        }

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
