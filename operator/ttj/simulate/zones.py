"""Zones in ``ttj simulate --plan``: which groups are pinned to another zone than the parameter servers, and
what their steps cost in cross-zone traffic, priced as the operator prices it (:mod:`ttj.cost.traffic`).

A plan's groups are GPU type x provisioning; ``--zones`` pins some of them to a zone (a group's ``zone`` in the
job) and ``--ps-zone`` names the parameter servers'. Each step of a worker in another zone pulls and pushes
the model's variables across zones: the job's steps are shared out among the groups by their steps per second
(the fitted per-worker rate times the group's count, as the operator shares them by measured rates), and each
group's share costs ``2 x`` the bytes of every PS in another zone per step at the price table's
``interZoneUSDPerGiB``. The bytes are the model's (``--parameter-bytes``, split evenly over the parameter
servers): by default ResNet-32's, the model the throughput is fitted on. Cross-zone latency is not modelled: a
pinned group steps as fast as beside the PS.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ttj.cost.traffic import ZonedWorker, cross_zone_traffic

#: Bytes of ResNet-32's variables (trainable parameters and BatchNormalization statistics, float32):
#: ``python -m ttj_trainer --self-check --program ttj_trainer.builtin:program --arg model=resnet32
#: --arg dataset=synthetic`` prints ``"step_bytes_per_ps": [1865704]`` (docs/cost.md).
RESNET32_PARAMETER_BYTES = 1_865_704


@dataclass(frozen=True)
class Zones:
    """Where the parameter servers are, which (type, provisioning) groups are pinned where, and the bytes of the
    model's variables over all parameter servers."""

    ps_zone: str | None = None
    #: (accelerator, provisioning) → zone; (accelerator, None) pins every provisioning of that type.
    pinned: Mapping[tuple[str, str | None], str] = field(default_factory=dict)
    parameter_bytes: int = RESNET32_PARAMETER_BYTES

    def zone_of(self, accelerator: str, provisioning: str) -> str | None:
        return self.pinned.get((accelerator, provisioning)) or self.pinned.get((accelerator, None))

    def across(self, accelerator: str, provisioning: str) -> bool:
        """Whether a worker of this group is in another zone than the parameter servers (both known)."""
        zone = self.zone_of(accelerator, provisioning)
        return self.ps_zone is not None and zone is not None and zone != self.ps_zone

    def ps_bytes(self, ps_replicas: int) -> list[int]:
        """The model's bytes on each parameter server (split evenly, the remainder on the first)."""
        if ps_replicas <= 0:
            return []
        each, rest = divmod(self.parameter_bytes, ps_replicas)
        return [each + (1 if index < rest else 0) for index in range(ps_replicas)]


@dataclass(frozen=True)
class GroupRate:
    """One group of a mix as the traffic is shared: its name, GPU type, provisioning, and steps per second."""

    name: str
    accelerator: str
    provisioning: str
    steps_per_second: float


def cross_zone_usd_per_step(
    groups: Sequence[GroupRate], zones: Zones, *, ps_replicas: int, usd_per_gib: float, steps: int
) -> float:
    """The cross-zone traffic of ``steps`` global steps made by ``groups``, per step (USD): 0 when nothing is
    pinned away from the parameter servers."""
    if steps <= 0 or ps_replicas <= 0 or not any(zones.across(g.accelerator, g.provisioning) for g in groups):
        return 0.0
    workers = [
        ZonedWorker(g.name, zones.zone_of(g.accelerator, g.provisioning), 1.0, steps_per_second=g.steps_per_second)
        for g in groups
    ]
    traffic = cross_zone_traffic(
        workers,
        ps_zones=[zones.ps_zone] * ps_replicas,
        parameter_bytes=zones.ps_bytes(ps_replicas),
        steps=steps,
        usd_per_gib=usd_per_gib,
    )
    return traffic.usd / steps


def parse_zones(text: str, resolve: Callable[[str], str]) -> dict[tuple[str, str | None], str]:
    """``t4:spot=us-central1-b,l4=us-central1-c`` → {(nvidia-tesla-t4, spot): us-central1-b, (nvidia-l4, None):
    us-central1-c}."""
    pinned: dict[tuple[str, str | None], str] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        kind, _, zone = part.partition("=")
        accelerator, _, provisioning = kind.partition(":")
        if not zone.strip() or provisioning not in ("", "spot", "preemptible", "on-demand"):
            raise ValueError(f"--zones: expected TYPE[:PROVISIONING]=ZONE, e.g. t4:spot=us-central1-b, not {part!r}")
        pinned[(resolve(accelerator.strip()), provisioning or None)] = zone.strip()
    return pinned
