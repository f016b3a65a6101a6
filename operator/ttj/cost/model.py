"""Cost accrual: what a job's pods have cost, per second of run time, kept in the job's status.

Pure: no kopf, no Kubernetes client, no cloud client (import-linter enforces). The controller turns
the pods it sees into :class:`PodObservation` s and calls :func:`accrue` with the ledger it stored last
time (``status.cost``); it writes the result back to ``status.cost``.

How the ledger stays exact:

- A pod costs its share of its node's hourly price for every second from when it started running to
  when it stopped (finished, failed or preempted), or to ``now`` while it runs. The whole figure is
  recomputed from the pod's start time on every call, so it does not depend on how often the
  operator reconciles, nor on the operator having been down in between.
- A pod's rate and start time are frozen in its ledger entry the first time it is seen running, so a
  container restart (which resets ``startedAt``) or a later price edit does not rewrite the past.
- When a pod disappears, its entry's cost moves to ``settledUSD``. The operator accrues a finished or
  preempted pod (with its end time) before it deletes it, so no second of a deleted pod is lost.
  A pod deleted by someone else while the operator was not looking keeps the cost of its last accrual.
- Workers are priced as their node was bought (node labels ``cloud.google.com/gke-spot``,
  ``cloud.google.com/gke-preemptible``); parameter servers always at on-demand prices.
  ``onDemandEquivalentUSD`` prices the same pod-seconds at on-demand prices.
- Traffic between workers and parameter servers in different zones is priced by :mod:`ttj.cost.traffic`
  after each accrual; ``crossZone.usd`` keeps its total, part of ``usd`` (not of the on-demand equivalent: an
  on-demand run beside its parameter servers has none).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from ttj.api.models import CostStatus, PodCost, TransientTrainingJobSpec
from ttj.cost.prices import PriceTable
from ttj_contract import (
    ACCELERATOR_COUNT_LABEL,
    ACCELERATOR_LABEL,
    INSTANCE_TYPE_LABEL,
    LEGACY_INSTANCE_TYPE_LABEL,
    Provisioning,
    format_micro_time,
    format_usd,
    parse_time,
    provisioning_of,
)

Role = Literal["ps", "worker"]


@dataclass(frozen=True)
class NodeShape:
    """What a node is, as far as its price is concerned."""

    machine_type: str | None
    accelerator_type: str | None
    accelerator_count: int
    provisioning: Provisioning

    @classmethod
    def from_labels(cls, labels: Mapping[str, str], gpu_capacity: int | None = None) -> NodeShape:
        """From a Node's labels and, when known, its ``nvidia.com/gpu`` capacity."""
        accelerator = labels.get(ACCELERATOR_LABEL) or None
        count = gpu_capacity
        if count is None:
            raw = labels.get(ACCELERATOR_COUNT_LABEL, "")
            count = int(raw) if raw.isdigit() else (1 if accelerator else 0)
        return cls(
            machine_type=labels.get(INSTANCE_TYPE_LABEL) or labels.get(LEGACY_INSTANCE_TYPE_LABEL) or None,
            accelerator_type=accelerator,
            accelerator_count=count if accelerator else 0,
            provisioning=provisioning_of(labels),
        )


def expected_worker_node(spec: TransientTrainingJobSpec, prices: PriceTable) -> NodeShape:
    """The node a new worker of ``spec`` is expected to land on, before it has one (for projections)."""
    workers = spec.workers
    accelerator = workers.accelerator_type if workers.gpus_per_worker > 0 else None
    host = prices.host_machine_types.get(workers.accelerator_type) if accelerator else None
    return NodeShape(
        machine_type=host or prices.fallback_machine_type,
        accelerator_type=accelerator,
        accelerator_count=workers.gpus_per_worker,
        provisioning=Provisioning(workers.provisioning),
    )


@dataclass(frozen=True)
class PodObservation:
    """One of the job's pods as the operator sees it now."""

    name: str
    uid: str
    role: Role
    #: When it started running; ``None`` while it has never run (pending pods cost nothing here).
    started_at: datetime | None
    #: When it stopped running (finished, failed, preempted); ``None`` while it runs.
    ended_at: datetime | None = None
    #: Its node; ``None`` when the node is gone or unknown (then the job's expected node is used).
    node: NodeShape | None = None
    #: GPUs the pod asks for: a worker pays ``gpus / node GPUs`` of its node.
    gpus: int = 0
    #: Share of the node the pod pays when not derived from GPUs (e.g. its CPU request over the node's
    #: allocatable CPU for a parameter server sharing a node); ``None``: the whole node.
    node_share: float | None = None
    #: The worker group the pod was made for (spec.workers.groups); None without groups.
    group: str | None = None
    #: Its node's zone (``topology.kubernetes.io/zone``); None when unknown. Prices cross-zone traffic.
    zone: str | None = None


