"""The ICAC'19 training measurements: ResNet-32 on CIFAR-10, 64K steps, 1 PS + N K80 workers.

Bundled as ``ttj/data/icac19_training/`` (a copy of the CSV files of cake-lab/transient-deep-learning,
Apache-2.0): ``k80_spot/{2,4}-spot`` (32 runs each on preemptible K80s) and ``k80_on_demand/{2,4,8}-demand``
plus the single on-demand K80 baseline ``k80-demand``. Pure parsing, no fitting: see ``fit.py``.

Facts of the files that the reader relies on (checked by the tests):
- ``agg_data.csv`` lists the runs that completed; a run whose master was revoked is missing from it
  and shows in ``vm_data.csv`` as ``Manually stopped due to revoked master``.
- In a cluster of N workers the "master" is one of the N GPU workers (the TF chief); the PS is a
  separate on-demand VM without a GPU.
- ``k80-demand`` has costs only: its durations are derived from the cost at the on-demand K80 price.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

#: Global steps of every measured run.
ICAC19_TRAIN_STEPS = 64_000

#: Cluster directories, by (provisioning, workers).
TRANSIENT_DIRS: dict[int, str] = {2: "k80_spot/2-spot", 4: "k80_spot/4-spot"}
ON_DEMAND_DIRS: dict[int, str] = {2: "k80_on_demand/2-demand", 4: "k80_on_demand/4-demand", 8: "k80_on_demand/8-demand"}
SINGLE_K80_COSTS = "k80_on_demand/k80-demand/cost.csv"

_VM_NAME = re.compile(r"(?P<zone>[a-z]+-[a-z]+\d+-[a-z])-run(?P<run>\d+)-(?P<role>master|worker-\d+)$")
_MASTER_LOST = "Manually stopped due to revoked master"


def bundled_training_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "data" / "icac19_training"


@dataclass(frozen=True)
class VmRecord:
    zone: str
    run: int
    role: str  # "master" or "worker-N"
    uptime_s: float
    end: str  # "Job completed", "Revoked", the master-lost note, or "" (on-demand files say nothing)

    @property
    def is_master(self) -> bool:
        return self.role == "master"

    @property
    def revoked(self) -> bool:
        """Whether GCE took this VM: a revoked worker, or the master of a run stopped for losing it."""
        return self.end == "Revoked" or (self.is_master and self.end == _MASTER_LOST)


@dataclass(frozen=True)
class MeasuredRun:
    zone: str
    run: int
    duration_s: float
    accuracy: float
    cost_usd: float


@dataclass
class MeasuredCluster:
    """All runs of one measured configuration."""

    workers: int
    provisioning: str  # "preemptible" or "on-demand"
    completed: list[MeasuredRun]
    vms: list[VmRecord] = field(default_factory=list)

    def runs_vms(self) -> dict[tuple[str, int], list[VmRecord]]:
        grouped: dict[tuple[str, int], list[VmRecord]] = {}
        for vm in self.vms:
            grouped.setdefault((vm.zone, vm.run), []).append(vm)
        return grouped

    @property
    def failed_runs(self) -> int:
        """Runs lost because their master was revoked."""
        return sum(1 for vms in self.runs_vms().values() if any(v.is_master and v.revoked for v in vms))

    @property
    def launched_runs(self) -> int:
        return len(self.runs_vms()) if self.vms else len(self.completed)

    def revocations_of(self, zone: str, run: int) -> int:
        return sum(1 for vm in self.runs_vms().get((zone, run), []) if vm.revoked)


def _rows(path: Path) -> Iterable[dict[str, str]]:
    if not path.is_file():
        raise FileNotFoundError(f"ICAC'19 training data: {path} is missing")
    with path.open(newline="", encoding="utf-8") as handle:
        yield from csv.DictReader(handle)


def parse_vm_name(name: str) -> tuple[str, int, str]:
    match = _VM_NAME.search(name.strip())
    if match is None:
        raise ValueError(f"ICAC'19 vm_data: cannot read zone/run/role from VM name {name!r}")
    return match["zone"], int(match["run"]), match["role"]


def read_runs(path: Path) -> list[MeasuredRun]:
    return [
        MeasuredRun(
            zone=row["Zone"].strip(),
            run=int(row["Run"]),
            duration_s=float(row["Duration"]),
            accuracy=float(row["Accuracy"]),
            cost_usd=float(row["Cost"]),
        )
        for row in _rows(path)
    ]


def read_vms(path: Path) -> list[VmRecord]:
    records = []
    for row in _rows(path):
        zone, run, role = parse_vm_name(row["VM_name"])
        records.append(VmRecord(zone, run, role, float(row["Uptime"]), (row.get("Revoked") or "").strip()))
    return records


def load_cluster(root: Path, relative: str, workers: int, provisioning: str) -> MeasuredCluster:
    directory = root / relative
    vm_path = directory / "vm_data.csv"
    vms = read_vms(vm_path) if vm_path.is_file() else []
    return MeasuredCluster(workers, provisioning, read_runs(directory / "agg_data.csv"), vms)


def load_single_k80_costs(root: Path) -> list[float]:
    return [float(row["Cost"]) for row in _rows(root / SINGLE_K80_COSTS)]


@dataclass
class TrainingData:
    transient: dict[int, MeasuredCluster]
    on_demand: dict[int, MeasuredCluster]
    single_k80_costs: list[float]

    def clusters(self) -> list[MeasuredCluster]:
        return [*self.transient.values(), *self.on_demand.values()]


def load_training_data(root: str | Path | None = None) -> TrainingData:
    base = Path(root) if root is not None else bundled_training_dir()
    # accept the shared layout (…/icac19 with a training/ folder) as well as the bundled one
    if (base / "training").is_dir():
        base = base / "training"
    return TrainingData(
        transient={n: load_cluster(base, d, n, "preemptible") for n, d in TRANSIENT_DIRS.items()},
        on_demand={n: load_cluster(base, d, n, "on-demand") for n, d in ON_DEMAND_DIRS.items()},
        single_k80_costs=load_single_k80_costs(base),
    )
