"""How long a preemptible GPU server lives: an empirical model of measured GCE lifetimes.

Pure (no Kubernetes, no I/O beyond reading the CSV): the local cluster draws node lifetimes from it,
and the what-if simulator may reuse it.

The data are the ICAC'19 measurements (Li et al., "Speeding up Deep Learning with Transient Servers",
Figure 3; cake-lab/transient-deep-learning, Apache-2.0), bundled as ``ttj/data/icac19_lifetime.csv``:
sections ``K80``, ``P100``, ``V100`` of ``VM name,Start,Terminate`` rows (``M/D/YY HH:MM``, February 2019).
The file's trailing "Previous experiments" section (2018, clock times without dates, some garbled)
is left out on purpose: its lifetimes across midnight cannot be told apart.

A preemptible VM is stopped by GCE after 24 h at the latest; the measurements overshoot that by the
minutes GCE takes to stop a VM, so every lifetime of 24 h or more counts as "lived to the limit".
Spot VMs have no such limit: for them a survivor of the measured day is simply not preempted by this
model (``math.inf``).
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

#: GCE stops a preemptible VM at the latest after this long.
PREEMPTIBLE_MAX_LIFETIME_S = 24 * 3600.0

#: GPU types measured in the file, as GKE names the accelerators.
ACCELERATOR_TO_GPU_TYPE: dict[str, str] = {
    "nvidia-tesla-k80": "K80",
    "nvidia-tesla-p100": "P100",
    "nvidia-tesla-v100": "V100",
}

_SECTION_NAMES = ("K80", "P100", "V100")
_STOP_SECTION = "Previous experiments"
_TIME_FORMAT = "%m/%d/%y %H:%M"


@dataclass(frozen=True)
class MeasuredLifetime:
    gpu_type: str
    vm_name: str
    seconds: float

    @property
    def reached_limit(self) -> bool:
        return self.seconds >= PREEMPTIBLE_MAX_LIFETIME_S


def bundled_lifetimes_path() -> Path:
    return Path(__file__).resolve().parent.parent / "data" / "icac19_lifetime.csv"


def parse_lifetimes(lines: Iterable[str]) -> list[MeasuredLifetime]:
    """Parse the ICAC'19 lifetime CSV (its dated sections only)."""
    measured: list[MeasuredLifetime] = []
    section: str | None = None
    for row in csv.reader(lines):
        if not row or not row[0].strip():
            continue
        head = row[0].strip()
        if head == _STOP_SECTION:
            break
        if head in _SECTION_NAMES:
            section = head
            continue
        if head == "VM name" or section is None or len(row) < 3:
            continue
        try:
            start = datetime.strptime(row[1].strip(), _TIME_FORMAT)
            end = datetime.strptime(row[2].strip(), _TIME_FORMAT)
        except ValueError as exc:
            raise ValueError(f"lifetime file: bad timestamps in row {row!r}: {exc}") from exc
        measured.append(MeasuredLifetime(section, head, (end - start).total_seconds()))
    if not measured:
        raise ValueError("lifetime file: no K80/P100/V100 rows found")
    return measured


def load_lifetimes(path: str | Path | None = None) -> list[MeasuredLifetime]:
    source = Path(path) if path is not None else bundled_lifetimes_path()
    with source.open(newline="", encoding="utf-8") as handle:
        return parse_lifetimes(handle)


class LifetimeDistribution:
    """Empirical lifetime distribution of preemptible servers, sampled by inverting its CDF.

    Between two measured revocations the CDF is interpolated linearly (so draws are not restricted
    to the measured values); the share that lived to the 24 h limit is an atom at the limit.
    """

    def __init__(self, lifetimes_s: Sequence[float], *, provisioning: str = "preemptible") -> None:
        if not lifetimes_s:
            raise ValueError("a lifetime distribution needs at least one measured lifetime")
        if provisioning not in ("preemptible", "spot"):
            raise ValueError(f"provisioning must be 'preemptible' or 'spot', not {provisioning!r}")
        self.provisioning = provisioning
        self._sorted = sorted(min(max(0.0, s), PREEMPTIBLE_MAX_LIFETIME_S) for s in lifetimes_s)

    @classmethod
    def for_accelerator(
        cls,
        accelerator: str | None,
        *,
        provisioning: str = "preemptible",
        measured: Sequence[MeasuredLifetime] | None = None,
    ) -> LifetimeDistribution:
        """The measurements of that GPU type; for a type not measured (e.g. T4), all GPU types pooled."""
        rows = list(measured) if measured is not None else load_lifetimes()
        gpu_type = ACCELERATOR_TO_GPU_TYPE.get(accelerator or "")
        chosen = [r.seconds for r in rows if gpu_type is None or r.gpu_type == gpu_type]
        return cls(chosen or [r.seconds for r in rows], provisioning=provisioning)

    @property
    def sample_size(self) -> int:
        return len(self._sorted)

    def revoked_within(self, seconds: float) -> float:
        """Share of measured servers revoked (before the 24 h limit) within ``seconds`` of start."""
        revoked = sum(1 for s in self._sorted if s <= seconds and s < PREEMPTIBLE_MAX_LIFETIME_S)
        return revoked / len(self._sorted)

    def survived_limit(self) -> float:
        """Share of measured servers that lived to the 24 h limit."""
        return sum(1 for s in self._sorted if s >= PREEMPTIBLE_MAX_LIFETIME_S) / len(self._sorted)

    def sample(self, rng: random.Random) -> float:
        """One lifetime in seconds: below 24 h a revocation; 24 h (preemptible) or inf (spot) otherwise."""
        n = len(self._sorted)
        position = rng.random() * n  # in [0, n)
        index = int(position)
        upper = self._sorted[index]
        if upper >= PREEMPTIBLE_MAX_LIFETIME_S:
            return PREEMPTIBLE_MAX_LIFETIME_S if self.provisioning == "preemptible" else math.inf
        lower = self._sorted[index - 1] if index > 0 else 0.0
        return lower + (upper - lower) * (position - index)

    def quantile(self, share: float) -> float:
        """Smallest measured lifetime with at least ``share`` of servers gone by then (for reports)."""
        index = min(len(self._sorted) - 1, max(0, math.ceil(share * len(self._sorted)) - 1))
        return self._sorted[index]

    def hazard_per_second(self, age_s: float, window_s: float = 2 * 3600.0) -> float:
        """Revocation rate of a server that has lived ``age_s``, over the next ``window_s`` (per second).

        From the measured servers that outlived ``age_s``: the share revoked within the window, as a
        constant rate. Revocations at the 24 h limit are not counted (GCE announces them like any other,
        and they are certain, not random). Past the measured ages the last window is used. A window
        without a revocation counts half a revocation, so a small sample never claims a zero hazard.
        """
        limit = PREEMPTIBLE_MAX_LIFETIME_S
        age = min(max(0.0, age_s), limit - window_s)
        survivors = [s for s in self._sorted if s > age]
        if not survivors:
            return 0.0
        revoked = sum(1 for s in survivors if s <= age + window_s and s < limit)
        share = max(revoked, 0.5) / len(survivors)
        return -math.log(max(1e-12, 1.0 - min(share, 0.999))) / window_s
