"""Label selectors (``=``, ``!=``, ``in``, ``notin``, exists, ``!`` not-exists) and field selectors."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .errors import bad_request

Matcher = Callable[[dict[str, Any]], bool]

_SET_RE = re.compile(r"^\s*([^\s!=<>]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_CMP_RE = re.compile(r"^\s*([^\s!=<>]+)\s*(==|=|!=|<|>)\s*([^\s]*)\s*$")
_KEY_RE = re.compile(r"^\s*(!?)\s*([^\s!=<>(),]+)\s*$")


def _split_requirements(selector: str) -> list[str]:
    """Split on commas that are not inside ``( … )``."""
    parts: list[str] = []
    depth = 0
    current = ""
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p for p in parts if p.strip()]


def _label_requirement(text: str) -> Callable[[dict[str, str]], bool]:
    if m := _SET_RE.match(text):
        key, op, raw = m.group(1), m.group(2), m.group(3)
        values = {v.strip() for v in raw.split(",") if v.strip()}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := _CMP_RE.match(text):
        key, op, value = m.group(1), m.group(2), m.group(3)
        if op in ("=", "=="):
            return lambda labels: labels.get(key) == value
        if op == "!=":
            return lambda labels: labels.get(key) != value
        try:
            bound = int(value)
        except ValueError:
            raise bad_request(
                f"unable to parse requirement: {text!r}: for 'Gt', 'Lt' operators, the value must be an integer"
            ) from None
        if op == ">":
            return lambda labels: key in labels and labels[key].lstrip("-").isdigit() and int(labels[key]) > bound
        return lambda labels: key in labels and labels[key].lstrip("-").isdigit() and int(labels[key]) < bound
    if m := _KEY_RE.match(text):
        negate, key = m.group(1) == "!", m.group(2)
        if negate:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise bad_request(f"unable to parse requirement: {text!r}")


def parse_label_selector(selector: str | None) -> Matcher | None:
    """A matcher over whole objects, or None when the selector selects everything."""
    if not selector or not selector.strip():
        return None
    requirements = [_label_requirement(part) for part in _split_requirements(selector)]

    def matches(obj: dict[str, Any]) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(req(labels) for req in requirements)

    return matches


def label_selector_to_string(selector: dict[str, Any] | None) -> str:
    """A ``metav1.LabelSelector`` (matchLabels/matchExpressions) as selector text."""
    if not selector:
        return ""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)


def field_value(obj: dict[str, Any], path: str) -> str:
    """The value at a dotted field path, as the string a field selector compares with ("" when absent)."""
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, dict):
            return ""
        node = node.get(part)
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


#: A field label kube-apiserver selects on: the path it reads in the served object, and the value when absent.
FieldLabel = tuple[str, str]
_META_LABELS: dict[str, FieldLabel] = {
    "metadata.name": ("metadata.name", ""),
    "metadata.namespace": ("metadata.namespace", ""),
}
_INVOLVED = ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
#: Per (group, kind) that registers a field-label conversion in kube 1.25, the labels besides
#: metadata.name/namespace. Every other built-in kind selects on those two only.
FIELD_LABELS: dict[tuple[str, str], dict[str, FieldLabel]] = {
    ("", "Pod"): {
        label: (label, default)
        for label, default in (
            ("spec.nodeName", ""),
            ("spec.restartPolicy", ""),
            ("spec.schedulerName", ""),
            ("spec.serviceAccountName", ""),
            ("spec.hostNetwork", "false"),
            ("status.phase", ""),
            ("status.podIP", ""),
            ("status.nominatedNodeName", ""),
        )
    },
    ("", "Node"): {"spec.unschedulable": ("spec.unschedulable", "false")},
    ("", "Namespace"): {"status.phase": ("status.phase", "")},
    ("", "Secret"): {"type": ("type", "")},
    ("", "Event"): {
        **{f"involvedObject.{f}": (f"involvedObject.{f}", "") for f in _INVOLVED},
        "reason": ("reason", ""),
        "reportingComponent": ("reportingComponent", ""),
        "source": ("source.component", ""),
        "type": ("type", ""),
    },
    ("events.k8s.io", "Event"): {
        **{f"regarding.{f}": (f"regarding.{f}", "") for f in _INVOLVED},
        "reason": ("reason", ""),
        "reportingController": ("reportingController", ""),
        "source": ("deprecatedSource.component", ""),
        "type": ("type", ""),
    },
}


def _unsupported_label(label: str, group: str, kind: str, custom: bool) -> str:
    """kube's words for a label it does not select on: a kind with a conversion of its own (and every custom
    resource) says so briefly; every other kind falls back to apimachinery's default conversion."""
    if custom or (group, kind) in FIELD_LABELS:
        return f"field label not supported: {label}"
    return f'"{label}" is not a known field selector: only "metadata.name", "metadata.namespace"'


def parse_field_selector(
    selector: str | None, group: str = "", kind: str = "", *, custom: bool = False, namespaced: bool = True
) -> Matcher | None:
    """Field selectors on the labels kube-apiserver supports for the kind; 400 for any other, as kube answers
    (a cluster-scoped custom resource does not select on metadata.namespace)."""
    if not selector or not selector.strip():
        return None
    supported = {**_META_LABELS, **FIELD_LABELS.get((group, kind), {})}
    if custom and not namespaced:
        del supported["metadata.namespace"]
    requirements: list[tuple[FieldLabel, bool, str]] = []
    for part in _split_requirements(selector):
        m = re.match(r"^\s*([A-Za-z0-9_.\-/]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not m:
            raise bad_request(f"invalid field selector: {part!r}")
        label = supported.get(m.group(1))
        if label is None:
            raise bad_request(_unsupported_label(m.group(1), group, kind, custom))
        requirements.append((label, m.group(2) != "!=", m.group(3)))

    def matches(obj: dict[str, Any]) -> bool:
        return all(
            ((field_value(obj, path) or default) == value) == equal for (path, default), equal, value in requirements
        )

    return matches
