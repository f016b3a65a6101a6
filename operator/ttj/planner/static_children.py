"""The children a running job always has: its Service, its NetworkPolicy, the trainers' RBAC and the PS
Deployments."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ttj.api.models import TransientTrainingJobSpec
from ttj.planner import children
from ttj.planner.actions import CreateChild, DeleteChild, EmitEvent, ReplaceChild, Write
from ttj.planner.observed import Obj, annotations_of, name_of, uid_of
from ttj_contract import ANNOTATION_PS_TEMPLATE


@dataclass(frozen=True)
class StaticChildren:
    writes: tuple[Write, ...]
    events: tuple[EmitEvent, ...]


def static_children(
    job: Obj, spec: TransientTrainingJobSpec, observed: Mapping[tuple[str, str], Obj], *, ps_replicas: int = 1
) -> StaticChildren:
    """Create the missing ones, bring changed PS Deployments up to the spec, delete PS Deployments past
    ``parameterServers.replicas``. ``ps_replicas``: each PS Deployment's replicas (0 while suspended)."""
    wanted = [
        children.headless_service(job),
        children.network_policy(job),
        *children.trainer_rbac(job, spec),
        *(children.ps_deployment(job, spec, i, replicas=ps_replicas) for i in range(spec.parameter_servers.replicas)),
    ]
    writes: list[Write] = []
    events: list[EmitEvent] = []
    for manifest in wanted:
        key = (manifest["kind"], name_of(manifest))
        if key not in observed:
            writes.append(CreateChild(manifest))
        elif key[0] == "Deployment" and _ps_template(observed[key]) != _ps_template(manifest):
            # A spec change (image, parameterServers.resources or .template) reaches the PS through its template: the
            # Deployment controller recreates the pod, which the parameter-server stage sees as a PS loss.
            writes.append(ReplaceChild(manifest))
            events.append(
                EmitEvent(
                    "Normal",
                    "ParameterServerUpdated",
                    f"{key[1]}: the spec changed its image, resources or pod template; the parameter server restarts "
                    "and the chief restores the latest checkpoint",
                )
            )
        elif key[0] == "Deployment" and _replicas(observed[key]) != _replicas(manifest):
            # spec.suspend: 0 once the workers are gone, 1 again on resume
            writes.append(ReplaceChild(manifest))
        elif key[0] == "RoleBinding" and observed[key].get("subjects") != manifest.get("subjects"):
            # workers.template.spec.serviceAccountName changed: that account needs the Lease too.
            writes.append(ReplaceChild(manifest))
    wanted_keys = {(m["kind"], name_of(m)) for m in wanted}
    for kind, name in sorted(observed):
        if kind == "Deployment" and (kind, name) not in wanted_keys:
            writes.append(
                DeleteChild(kind, name, reason="ParameterServersScaledDown", uid=uid_of(observed[(kind, name)]))
            )
    return StaticChildren(tuple(writes), tuple(events))


def _ps_template(deployment: Obj) -> str | None:
    return annotations_of(deployment).get(ANNOTATION_PS_TEMPLATE)


def _replicas(deployment: Obj) -> int:
    replicas = (deployment.get("spec") or {}).get("replicas")
    return 1 if replicas is None else int(replicas)
