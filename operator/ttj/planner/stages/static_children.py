"""The children a running job always has: its Service, its NetworkPolicy, the trainers' RBAC and the PS
Deployments."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ttj.api.models import JobRef, TransientTrainingJobSpec
from ttj.planner import children
from ttj.planner.actions import CreateChild, DeleteChild, EmitEvent, ReplaceChild, Write
from ttj.planner.observed import Obj, annotations_of, name_of, uid_of
from ttj_contract import ANNOTATION_PS_TEMPLATE, ps_name


@dataclass(frozen=True)
class StaticChildren:
    writes: tuple[Write, ...]
    events: tuple[EmitEvent, ...]


def static_children(
    job: JobRef, spec: TransientTrainingJobSpec, observed: Mapping[tuple[str, str], Obj], *, ps_replicas: int = 1
) -> StaticChildren:
    """Create the missing ones, bring changed PS Deployments up to the spec, delete PS Deployments past
    ``parameterServers.replicas``. ``ps_replicas``: each PS Deployment's replicas (0 while suspended)."""
    writes: list[Write] = []
    for manifest in [children.headless_service(job), children.network_policy(job), *children.trainer_rbac(job, spec)]:
        key = (manifest["kind"], name_of(manifest))
        if key not in observed:
            writes.append(CreateChild(manifest))
        elif key[0] == "RoleBinding" and observed[key].get("subjects") != manifest.get("subjects"):
            # workers.template.spec.serviceAccountName changed: that account needs the Lease too.
            writes.append(ReplaceChild(manifest))
    servers = _parameter_servers(job, spec, observed, ps_replicas)
    return StaticChildren((*writes, *servers.writes), servers.events)


def _parameter_servers(
    job: JobRef, spec: TransientTrainingJobSpec, observed: Mapping[tuple[str, str], Obj], ps_replicas: int
) -> StaticChildren:
    """The PS Deployments, compared by the fingerprint of their template and their replicas: a Deployment is
    built only to be created or replaced."""
    job_name = job.name
    fingerprint = children.ps_template_fingerprint(spec)
    writes: list[Write] = []
    events: list[EmitEvent] = []
    wanted = [("Deployment", ps_name(job_name, i)) for i in range(spec.parameter_servers.replicas)]
    for index, key in enumerate(wanted):
        current = observed.get(key)
        if current is None:
            writes.append(CreateChild(children.ps_deployment(job, spec, index, replicas=ps_replicas)))
        elif _ps_template(current) != fingerprint:
            # A spec change (image, parameterServers.resources or .template) reaches the PS through its template: the
            # Deployment controller recreates the pod, which the parameter-server stage sees as a PS loss.
            writes.append(ReplaceChild(children.ps_deployment(job, spec, index, replicas=ps_replicas)))
            events.append(
                EmitEvent(
                    "Normal",
                    "ParameterServerUpdated",
                    f"{key[1]}: the spec changed its image, resources or pod template; the parameter server restarts "
                    "and the chief restores the latest checkpoint",
                )
            )
        elif _replicas(current) != ps_replicas:
            # spec.suspend: 0 once the workers are gone, 1 again on resume
            writes.append(ReplaceChild(children.ps_deployment(job, spec, index, replicas=ps_replicas)))
    for kind, name in sorted(observed):
        if kind == "Deployment" and (kind, name) not in wanted:
            writes.append(
                DeleteChild(kind, name, reason="ParameterServersScaledDown", uid=uid_of(observed[(kind, name)]))
            )
    return StaticChildren(tuple(writes), tuple(events))


def _ps_template(deployment: Obj) -> str | None:
    return annotations_of(deployment).get(ANNOTATION_PS_TEMPLATE)


def _replicas(deployment: Obj) -> int:
    replicas = (deployment.get("spec") or {}).get("replicas")
    return 1 if replicas is None else int(replicas)
