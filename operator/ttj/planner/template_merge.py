"""Merging a role's pod template under the pod ttj builds: what the user adds, never what ttj owns.

The workers have two places for placement, ``workers.nodeSelector``/``tolerations`` and the same fields of
``workers.template.spec``: :func:`worker_template` folds them into one template, so that pods are merged
(here) and checked (:mod:`ttj.planner.ownership`) once.
"""

from __future__ import annotations

from ttj.api.models import WorkerSpec
from ttj.api.podtemplate import PodTemplate, RolePodSpec
from ttj.planner.observed import Obj


def worker_template(workers: WorkerSpec) -> PodTemplate | None:
    """``workers.template`` with ``workers.nodeSelector`` and ``tolerations`` in it: the selector's keys over
    the template's, the tolerations before the template's."""
    template = workers.template
    if not workers.node_selector and not workers.tolerations:
        return template
    spec = (template.spec if template is not None else None) or RolePodSpec()
    update: dict[str, object] = {}
    if workers.node_selector:
        update["node_selector"] = {**(spec.node_selector or {}), **workers.node_selector}
    if workers.tolerations:
        update["tolerations"] = [*workers.tolerations, *(spec.tolerations or [])]
    merged: PodTemplate = (template or PodTemplate()).model_copy(update={"spec": spec.model_copy(update=update)})
    return merged


def merged_under(pod: Obj, template: PodTemplate | None) -> Obj:
    """``pod`` (or a Deployment's pod template) with ``template`` merged under what ttj set: ttj's labels,
    env, volumes, mounts and placement stay as they are (:func:`ttj.planner.ownership.ownership_problems`
    refuses templates that would change them); lists are extended, the template's affinity is combined with
    ttj's."""
    if template is None:
        return pod
    extra = template.model_dump(by_alias=True, exclude_none=True)
    metadata, pod_spec = pod["metadata"], pod["spec"]
    for field in ("labels", "annotations"):
        added = (extra.get("metadata") or {}).get(field)
        if added:
            metadata[field] = {**added, **(metadata.get(field) or {})}
    wanted = extra.get("spec") or {}
    for field in ("serviceAccountName", "priorityClassName", "imagePullSecrets"):
        if field in wanted:
            pod_spec[field] = wanted[field]
    if "nodeSelector" in wanted:
        pod_spec["nodeSelector"] = {**wanted["nodeSelector"], **(pod_spec.get("nodeSelector") or {})}
    for field in ("tolerations", "volumes"):
        if field in wanted:
            pod_spec[field] = [*(pod_spec.get(field) or []), *wanted[field]]
    if "affinity" in wanted:
        pod_spec["affinity"] = _combined_affinity(pod_spec.get("affinity") or {}, wanted["affinity"])
    container = pod_spec["containers"][0]
    added_container = (wanted.get("containers") or [{}])[0]
    for field in ("env", "volumeMounts"):
        if field in added_container:
            container[field] = [*(container.get(field) or []), *added_container[field]]
    if "envFrom" in added_container:
        container["envFrom"] = added_container["envFrom"]  # env (ttj's included) wins over envFrom
    return pod


def _combined_affinity(own: Obj, added: Obj) -> Obj:
    """Both must hold: ttj's required node terms are added to each of the template's (terms are ORed, the
    expressions of one term ANDed); preferences and pod (anti-)affinity are the template's."""
    combined = {**added, **{k: v for k, v in own.items() if k != "nodeAffinity"}}
    own_nodes, added_nodes = own.get("nodeAffinity") or {}, added.get("nodeAffinity") or {}
    if not own_nodes and not added_nodes:
        return combined
    required_key = "requiredDuringSchedulingIgnoredDuringExecution"
    own_terms = (own_nodes.get(required_key) or {}).get("nodeSelectorTerms") or []
    added_terms = (added_nodes.get(required_key) or {}).get("nodeSelectorTerms") or []
    nodes: Obj = dict(added_nodes)
    if own_terms and added_terms:
        terms = [
            {"matchExpressions": [*a.get("matchExpressions", []), *o.get("matchExpressions", [])]}
            for a in added_terms
            for o in own_terms
        ]
        nodes[required_key] = {"nodeSelectorTerms": terms}
    elif own_terms:
        nodes[required_key] = {"nodeSelectorTerms": own_terms}
    combined["nodeAffinity"] = nodes
    return combined
