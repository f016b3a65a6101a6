"""Node pools of the local cluster, configured as on GKE, and the Node objects they produce (pure).

A pool is given on the command line (``--pool name=gpu,nodes=4,accelerator=nvidia-tesla-t4,...``)
or in a YAML file (``--pools FILE`` with ``pools: [{name: gpu, nodes: 4, ...}]``); keys are the same
(``-`` or ``_``). Nodes are labelled and tainted the way GKE does it, so manifests written for GKE
select them unchanged.
"""

from __future__ import annotations

import re
import secrets
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ttj.preemption.traces import load_trace
from ttj_contract import (
    ACCELERATOR_LABEL,
    COMPUTE_CLASS_LABEL,
    GPU_RESOURCE,
    INSTANCE_TYPE_LABEL,
    LEGACY_INSTANCE_TYPE_LABEL,
    NODE_POOL_LABEL,
    Provisioning,
    format_time,
    provisioning_labels,
)

PROVISIONINGS: tuple[str, ...] = (Provisioning.ON_DEMAND, Provisioning.SPOT, Provisioning.PREEMPTIBLE)
PREEMPTION_MODELS = ("none", "scripted", "lifetime")
GPU_TAINT: dict[str, str] = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
#: GKE taints a node that has received its termination notice so nothing new lands on it.
IMPENDING_TERMINATION_TAINT: dict[str, str] = {
    "key": "cloud.google.com/impending-node-termination",
    "value": "",
    "effect": "NoSchedule",
}
CLUSTER_NAME = "ttj-local"
COMPUTE_CLASS_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
#: every node's InternalIP: the kubelets (and pods sharing the host's network) are on this machine
NODE_INTERNAL_IP = "127.0.0.1"
NODE_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


@dataclass(frozen=True)
class NodePool:
    """One GKE node pool. Times are real (wall-clock) seconds unless named ``*_simulated``."""

    name: str
    nodes: int = 1
    provisioning: str = "on-demand"
    accelerator: str | None = None
    gpus: int = 0
    cpu: str = "4"
    memory: str = "15Gi"
    machine_type: str = "n1-standard-4"
    zone: str = "us-central1-a"
    max_pods: int = 110
    #: none: only injected preemptions; scripted: at the times in preempt_at; lifetime: drawn per node
    preemption: str = "none"
    preempt_at: tuple[float, ...] = ()
    seed: int = 0
    #: simulated seconds per real second for drawn lifetimes and a followed trace (3600: an hour of GCE in a second)
    time_scale: float = 1.0
    #: GKE gives non-system pods 15 s of the node's shutdown to terminate
    grace: float = 15.0
    #: simulated pods only: seconds their containers take to exit after SIGTERM (a trainer writing its
    #: checkpoint), within the grace period; containers run as processes exit when they do
    stop_seconds: float = 0.0
    #: seconds until the pool replaces a preempted node (new name); None: never
    restore_after: float | None = 10.0
    lifetimes_file: str | None = None
    #: simulated GPU speed relative to a T4 (local cluster only: reaches the pods as an environment variable)
    speed: float = 1.0
    #: simulated GPU seconds per training step at speed 1.0 (0: the trainer adds no simulated GPU time)
    step_seconds: float = 0.0
    #: the pool starts stocked out (no node, scale-ups fail) until restocked
    stocked_out: bool = False
    #: a scheduled stock-out: (from, until) seconds after the start; until None: until restocked
    stock_out_window: tuple[float, float | None] | None = None
    #: a spot availability trace (JSON file, ttj.preemption.traces) the pool's stock follows: out while it says
    #: 0 (its nodes preempted), back to its size while it says more; at ``time_scale`` trace seconds per second
    trace: str | None = None
    #: trace seconds skipped at the start: the replay begins this far into the trace
    trace_start: float = 0.0
    #: the GKE custom compute class the pool's nodes serve: labelled and tainted with its name, as GKE does
    compute_class: str | None = None

    def __post_init__(self) -> None:
        if not self.name or not all(c.isalnum() or c == "-" for c in self.name) or not self.name[0].isalpha():
            raise ValueError(f"pool name {self.name!r}: use letters, digits and '-', starting with a letter")
        if self.nodes < 0:
            raise ValueError(f"pool {self.name}: nodes must be >= 0")
        if self.provisioning not in PROVISIONINGS:
            raise ValueError(f"pool {self.name}: provisioning must be one of {', '.join(PROVISIONINGS)}")
        if self.preemption not in PREEMPTION_MODELS:
            raise ValueError(f"pool {self.name}: preemption must be one of {', '.join(PREEMPTION_MODELS)}")
        if self.preemption == "lifetime" and self.provisioning == Provisioning.ON_DEMAND:
            raise ValueError(f"pool {self.name}: on-demand nodes are not preempted; use provisioning=spot")
        if self.preemption == "scripted" and not self.preempt_at:
            raise ValueError(f"pool {self.name}: preemption=scripted needs preempt-at=SECONDS[:SECONDS...]")
        if self.gpus < 0 or (self.gpus > 0 and not self.accelerator):
            raise ValueError(f"pool {self.name}: gpus needs an accelerator (e.g. accelerator=nvidia-tesla-t4)")
        if self.time_scale <= 0 or self.grace < 0 or self.stop_seconds < 0:
            raise ValueError(f"pool {self.name}: time-scale must be > 0, grace and stop-seconds >= 0")
        if self.speed <= 0 or self.step_seconds < 0:
            raise ValueError(f"pool {self.name}: speed must be > 0 and step-seconds >= 0")
        if self.compute_class is not None and not COMPUTE_CLASS_NAME.fullmatch(self.compute_class):
            raise ValueError(f"pool {self.name}: compute-class must be a label value (e.g. gpu-fallback)")
        window = self.stock_out_window
        if window is not None and (window[0] < 0 or (window[1] is not None and window[1] <= window[0])):
            raise ValueError(f"pool {self.name}: stock-out-window FROM:UNTIL needs 0 <= FROM < UNTIL")
        if self.trace is not None and (self.stocked_out or window is not None):
            raise ValueError(f"pool {self.name}: a trace decides the stock; drop stocked-out and stock-out-window")
        if self.trace_start < 0:
            raise ValueError(f"pool {self.name}: trace-start must be >= 0")

    @property
    def region(self) -> str:
        return self.zone.rsplit("-", 1)[0]


