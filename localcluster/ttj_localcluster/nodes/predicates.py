"""Scheduler predicates as pure functions over Kubernetes objects in their JSON form (dicts).

What kube-scheduler's default filter plugins check, for the fields the project uses: NodeUnschedulable,
NodeName, NodeAffinity (nodeSelector and required node affinity: In/NotIn/Exists/DoesNotExist/Gt/Lt),
TaintToleration (NoSchedule and NoExecute taints), NodeResourcesFit (cpu, memory, pods and extended
resources such as nvidia.com/gpu against allocatable minus the requests of pods bound to the node).
The failure message is built the way kube-scheduler builds it:
``0/3 nodes are available: 3 Insufficient nvidia.com/gpu.``
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from typing import Any

from ttj_contract.quantity import parse_quantity

JSON = dict[str, Any]


def _container_requests(container: Mapping[str, Any]) -> dict[str, Decimal]:
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    # A resource with only a limit requests that limit (the API server defaults it so).
    merged = {**limits, **requests}
    return {name: parse_quantity(q) for name, q in merged.items()}


def _add(into: dict[str, Decimal], more: Mapping[str, Decimal]) -> None:
    for name, quantity in more.items():
        into[name] = into.get(name, Decimal(0)) + quantity


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    """Effective requests: max(sum of containers, largest init container) + overhead, as the scheduler counts."""
    spec = pod.get("spec") or {}
    result: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        _add(result, _container_requests(container))
    for init in spec.get("initContainers") or []:
        for name, quantity in _container_requests(init).items():
            result[name] = max(result.get(name, Decimal(0)), quantity)
    for name, quantity in (spec.get("overhead") or {}).items():
        result[name] = result.get(name, Decimal(0)) + parse_quantity(quantity)
    return result


def pod_is_terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _node_labels(node: Mapping[str, Any]) -> Mapping[str, str]:
    return (node.get("metadata") or {}).get("labels") or {}


def _match_expression(labels: Mapping[str, str], expression: Mapping[str, Any]) -> bool:
    key = expression.get("key", "")
    operator = expression.get("operator", "")
    values = [str(v) for v in expression.get("values") or []]
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if operator == "Gt" else have < want
    raise ValueError(f"unknown node selector operator {operator!r}")


def _match_node_fields(node: Mapping[str, Any], expression: Mapping[str, Any]) -> bool:
    # matchFields supports only metadata.name.
    fields = {"metadata.name": (node.get("metadata") or {}).get("name", "")}
    return _match_expression(fields, expression)


def node_matches_selector_and_affinity(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    labels = _node_labels(node)
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not required:
        return True
    terms = required.get("nodeSelectorTerms") or []
    # Terms are ORed; expressions within a term are ANDed; an empty term matches nothing.
    for term in terms:
        expressions = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        if not expressions and not fields:
            continue
        if all(_match_expression(labels, e) for e in expressions) and all(_match_node_fields(node, f) for f in fields):
            return True
    return False


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"  # an empty key with Exists tolerates everything
    if key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return str(toleration.get("value") or "") == str(taint.get("value") or "")


def untolerated_taint(pod: Mapping[str, Any], node: Mapping[str, Any]) -> JSON | None:
    """The first NoSchedule/NoExecute taint of the node that the pod does not tolerate, if any."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            return dict(taint)
    return None


def node_allocatable(node: Mapping[str, Any]) -> dict[str, Decimal]:
    status = node.get("status") or {}
    source = status.get("allocatable") or status.get("capacity") or {}
    return {name: parse_quantity(q) for name, q in source.items()}


def to_milli(quantities: Mapping[str, Decimal]) -> dict[str, int]:
    """Quantities as whole thousandths, rounded up (kube's MilliValue): the scheduler's arithmetic is on ints."""
    return {
        name: int((quantity * 1000).to_integral_value(rounding=ROUND_CEILING)) for name, quantity in quantities.items()
    }


@dataclass
class NodeUsage:
    """What the pods placed on a node take of it: their summed requests (thousandths) and their number."""

    requests: dict[str, int] = field(default_factory=dict)
    pods: int = 0

    def add(self, requests: Mapping[str, int]) -> None:
        for name, quantity in requests.items():
            self.requests[name] = self.requests.get(name, 0) + quantity
        self.pods += 1

    def remove(self, requests: Mapping[str, int]) -> None:
        for name, quantity in requests.items():
            self.requests[name] = self.requests.get(name, 0) - quantity
        self.pods -= 1