@dataclass(frozen=True)
class PodRate:
    """A pod's hourly price, as bought and at on-demand prices."""

    usd_per_hour: float
    on_demand_usd_per_hour: float
    provisioning: Provisioning
    notes: tuple[str, ...] = ()


def pod_rate(pod: PodObservation, prices: PriceTable, fallback_node: NodeShape | None = None) -> PodRate:
    """What ``pod`` costs per hour: its share of its node; parameter servers at on-demand prices."""
    node = pod.node or fallback_node
    notes: list[str] = []
    if node is None:
        return PodRate(0.0, 0.0, Provisioning.ON_DEMAND, (f"pod {pod.name}: node unknown, priced at $0",))
    if pod.node is None:
        notes.append(f"pod {pod.name}: node unknown, priced as the job's expected node")
    provisioning = Provisioning.ON_DEMAND if pod.role == "ps" else node.provisioning
    price = prices.node_price(
        machine_type=node.machine_type,
        accelerator_type=node.accelerator_type,
        accelerator_count=node.accelerator_count,
        provisioning=provisioning,
    )
    notes.extend(price.notes)
    if pod.node_share is not None:
        share = min(1.0, max(0.0, pod.node_share))
    elif pod.gpus > 0 and node.accelerator_count > pod.gpus:
        share = pod.gpus / node.accelerator_count
    else:
        share = 1.0
    return PodRate(
        usd_per_hour=price.usd_per_hour * share,
        on_demand_usd_per_hour=price.on_demand_usd_per_hour * share,
        provisioning=provisioning,
        notes=tuple(notes),
    )


def _recorded_time(text: str) -> datetime:
    """A time this module wrote into status.cost (MicroTime: accrual keeps sub-second precision)."""
    moment = parse_time(text)
    if moment is None:
        raise ValueError(f"not a time: {text!r}")
    return moment


def _usd(rate_per_hour: float, seconds: float) -> float:
    return rate_per_hour * max(0.0, seconds) / 3600.0


def accrue(
    previous: CostStatus | None,
    pods: Iterable[PodObservation],
    now: datetime,
    prices: PriceTable,
    *,
    fallback_worker_node: NodeShape | None = None,
    fallback_ps_node: NodeShape | None = None,
    group_worker_nodes: Mapping[str, NodeShape] | None = None,
) -> CostStatus:
    """The job's cost ledger at ``now``, from the last one stored in status and the pods seen now.

    ``pods`` are all the job's pods that exist (running, finished, or preempted but not yet deleted).
    A pod of the previous ledger that is not among them is gone: its cost is settled. Totals never go
    down. ``fallback_*_node`` price pods whose node is unknown (use :func:`expected_worker_node`;
    parameter servers default to the table's fallback machine type, on-demand); a worker of a group in
    ``group_worker_nodes`` is priced on its group's expected node instead.
    """
    if now.tzinfo is None:
        raise ValueError("accrue needs an aware datetime for now (UTC)")
    before = previous or CostStatus()
    if fallback_ps_node is None and prices.fallback_machine_type:
        # Parameter servers run on on-demand CPU nodes; the table's fallback shape is the best guess.
        fallback_ps_node = NodeShape(prices.fallback_machine_type, None, 0, Provisioning.ON_DEMAND)
    known = {entry.uid: entry for entry in before.pods or []}
    entries: list[PodCost] = []
    notes: list[str] = []
    seen: set[str] = set()
    for pod in pods:
        if pod.uid in seen:
            continue
        seen.add(pod.uid)
        old = known.get(pod.uid)
        if pod.started_at is None and old is None:
            continue  # never ran: nothing to charge yet
        fallback = _fallback_node(pod, fallback_worker_node, fallback_ps_node, group_worker_nodes or {})
        entry, pod_notes = _pod_entry(pod, old, now, prices, fallback)
        entries.append(entry)
        notes.extend(pod_notes)
    gone = [entry for uid, entry in known.items() if uid not in seen]
    return _ledger(before, entries, gone, notes=notes, now=now, prices=prices)


def _fallback_node(
    pod: PodObservation,
    worker_node: NodeShape | None,
    ps_node: NodeShape | None,
    group_worker_nodes: Mapping[str, NodeShape],
) -> NodeShape | None:
    """The node ``pod`` is priced on when its own is unknown."""
    if pod.role == "ps":
        return ps_node
    if pod.group is not None and pod.group in group_worker_nodes:
        return group_worker_nodes[pod.group]
    return worker_node