#: The default pools' names: GKE calls a cluster's first pool ``default-pool``; ``t4-spot`` is the pool the
#: examples select (examples/full.yaml: nodeSelector cloud.google.com/gke-nodepool: t4-spot).
DEFAULT_CPU_POOL = "default-pool"
DEFAULT_GPU_POOL = "t4-spot"
#: Every example under examples/ at its desired size at once (3 + 4 + 4 workers), with a spare node.
DEFAULT_GPU_NODES = 12


#: A spot pool of n1-standard-8 VMs with one T4 each: the examples' pool, and the one tests and benchmarks vary.
SPOT_T4_POOL = NodePool(
    name=DEFAULT_GPU_POOL,
    nodes=DEFAULT_GPU_NODES,
    provisioning="spot",
    accelerator="nvidia-tesla-t4",
    gpus=1,
    cpu="8",
    memory="30Gi",
    machine_type="n1-standard-8",
)


def spot_t4_pool(**changes: Any) -> NodePool:
    """:data:`SPOT_T4_POOL` with ``changes`` (any :class:`NodePool` field)."""
    return replace(SPOT_T4_POOL, **changes)


def default_pools() -> list[NodePool]:
    """The contract's default: an on-demand CPU pool and a spot T4 pool, enough for the examples."""
    cpu = NodePool(name=DEFAULT_CPU_POOL, nodes=2, cpu="4", memory="15Gi", machine_type="n1-standard-4")
    return [cpu, SPOT_T4_POOL]


_FIELD_TYPES = {f.name: f.type for f in fields(NodePool)}


