"""Which parameter server pods hold the model state (``status.parameterServerPods``).

A running PS pod other than the one recorded for its index holds no model state: the chief must restore
the latest checkpoint. That is a preemption, unless the Deployment rolled out a changed template.

A PS pod the API still shows Running on a node that is gone or NotReady past the node grace is judged as
a worker would be (:func:`~ttj.planner.classify.classify_pod`): lost. It does not count as running, and it
is deleted without grace, so that its Deployment replaces it now rather than after taint eviction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ttj.planner.actions import DeleteChild, EmitEvent, Refusal, Write
from ttj.planner.classify import PodState, classify_pod
from ttj.planner.lost import ServerLoss
from ttj.planner.observed import Obj, condition, has_role, labels_of, meta, name_of, node_name_of, phase_of
from ttj_contract import LABEL_POD_TEMPLATE_HASH, LABEL_PS_INDEX, Role, parse_time, ps_name


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
    #: Forced deletes of PS pods on lost nodes.
    writes: tuple[Write, ...] = ()
    #: When a PS pod's NotReady node runs out of grace.
    wake: tuple[datetime, ...] = field(default=())

    @property
    def ready(self) -> bool:
        """All running with their model state: a replacement holds none until the chief restores it,
        even when the Deployment had the new pod running before any pass saw the old one missing."""
        return self.all_running and not self.replaced


def parameter_servers(
    job_name: str,
    replicas: int,
    pods: Iterable[Obj],
    recorded: Sequence[str],
    *,
    nodes: Mapping[str, Obj] | None = None,
    now: datetime | None = None,
    node_grace: timedelta = timedelta(seconds=30),
) -> ParameterServers:
    """``nodes`` (with ``now``): the nodes under the PS pods, to tell a PS on a lost node from a running one."""
    pods = [p for p in pods if has_role(p, Role.PS)]
    on_lost_nodes = _on_lost_nodes(pods, nodes, now, node_grace) if nodes is not None and now is not None else {}
    before = [*recorded[:replicas], *[""] * (replicas - len(recorded))]
    running, template_hash = _running(p for p in pods if name_of(p) not in on_lost_nodes)
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
        events.append(_model_state_lost(server_losses[-1]))
    writes, lost_events = _delete_lost(pods, on_lost_nodes)
    wake = [w for w in _grace_ends(pods, nodes, node_grace) if w > now] if nodes is not None and now is not None else []
    return ParameterServers(
        tuple(after),
        all_running,
        replaced,
        preemptions,
        (*events, *lost_events),
        lost,
        tuple(server_losses),
        writes,
        tuple(wake),
    )


def _model_state_lost(loss: ServerLoss) -> EmitEvent:
    return EmitEvent(
        "Warning",
        "ParameterServerReplaced",
        f"parameter server {loss.index} is now {loss.new} (was {loss.old}): model state lost, "
        "the chief restores the latest checkpoint",
    )


def _delete_lost(pods: Sequence[Obj], on_lost_nodes: Mapping[str, str]) -> tuple[tuple[Write, ...], list[EmitEvent]]:
    """PS pods on lost nodes deleted without grace (once), so that their Deployments replace them now."""
    writes: list[Write] = []
    events: list[EmitEvent] = []
    for name, message in sorted(on_lost_nodes.items()):
        pod = next(p for p in pods if name_of(p) == name)
        if meta(pod).get("deletionGracePeriodSeconds") != 0:
            writes.append(DeleteChild("Pod", name, force=True, reason="LostParameterServer"))
            events.append(EmitEvent("Warning", "ParameterServerLost", f"parameter server pod {name} lost: {message}"))
    return tuple(writes), events


def _on_lost_nodes(pods: Iterable[Obj], nodes: Mapping[str, Obj], now: datetime, grace: timedelta) -> dict[str, str]:
    """PS pods shown Running whose node is gone or NotReady past the grace, with why."""
    lost = {}
    for pod in pods:
        if phase_of(pod) != "Running" or (
            meta(pod).get("deletionTimestamp") and meta(pod).get("deletionGracePeriodSeconds") == 0
        ):
            continue
        verdict = classify_pod(pod, dict(nodes), now, grace)
        if verdict.state == PodState.PREEMPTED and verdict.force_delete:
            lost[name_of(pod)] = verdict.message
    return lost


def _grace_ends(pods: Iterable[Obj], nodes: Mapping[str, Obj], grace: timedelta) -> list[datetime]:
    moments = []
    for pod in pods:
        node = nodes.get(node_name_of(pod) or "")
        ready = condition(node, "Ready") if node is not None else None
        since = parse_time((ready or {}).get("lastTransitionTime"))
        if ready is not None and ready.get("status") != "True" and since is not None:
            moments.append(since + grace)
    return moments


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


def refused_creates(job_name: str, replicas: int, children: Mapping[tuple[str, str], Obj]) -> tuple[Refusal, ...]:
    """The PS pods the API refused to their Deployments (a ResourceQuota, Pod Security admission): the
    Deployment says so in its ``ReplicaFailure`` condition, as its ReplicaSet controller found it."""
    refused = []
    for index in range(replicas):
        name = ps_name(job_name, index)
        failure = condition(children.get(("Deployment", name)) or {}, "ReplicaFailure")
        if failure is not None and failure.get("status") == "True":
            why = str(failure.get("message") or failure.get("reason"))
            # status 0: the condition keeps the API's message, not its HTTP code
            refused.append(Refusal("Pod", f"for Deployment {name}", "create", 0, why))
    return tuple(refused)
