"""Which parameter server pods hold the model state (``status.parameterServerPods``).

A running PS pod other than the one recorded for its index holds no model state: the chief must restore
the latest checkpoint. That is a preemption, unless the Deployment rolled out a changed template.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ttj.planner.actions import EmitEvent
from ttj.planner.observed import Obj, has_role, labels_of, meta, name_of, phase_of
from ttj_contract import LABEL_POD_TEMPLATE_HASH, LABEL_PS_INDEX, Role, ps_name


@dataclass(frozen=True)
class ServerLoss:
    """A parameter server whose model state was lost: ``old`` replaced by the running ``new``."""

    index: int
    old: str
    new: str


@dataclass(frozen=True)
class ParameterServers:
    #: The PS pod holding the model state, by index ("" while none has run).
    pods: tuple[str, ...]
    #: Every index has a running pod.
    all_running: bool
    #: Some index has a new pod since the last pass.
    replaced: bool
    #: PS pods lost to preemption in this pass.
    preemptions: int
    events: tuple[EmitEvent, ...]
    #: Some index's recorded pod (one that held model state) is not running now.
    lost: bool = False
    #: The preemptions, one by one.
    server_losses: tuple[ServerLoss, ...] = ()

    @property
    def ready(self) -> bool:
        """All running with their model state: a replacement holds none until the chief restores it,
        even when the Deployment had the new pod running before any pass saw the old one missing."""
        return self.all_running and not self.replaced


def parameter_servers(job_name: str, replicas: int, pods: Iterable[Obj], recorded: Sequence[str]) -> ParameterServers:
    before = [*recorded[:replicas], *[""] * (replicas - len(recorded))]
    running, template_hash = _running(pods)
    after = list(before)
    all_running, replaced, preemptions, lost = True, False, 0, False
    events: list[EmitEvent] = []
    server_losses: list[ServerLoss] = []
    for index in range(replicas):
        names = sorted(running.get(index, []))
        if before[index] in names:
            continue
        lost = lost or bool(before[index])
        if not names:
            all_running = False
            continue
        after[index] = names[0]
        if not before[index]:
            continue
        replaced = True
        old_hash = _template_hash_in_name(ps_name(job_name, index), before[index])
        new_hash = template_hash.get(names[0], "")
        if old_hash and new_hash and new_hash != old_hash:
            events.append(
                EmitEvent(
                    "Normal",
                    "ParameterServerReplaced",
                    f"parameter server {index} is now {names[0]} (was {before[index]}) after a spec "
                    "change: the chief restores the latest checkpoint",
                )
            )
            continue
        preemptions += 1
        server_losses.append(ServerLoss(index, before[index], names[0]))
        events.append(
            EmitEvent(
                "Warning",
                "ParameterServerReplaced",
                f"parameter server {index} is now {names[0]} (was {before[index]}): model state lost, "
                "the chief restores the latest checkpoint",
            )
        )
    return ParameterServers(tuple(after), all_running, replaced, preemptions, tuple(events), lost, tuple(server_losses))


def _running(pods: Iterable[Obj]) -> tuple[dict[int, list[str]], dict[str, str]]:
    """Running PS pod names by index, and each one's pod-template-hash."""
    running: dict[int, list[str]] = {}
    template_hash: dict[str, str] = {}
    for pod in pods:
        labels = labels_of(pod)
        if not has_role(pod, Role.PS) or meta(pod).get("deletionTimestamp") or phase_of(pod) != "Running":
            continue
        try:
            index = int(labels.get(LABEL_PS_INDEX, ""))
        except ValueError:
            continue
        running.setdefault(index, []).append(name_of(pod))
        template_hash[name_of(pod)] = labels.get(LABEL_POD_TEMPLATE_HASH, "")
    return running, template_hash


def _template_hash_in_name(deployment: str, pod_name: str) -> str:
    """Deployment pods are named <deployment>-<pod-template-hash>-<suffix>; another hash means a rollout
    of a changed template (a spec change), which is no preemption."""
    prefix = f"{deployment}-"
    rest = pod_name[len(prefix) :].split("-") if pod_name.startswith(prefix) else []
    return rest[0] if len(rest) == 2 else ""