def _convert(pool_name: str, key: str, value: Any) -> Any:
    kind = str(_FIELD_TYPES[key])
    if key == "trace":
        return _trace_path(pool_name, value)
    try:
        if key == "preempt_at":
            if isinstance(value, list | tuple):
                return tuple(float(v) for v in value)
            return tuple(float(v) for v in str(value).split(":") if v.strip())
        if key == "stock_out_window":
            return _window(value)
        if kind == "bool":
            return _boolean(value)
        if key == "restore_after":
            return None if str(value).strip().lower() in ("never", "none", "") else float(value)
        if kind == "int":
            return int(value)
        if kind == "float":
            return float(value)
        if kind == "str | None":
            return None if value in (None, "", "none") else str(value)
    except ValueError as exc:
        raise ValueError(f"pool {pool_name}: bad value {value!r} for {key.replace('_', '-')}") from exc
    return str(value)


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in ("true", "false", "yes", "no", "1", "0"):
        raise ValueError(text)
    return text in ("true", "yes", "1")


def _window(value: Any) -> tuple[float, float | None] | None:
    """``FROM:UNTIL`` (or ``FROM:`` / ``FROM:never``: until restocked), or a two-item list."""
    if value in (None, "", "none"):
        return None
    parts = list(value) if isinstance(value, list | tuple) else str(value).split(":")
    if len(parts) != 2:
        raise ValueError(str(value))
    until = parts[1]
    return float(parts[0]), None if until is None or str(until).strip().lower() in ("", "never") else float(until)


def _trace_path(pool_name: str, value: Any) -> str | None:
    """The trace file's path, read once here so that a bad file is said when the pool is given."""
    if value in (None, "", "none"):
        return None
    try:
        load_trace(str(value))
    except ValueError as exc:
        raise ValueError(f"pool {pool_name}: trace {exc}") from None
    return str(value)


def pool_from_mapping(values: Mapping[str, Any]) -> NodePool:
    normalised = {str(k).strip().replace("-", "_"): v for k, v in values.items()}
    name = str(normalised.get("name") or "")
    unknown = sorted(set(normalised) - set(_FIELD_TYPES))
    if unknown:
        known = ", ".join(sorted(k.replace("_", "-") for k in _FIELD_TYPES))
        raise ValueError(f"pool {name or '?'}: unknown option(s) {', '.join(unknown)}; known: {known}")
    if "accelerator" in normalised and normalised["accelerator"] and "gpus" not in normalised:
        normalised["gpus"] = 1
    converted = {k: _convert(name, k, v) for k, v in normalised.items()}
    return NodePool(**converted)


def parse_pool_option(text: str) -> NodePool:
    """``name=gpu,nodes=4,accelerator=nvidia-tesla-t4,provisioning=spot`` → NodePool."""
    values: dict[str, str] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"--pool {text!r}: expected key=value pairs separated by ',' (got {part!r})")
        values[key.strip()] = value.strip()
    if "name" not in values:
        raise ValueError(f"--pool {text!r}: name=... is required")
    return pool_from_mapping(values)


def load_pools_file(path: str | Path) -> list[NodePool]:
    import yaml

    document = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    entries = document.get("pools") if isinstance(document, dict) else document
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValueError(f"{path}: expected 'pools:' with a list of pool mappings")
    return [pool_from_mapping(_traces_beside(e, Path(path).parent)) for e in entries]


def _traces_beside(entry: dict[str, Any], directory: Path) -> dict[str, Any]:
    """A relative trace path in a pools file names a file beside it, wherever the cluster is started."""
    key = next((k for k in entry if str(k).strip() == "trace"), None)
    if key is None or not entry[key] or Path(str(entry[key])).is_absolute():
        return entry
    return {**entry, key: str(directory / str(entry[key]))}


def check_pools(pools: Sequence[NodePool]) -> list[NodePool]:
    names = [p.name for p in pools]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"pool names must be unique: {', '.join(duplicates)}")
    return list(pools)


def _group_prefix(pool: NodePool) -> str:
    return f"gke-{CLUSTER_NAME}-{pool.name}-{zlib.crc32(f'{CLUSTER_NAME}/{pool.name}'.encode()):08x}"


def instance_group_name(pool: NodePool) -> str:
    """The pool's managed instance group, GKE's shape: ``gke-CLUSTER-POOL-<8 hex>-grp``."""
    return f"{_group_prefix(pool)}-grp"


