"""Can a job's pods be placed at all? Matching a job against the cluster's node pools.

Pure. The pools come either from the GKE API (:mod:`ttj.cost.gke`, with autoscaling bounds) or,
without GKE settings, from the labels of the Nodes the cluster has (:func:`pools_from_nodes`); the
same :func:`validate_placement` judges both. A job whose workers or parameter servers match no pool
gets ``reason="Unschedulable"`` and a message naming what it asked for and what the cluster has,
instead of pods that stay Pending forever.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ttj.api.models import TransientTrainingJobSpec
from ttj.cost.model import NodeShape
from ttj_contract import (
    ACCELERATOR_LABEL,
    GPU_RESOURCE,
    INSTANCE_TYPE_LABEL,
    NODE_POOL_LABEL,
    Provisioning,
    provisioning_labels,
)

UNSCHEDULABLE = "Unschedulable"


@dataclass(frozen=True)
class NodePool:
    """A group of identical nodes: a GKE node pool, or nodes sharing their pool label."""

    name: str
    shape: NodeShape
    #: Labels every node of the pool carries (GKE's implicit ones included).
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Nodes the pool has now.
    node_count: int = 0
    #: Autoscaling bounds for the whole pool (all its zones); ``None`` without autoscaling.
    min_nodes: int | None = None
    max_nodes: int | None = None
    #: Zones the pool spans (GKE's per-zone bounds multiply by this).
    zone_count: int = 1
    #: GKE bounds the pool as a whole (total_*_node_count) rather than per zone.
    total_bounds: bool = False

    @property
    def autoscaling(self) -> bool:
        return self.max_nodes is not None

    def capacity_nodes(self) -> int:
        """The most nodes the pool can have."""
        return self.max_nodes if self.max_nodes is not None else self.node_count

    def describe(self) -> str:
        shape = self.shape
        gpus = f"{shape.accelerator_type} x{shape.accelerator_count}" if shape.accelerator_type else "no GPU"
        size = (
            f"{self.min_nodes}-{self.max_nodes} nodes (autoscaling)"
            if self.autoscaling
            else f"{self.node_count} node(s)"
        )
        return f"{self.name} ({shape.machine_type or 'unknown machine'}, {gpus}, {shape.provisioning}, {size})"


def implicit_labels(name: str, shape: NodeShape) -> dict[str, str]:
    """The labels GKE puts on every node of a pool of this shape."""
    labels = {NODE_POOL_LABEL: name}
    if shape.machine_type:
        labels[INSTANCE_TYPE_LABEL] = shape.machine_type
    if shape.accelerator_type:
        labels[ACCELERATOR_LABEL] = shape.accelerator_type
    labels.update(provisioning_labels(shape.provisioning))
    return labels


def gpu_capacity(node: Mapping[str, Any]) -> int | None:
    """A Node's ``nvidia.com/gpu`` capacity; None while it reports none (the device plugin not yet up)."""
    raw = str(((node.get("status") or {}).get("capacity") or {}).get(GPU_RESOURCE) or "")
    return int(raw) if raw.isdigit() else None


@dataclass(frozen=True)
class ObservedNode:
    """A Node as seen through the API: its labels and its ``nvidia.com/gpu`` capacity."""

    labels: Mapping[str, str]
    gpu_capacity: int | None = None

    @classmethod
    def of(cls, node: Mapping[str, Any]) -> ObservedNode:
        """From a Node object (or its slim copy in the operator's index)."""
        return cls(dict((node.get("metadata") or {}).get("labels") or {}), gpu_capacity(node))


def pools_from_nodes(nodes: Iterable[ObservedNode]) -> list[NodePool]:
    """Groups Nodes into pools by ``cloud.google.com/gke-nodepool`` (else by shape), labels in common kept."""
    groups: dict[str, list[ObservedNode]] = {}
    shapes: dict[str, NodeShape] = {}
    for node in nodes:
        shape = NodeShape.from_labels(node.labels, node.gpu_capacity)
        key = node.labels.get(NODE_POOL_LABEL) or (
            f"{shape.machine_type or 'node'}/{shape.accelerator_type or 'cpu'}/{shape.provisioning}"
        )
        groups.setdefault(key, []).append(node)
        previous = shapes.get(key)
        # A pool's nodes share a shape; keep the largest GPU count seen (capacity may not be reported yet).
        if previous is None or shape.accelerator_count > previous.accelerator_count:
            shapes[key] = shape
    pools: list[NodePool] = []
    for key, members in sorted(groups.items()):
        common = dict(members[0].labels)
        for member in members[1:]:
            common = {k: v for k, v in common.items() if member.labels.get(k) == v}
        pools.append(NodePool(name=key, shape=shapes[key], labels=common, node_count=len(members)))
    return pools


