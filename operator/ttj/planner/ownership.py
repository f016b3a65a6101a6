"""Whether a job's names and pod templates leave ttj what it owns: names that carry the derived child names,
and templates that add to ttj's pods without overriding its labels, env, volumes, mounts or placement."""

from __future__ import annotations

import functools
import json
import re

from ttj.api.models import JobRef, TransientTrainingJobSpec
from ttj.api.podtemplate import PodTemplate
from ttj.planner.children import SCRATCH_VOLUMES, bare_worker_pod, ps_deployment
from ttj.planner.observed import Obj, meta
from ttj.planner.template_merge import worker_template
from ttj_contract import ACCELERATOR_LABEL, GROUP, PREEMPTIBLE_LABEL, SPOT_LABEL, ps_name, worker_hostname

#: Node labels that place ttj's pods (spot, preemptible, GPU type): a template may not set them.
PLACEMENT_LABELS = (SPOT_LABEL, PREEMPTIBLE_LABEL, ACCELERATOR_LABEL)
DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
#: Jobs whose ownership answer is kept (one entry per job name, namespace and spec): more than an operator
#: plans at once, so that a steady pass never builds pods just to check them.
OWNERSHIP_CACHE_SIZE = 4096


def name_problems(job: str, spec: TransientTrainingJobSpec) -> list[str]:
    """Why a job name cannot carry its derived child names (DNS-1035 labels of at most 63 characters)."""
    problems = []
    if not DNS_1035_LABEL.match(job):
        problems.append(
            f"metadata.name {job!r} must be a DNS-1035 label (lower-case letters, digits and '-', starting "
            "with a letter and ending with a letter or digit): it names the job's Service"
        )
    longest = max(
        [worker_hostname(job, spec.workers.slots - 1), ps_name(job, spec.parameter_servers.replicas - 1)], key=len
    )
    if len(longest) > 63:
        problems.append(
            f"metadata.name {job!r} is too long: the derived hostname {longest!r} has {len(longest)} characters, "
            f"over the limit of 63; shorten the name by {len(longest) - 63}"
        )
    return problems


def ownership_problems(job: Obj, spec: TransientTrainingJobSpec) -> list[str]:
    """Why the roles' pod templates would override what ttj owns: each role's template (the workers' with
    ``workers.nodeSelector`` and ``tolerations`` in it) is compared with the pod ttj makes without it.

    The answer depends on the job's name, namespace and spec alone, so it is computed once for each of them
    (passes of an unchanged job build no pods to check)."""
    metadata = meta(job)
    name, namespace = str(metadata.get("name", "")), str(metadata.get("namespace") or "")
    try:
        spec_json = json.dumps(job.get("spec") or {}, sort_keys=True, separators=(",", ":"))
    except TypeError:  # a spec given as Python objects JSON cannot hold: no key, so no cache
        return _ownership_problems(name, namespace, spec)
    return list(_cached_ownership_problems(name, namespace, spec_json))


@functools.lru_cache(maxsize=OWNERSHIP_CACHE_SIZE)
def _cached_ownership_problems(name: str, namespace: str, spec_json: str) -> tuple[str, ...]:
    spec = TransientTrainingJobSpec.model_validate(json.loads(spec_json))
    return tuple(_ownership_problems(name, namespace, spec))


def _ownership_problems(name: str, namespace: str, spec: TransientTrainingJobSpec) -> list[str]:
    job = JobRef(name, namespace or None)
    problems = []
    # With every variable ttj sets on some worker: a group with its own batch size adds the job's.
    own_batch = any(group.batch_size is not None for group in spec.workers.groups or [])
    bare_worker = bare_worker_pod(job, spec, 0, 1, job_batch_size=spec.batch_size if own_batch else None)
    paths = [m["mountPath"].rstrip("/") or "/" for m in bare_worker["spec"]["containers"][0].get("volumeMounts") or []]
    if len(set(paths)) != len(paths):
        problems.append(
            f"checkpoint.uri {spec.checkpoint.uri!r} (with volumeClaimName) is a directory ttj mounts itself: "
            f"{', '.join(sorted(SCRATCH_VOLUMES.values()))}"
        )
    bare_ps = ps_deployment(job, spec, 0, with_template=False)
    roles = [
        (
            "workers",
            worker_template(spec.workers),
            bare_worker,
            "workers.template: spec.nodeSelector (with workers.nodeSelector)",
        ),
        (
            "parameterServers",
            spec.parameter_servers.template,
            {**bare_ps["spec"]["template"], "kind": "Pod"},
            "parameterServers.template: spec.nodeSelector",
        ),
    ]
    for role, template, bare, selector in roles:
        if template is not None:
            problems += _template_overrides(template, bare, role=role, selector=selector)
    return problems


def _template_overrides(template: PodTemplate, bare: Obj, *, role: str, selector: str) -> list[str]:
    """What ``template`` overrides of ``bare``; ``selector`` names the field its nodeSelector comes from."""
    problems = []
    metadata = template.metadata
    for field, added in (
        ("labels", metadata.labels if metadata else None),
        ("annotations", metadata.annotations if metadata else None),
    ):
        owned = set(bare["metadata"].get(field) or {})
        for key in sorted(added or {}):
            if key in owned or _in_ttj_domain(key):
                problems.append(f"metadata.{field} may not set {key}: ttj's own")
    pod_spec = template.spec
    if pod_spec is None:
        return [f"{role}.template: {p}" for p in problems]
    container = template.container
    bare_container = bare["spec"]["containers"][0]
    owned_env = {e["name"] for e in bare_container.get("env") or []}
    problems += [
        f"spec.containers[0].env may not set {e.name}: ttj sets it" for e in container.env or [] if e.name in owned_env
    ]
    owned_volumes = {v["name"] for v in bare["spec"].get("volumes") or []}
    problems += [
        f"spec.volumes may not name a volume {v.name}: ttj's own"
        for v in pod_spec.volumes or []
        if v.name in owned_volumes
    ]
    owned_paths = {m["mountPath"].rstrip("/") for m in bare_container.get("volumeMounts") or []}
    problems += [
        f"spec.containers[0].volumeMounts may not mount at {m.mount_path}: ttj mounts its own volume there"
        for m in container.volume_mounts or []
        if m.mount_path.rstrip("/") in owned_paths
    ]
    placement = set(PLACEMENT_LABELS) | set(bare["spec"].get("nodeSelector") or {})
    placed = [
        f"{selector} may not set {key}: ttj places the pods by provisioning and acceleratorType"
        for key in sorted(set(pod_spec.node_selector or {}) & placement)
    ]
    node_affinity = pod_spec.affinity.node_affinity if pod_spec.affinity else None
    if node_affinity is not None:
        required = node_affinity.required_during_scheduling_ignored_during_execution
        terms = [*(required.node_selector_terms if required else [])]
        terms += [p.preference for p in node_affinity.preferred_during_scheduling_ignored_during_execution or []]
        keys = {e.key for term in terms for e in term.match_expressions}
        problems += [
            f"spec.affinity.nodeAffinity may not use {key}: ttj places the pods by provisioning and acceleratorType"
            for key in sorted(keys & placement)
        ]
    return [*placed, *(f"{role}.template: {p}" for p in problems)]


def _in_ttj_domain(key: str) -> bool:
    prefix = key.split("/", 1)[0] if "/" in key else ""
    return prefix == GROUP or prefix.endswith(f".{GROUP}")