def _pod_entry(
    pod: PodObservation, old: PodCost | None, now: datetime, prices: PriceTable, fallback: NodeShape | None
) -> tuple[PodCost, tuple[str, ...]]:
    """``pod``'s ledger entry at ``now`` and the pricing notes of a pod seen running for the first time."""
    notes: tuple[str, ...] = ()
    if old is not None:
        started = _recorded_time(old.started_at)
        if pod.started_at is not None:
            started = min(started, pod.started_at)
        rate_usd, rate_on_demand, provisioning = old.usd_per_hour, old.on_demand_usd_per_hour, old.provisioning
    else:
        assert pod.started_at is not None
        started = pod.started_at
        rate = pod_rate(pod, prices, fallback)
        notes = rate.notes
        rate_usd, rate_on_demand, provisioning = rate.usd_per_hour, rate.on_demand_usd_per_hour, rate.provisioning
    ended = pod.ended_at
    if ended is None and old is not None and old.ended_at is not None:
        ended = _recorded_time(old.ended_at)  # an ended pod does not start costing again
    until = min(ended, now) if ended is not None else now
    seconds = (until - started).total_seconds()
    usd = _usd(rate_usd, seconds)
    on_demand = _usd(rate_on_demand, seconds)
    if old is not None:  # never let a clock step or a shorter end time take money back
        usd, on_demand = max(usd, old.usd), max(on_demand, old.on_demand_equivalent_usd)
    entry = PodCost(
        name=pod.name,
        uid=pod.uid,
        role=pod.role,
        group=pod.group if pod.group is not None else old.group if old is not None else None,
        provisioning=str(provisioning) if provisioning is not None else None,
        started_at=format_micro_time(started),
        ended_at=format_micro_time(ended) if ended is not None else None,
        usd_per_hour=rate_usd,
        on_demand_usd_per_hour=rate_on_demand,
        usd=usd,
        on_demand_equivalent_usd=on_demand,
        cross_zone_usd=old.cross_zone_usd if old is not None else 0.0,
    )
    return entry, notes


def _ledger(
    before: CostStatus,
    entries: list[PodCost],
    gone: list[PodCost],
    *,
    notes: list[str],
    now: datetime,
    prices: PriceTable,
) -> CostStatus:
    """The ledger of the pods that exist (``entries``), with the cost of the ``gone`` ones settled for good."""
    settled_usd, settled_on_demand = before.settled_usd, before.settled_on_demand_equivalent_usd
    for entry in gone:  # added one by one, in ledger order, so the stored totals stay bit-for-bit reproducible
        settled_usd += entry.usd
        settled_on_demand += entry.on_demand_equivalent_usd
    # Cross-zone traffic (ttj.cost.traffic) is kept as the job's own total; the entries' share is per group only.
    usd_total = settled_usd + sum(entry.usd for entry in entries) + (before.cross_zone.usd if before.cross_zone else 0)
    on_demand_total = settled_on_demand + sum(entry.on_demand_equivalent_usd for entry in entries)
    running_rate = sum(entry.usd_per_hour for entry in entries if entry.ended_at is None)
    kept_notes = list(dict.fromkeys([*(before.notes or []), *notes]))[-10:]
    usd = max(usd_total, before.usd)
    return CostStatus(
        usd=usd,
        summary=format_usd(usd),
        on_demand_equivalent_usd=max(on_demand_total, before.on_demand_equivalent_usd),
        usd_per_hour=running_rate,
        settled_usd=settled_usd,
        settled_on_demand_equivalent_usd=settled_on_demand,
        pods=sorted(entries, key=lambda entry: (entry.role, entry.name, entry.uid)) or None,
        cross_zone=before.cross_zone,
        price_table=prices.name,
        notes=kept_notes or None,
        accrued_at=format_micro_time(now),
    )


def hourly_rate(
    spec: TransientTrainingJobSpec,
    prices: PriceTable,
    *,
    workers: int,
    parameter_servers: int | None = None,
    worker_node: NodeShape | None = None,
    ps_node: NodeShape | None = None,
) -> float:
    """Projected USD per hour of ``workers`` workers and the job's parameter servers (e.g. the desired set).

    Workers are priced on ``worker_node`` (default: :func:`expected_worker_node`), parameter servers
    at on-demand prices on ``ps_node`` (default: the table's fallback machine type).
    """
    worker = pod_rate(
        PodObservation("projected-worker", "", "worker", None, gpus=spec.workers.gpus_per_worker),
        prices,
        worker_node or expected_worker_node(spec, prices),
    )
    ps_shape = ps_node or NodeShape(prices.fallback_machine_type, None, 0, Provisioning.ON_DEMAND)
    ps = pod_rate(PodObservation("projected-ps", "", "ps", None), prices, ps_shape)
    count = spec.parameter_servers.replicas if parameter_servers is None else parameter_servers
    return worker.usd_per_hour * workers + ps.usd_per_hour * count


def worker_hourly_rate(
    spec: TransientTrainingJobSpec, prices: PriceTable, worker_node: NodeShape | None = None
) -> float:
    """Projected USD per hour of one more worker of ``spec``."""
    return hourly_rate(spec, prices, workers=1, parameter_servers=0, worker_node=worker_node)