def new_node_name(pool: NodePool, suffix: str | None = None) -> str:
    """GKE's shape: ``gke-CLUSTER-POOL-<8 hex of the pool's instance group>-<4 chars>``."""
    if suffix is None:
        suffix = "".join(secrets.choice(NODE_SUFFIX_ALPHABET) for _ in range(4))
    return f"{_group_prefix(pool)}-{suffix}"


def node_labels(pool: NodePool, node_name: str) -> dict[str, str]:
    labels = {
        "kubernetes.io/hostname": node_name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        INSTANCE_TYPE_LABEL: pool.machine_type,
        LEGACY_INSTANCE_TYPE_LABEL: pool.machine_type,
        "topology.kubernetes.io/region": pool.region,
        "topology.kubernetes.io/zone": pool.zone,
        "failure-domain.beta.kubernetes.io/region": pool.region,
        "failure-domain.beta.kubernetes.io/zone": pool.zone,
        NODE_POOL_LABEL: pool.name,
        "cloud.google.com/gke-os-distribution": "cos",
        "cloud.google.com/machine-family": pool.machine_type.split("-", 1)[0],
        "cloud.google.com/gke-provisioning": {"on-demand": "standard"}.get(pool.provisioning, pool.provisioning),
        "ttj.local/simulated": "true",
        **provisioning_labels(pool.provisioning),
    }
    if pool.accelerator:
        labels[ACCELERATOR_LABEL] = pool.accelerator
        labels["cloud.google.com/gke-gpu"] = "true"
    if pool.compute_class:
        labels[COMPUTE_CLASS_LABEL] = pool.compute_class
    return labels


def now_rfc3339() -> str:
    """metav1.Time of now."""
    return format_time(datetime.now(UTC))


def ready_condition(ready: bool, reason: str, message: str, now: str) -> dict[str, str]:
    return {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


def node_object(pool: NodePool, node_name: str, internal_ip: str, now: str | None = None) -> dict[str, Any]:
    """The Node a pool's VM registers (metadata, spec with taints, status with capacity and Ready)."""
    stamp = now or now_rfc3339()
    capacity = _node_capacity(pool)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node_name,
            "labels": node_labels(pool, node_name),
            "annotations": {
                "ttj.local/pool": pool.name,
                "ttj.local/provisioning": pool.provisioning,
                "ttj.local/simulated-speed": f"{pool.speed:g}",
            },
        },
        "spec": {
            "providerID": f"gce://ttj-local/{pool.zone}/{node_name}",
            "podCIDR": "127.0.0.0/8",
            "taints": _node_taints(pool),
        },
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": _node_conditions(stamp),
            "addresses": [
                {"type": "InternalIP", "address": internal_ip},
                {"type": "Hostname", "address": node_name},
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "osImage": "ttj local cluster (simulated Container-Optimized OS node)",
                "kubeletVersion": "v1.32.0-ttj-local",
                "kubeProxyVersion": "v1.32.0-ttj-local",
                "containerRuntimeVersion": "ttj-local://process",
                "kernelVersion": "",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        },
    }


def _node_capacity(pool: NodePool) -> dict[str, str]:
    capacity: dict[str, str] = {
        "cpu": pool.cpu,
        "memory": pool.memory,
        "pods": str(pool.max_pods),
        "ephemeral-storage": "100Gi",
    }
    if pool.gpus:
        capacity[GPU_RESOURCE] = str(pool.gpus)
    return capacity


def _node_taints(pool: NodePool) -> list[dict[str, str]]:
    """GKE's GPU taint on GPU nodes, and the compute class's on a compute class's nodes."""
    taints = [dict(GPU_TAINT)] if pool.gpus else []
    if pool.compute_class:
        taints.append({"key": COMPUTE_CLASS_LABEL, "value": pool.compute_class, "effect": "NoSchedule"})
    return taints


def _node_conditions(stamp: str) -> list[dict[str, str]]:
    """A healthy kubelet's conditions: no pressure, Ready."""
    conditions = [
        {
            "type": t,
            "status": "False",
            "reason": r,
            "message": m,
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }
        for t, r, m in (
            ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        )
    ]
    conditions.append(ready_condition(True, "KubeletReady", "kubelet is posting ready status", stamp))
    return conditions