def usage_of(pods_on_node: Iterable[Mapping[str, Any]]) -> NodeUsage:
    usage = NodeUsage()
    for other in pods_on_node:
        if not pod_is_terminal(other):
            usage.add(to_milli(pod_requests(other)))
    return usage


def missing_resources(requests: Mapping[str, int], allocatable: Mapping[str, int], usage: NodeUsage) -> list[str]:
    """Resource names a node with ``allocatable`` and ``usage`` lacks for a pod requesting ``requests``
    (all in thousandths)."""
    missing: list[str] = []
    if "pods" in allocatable and (usage.pods + 1) * 1000 > allocatable["pods"]:
        missing.append("pods")
    used = usage.requests
    for name, quantity in sorted(requests.items()):
        if quantity > 0 and allocatable.get(name, 0) - used.get(name, 0) < quantity:
            missing.append(name)
    return missing


def filter_node(
    pod: Mapping[str, Any], node: Mapping[str, Any], pods_on_node: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Why the pod cannot go on the node, as kube-scheduler words it (empty: it can)."""
    return static_failures(pod, node) or resource_failures(
        to_milli(pod_requests(pod)), to_milli(node_allocatable(node)), usage_of(pods_on_node)
    )


def static_failures(pod: Mapping[str, Any], node: Mapping[str, Any]) -> list[str]:
    """The filters that look at the pod's placement fields and the node alone (not at what the node holds):
    unschedulable, nodeName, node affinity/selector, taints. Pods with the same placement fields get the
    same answer from the same node version."""
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        tolerated = untolerated_taint(
            pod, {"spec": {"taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]}}
        )
        if tolerated is not None:
            return ["node(s) were unschedulable"]
    wanted_name = (pod.get("spec") or {}).get("nodeName")
    if wanted_name and wanted_name != (node.get("metadata") or {}).get("name"):
        return ["node(s) didn't match the requested node name"]
    if not node_matches_selector_and_affinity(pod, node):
        return ["node(s) didn't match Pod's node affinity/selector"]
    taint = untolerated_taint(pod, node)
    if taint is not None:
        return [f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '')}}}"]
    return []


def placement_fields(pod: Mapping[str, Any]) -> tuple[Any, ...]:
    """What :func:`static_failures` reads of a pod."""
    spec = pod.get("spec") or {}
    return (
        spec.get("nodeName"),
        spec.get("nodeSelector"),
        (spec.get("affinity") or {}).get("nodeAffinity"),
        spec.get("tolerations"),
    )


def resource_failures(requests: Mapping[str, int], allocatable: Mapping[str, int], usage: NodeUsage) -> list[str]:
    """NodeResourcesFit's reasons, as kube-scheduler words them."""
    return [
        f"Insufficient {name}" if name != "pods" else "Too many pods"
        for name in missing_resources(requests, allocatable, usage)
    ]


def unschedulable_message(node_count: int, reasons_per_node: Iterable[Sequence[str]]) -> str:
    """kube-scheduler's FitError message: ``0/3 nodes are available: 3 Insufficient nvidia.com/gpu.``"""
    if node_count == 0:
        return "no nodes available to schedule pods"
    histogram: Counter[str] = Counter()
    for reasons in reasons_per_node:
        histogram.update(reasons)
    parts = sorted(f"{count} {reason}" for reason, count in histogram.items())
    return f"0/{node_count} nodes are available: {', '.join(parts)}."


def score_node(pod: Mapping[str, Any], node: Mapping[str, Any], pods_on_node: Iterable[Mapping[str, Any]]) -> float:
    """Least-allocated score (0..1, higher is emptier), kube-scheduler's default spreading preference."""
    return score_usage(to_milli(pod_requests(pod)), to_milli(node_allocatable(node)), usage_of(pods_on_node))


def score_usage(requests: Mapping[str, int], allocatable: Mapping[str, int], usage: NodeUsage) -> float:
    """:func:`score_node` with the pod's requests, the node's allocatable and its usage known (thousandths)."""
    used = usage.requests
    shares = [
        (allocatable[name] - used.get(name, 0) - requests.get(name, 0)) / allocatable[name]
        for name in ("cpu", "memory")
        if allocatable.get(name, 0) > 0
    ]
    return sum(shares) / len(shares) if shares else 0.0