@dataclass(frozen=True)
class PlacementCheck:
    """The verdict on a job's placement."""

    ok: bool
    #: ``Unschedulable`` when not ok, else empty.
    reason: str
    message: str
    worker_pools: tuple[NodePool, ...] = ()
    ps_pools: tuple[NodePool, ...] = ()
    #: Most workers the matching pools can ever hold (``None`` when unknown).
    worker_capacity: int | None = None
    #: Non-fatal findings (e.g. the pools cannot hold maxReplicas workers).
    warnings: tuple[str, ...] = ()
    #: A node pool's autoscaling maximum the operator raised for the job in this check, or failed to, in words.
    raised: str = ""
    raise_failed: str = ""


def workers_per_node(pool: NodePool, gpus_per_worker: int) -> int:
    """How many workers fit on one node of ``pool`` by GPUs (one when they need none)."""
    if gpus_per_worker <= 0:
        return 1
    return pool.shape.accelerator_count // gpus_per_worker


def _selector_matches(selector: Mapping[str, str] | None, labels: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in (selector or {}).items())


def worker_pools(spec: TransientTrainingJobSpec, pools: Sequence[NodePool]) -> list[NodePool]:
    """The pools a worker of ``spec`` can run on."""
    workers = spec.workers
    wanted = Provisioning(workers.provisioning)
    matches = []
    for pool in pools:
        if pool.shape.provisioning != wanted:
            continue
        if workers.gpus_per_worker > 0 and (
            pool.shape.accelerator_type != workers.accelerator_type
            or pool.shape.accelerator_count < workers.gpus_per_worker
        ):
            continue
        if not _selector_matches(workers.node_selector, {**implicit_labels(pool.name, pool.shape), **pool.labels}):
            continue
        matches.append(pool)
    return matches


def ps_pools(pools: Sequence[NodePool]) -> list[NodePool]:
    """The pools a parameter server can run on: on-demand ones."""
    return [pool for pool in pools if pool.shape.provisioning == Provisioning.ON_DEMAND]


def validate_placement(spec: TransientTrainingJobSpec, pools: Sequence[NodePool]) -> PlacementCheck:
    """Whether the job's workers and parameter servers each match at least one pool."""
    workers = spec.workers
    have = "; ".join(pool.describe() for pool in pools) or "none"
    problems: list[str] = []
    matching_workers = worker_pools(spec, pools)
    if not matching_workers:
        gpu_part = (
            f"{workers.gpus_per_worker} x {workers.accelerator_type} per node"
            if workers.gpus_per_worker > 0
            else "no GPU"
        )
        selector = f" with labels {dict(workers.node_selector)}" if workers.node_selector else ""
        problems.append(f"no node pool has {workers.provisioning} nodes with {gpu_part}{selector} for the workers")
    matching_ps = ps_pools(pools)
    if not matching_ps:
        problems.append("no node pool has on-demand nodes for the parameter servers")
    if problems:
        return PlacementCheck(
            ok=False,
            reason=UNSCHEDULABLE,
            message=f"{'; '.join(problems)} (node pools: {have})",
            worker_pools=tuple(matching_workers),
            ps_pools=tuple(matching_ps),
        )
    capacity = sum(pool.capacity_nodes() * workers_per_node(pool, workers.gpus_per_worker) for pool in matching_workers)
    warnings: list[str] = []
    if capacity < workers.slots:
        warnings.append(
            f"the matching node pools hold at most {capacity} worker(s), fewer than the job's "
            f"{workers.slots} worker slot(s): {', '.join(pool.describe() for pool in matching_workers)}"
        )
    return PlacementCheck(
        ok=True,
        reason="",
        message="",
        worker_pools=tuple(matching_workers),
        ps_pools=tuple(matching_ps),
        worker_capacity=capacity,
        warnings=tuple(warnings),
    )


def autoscaling_max_needed(spec: TransientTrainingJobSpec, pool: NodePool) -> int | None:
    """The autoscaling maximum ``pool`` needs to hold all of the job's worker slots alone, if more than now."""
    per_node = workers_per_node(pool, spec.workers.gpus_per_worker)
    if not pool.autoscaling or per_node <= 0:
        return None
    needed = -(-spec.workers.slots // per_node)
    return needed if pool.max_nodes is None or needed > pool.max_nodes else None
