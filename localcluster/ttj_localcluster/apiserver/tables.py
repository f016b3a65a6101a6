"""Server-side printing (``Accept: application/json;as=Table;g=meta.k8s.io;v=v1``), what ``kubectl get`` shows:
kube's columns for the common built-in kinds, a CRD's additionalPrinterColumns for custom resources."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from . import events
from .resources import ResourceType

Column = tuple[str, str, str, int, Callable[[dict[str, Any]], Any]]  # name, type, format, priority, value


def human_duration(seconds: float) -> str:
    """kube's HumanDuration, as in the AGE column."""
    s = int(max(seconds, 0))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    if d < 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    if d < 365 * 2:
        return f"{d}d"
    return f"{d // 365}y"


def _age(timestamp: Any) -> str:
    if not isinstance(timestamp, str):
        return "<unknown>"
    try:
        moment = datetime.strptime(timestamp[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return "<invalid>"
    return human_duration((datetime.now(UTC) - moment).total_seconds())


def _meta_age(obj: dict[str, Any]) -> str:
    return _age(obj["metadata"].get("creationTimestamp"))


#: A step of a CRD printer column's jsonPath: a field, a list index, or a filter of a list by one field's value
#: (``[?(@.type=="Ready")]``, as CRDs use for their conditions).
_PATH_STEP = re.compile(r'\[\?\(@\.([\w.]+)\s*==\s*"([^"]*)"\)\]|\[(\d+)\]|([^.\[\]]+)')


def _path(obj: Any, path: str) -> Any:
    """A CRD jsonPath such as ``.status.phase``, ``.spec.items[0].name`` or
    ``.status.conditions[?(@.type=="Running")].reason`` (the first match of a filter, as a one-value column shows)."""
    for key, value, index, name in _PATH_STEP.findall(path):
        if key:
            items = obj if isinstance(obj, list) else []
            obj = next((item for item in items if _path(item, "." + key) == value), None)
        elif index:
            obj = obj[int(index)] if isinstance(obj, list) and int(index) < len(obj) else None
        else:
            obj = obj.get(name) if isinstance(obj, dict) else None
        if obj is None:
            return None
    return obj


def _pod_ready(pod: dict[str, Any]) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    return f"{sum(1 for s in statuses if s.get('ready'))}/{total}"


def _pod_status(pod: dict[str, Any]) -> str:
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            return str(waiting["reason"])
        terminated = (cs.get("state") or {}).get("terminated")
        if terminated and terminated.get("reason"):
            return str(terminated["reason"])
    return str(status.get("reason") or status.get("phase") or "Unknown")


def _restarts(pod: dict[str, Any]) -> int:
    return sum(int(s.get("restartCount", 0)) for s in (pod.get("status") or {}).get("containerStatuses") or [])


def _node_status(node: dict[str, Any]) -> str:
    ready = next((c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None)
    text = "Ready" if ready and ready.get("status") == "True" else "NotReady"
    if (node.get("spec") or {}).get("unschedulable"):
        text += ",SchedulingDisabled"
    return text


def _get(path: str) -> Callable[[dict[str, Any]], Any]:
    return lambda obj: _path(obj, path)


_NAME: Column = ("Name", "string", "name", 0, lambda o: o["metadata"]["name"])
_AGE: Column = ("Age", "string", "", 0, _meta_age)

BUILTIN_COLUMNS: dict[tuple[str, str], list[Column]] = {
    ("", "pods"): [
        _NAME,
        ("Ready", "string", "", 0, _pod_ready),
        ("Status", "string", "", 0, _pod_status),
        ("Restarts", "string", "", 0, lambda o: str(_restarts(o))),
        _AGE,
        ("IP", "string", "", 1, lambda o: (o.get("status") or {}).get("podIP") or "<none>"),
        ("Node", "string", "", 1, lambda o: (o.get("spec") or {}).get("nodeName") or "<none>"),
    ],
    ("", "namespaces"): [_NAME, ("Status", "string", "", 0, _get(".status.phase")), _AGE],
    ("", "nodes"): [
        _NAME,
        ("Status", "string", "", 0, _node_status),
        ("Roles", "string", "", 0, lambda o: "<none>"),
        _AGE,
        ("Version", "string", "", 0, lambda o: _path(o, ".status.nodeInfo.kubeletVersion") or ""),
    ],
    ("", "services"): [
        _NAME,
        ("Type", "string", "", 0, _get(".spec.type")),
        ("Cluster-IP", "string", "", 0, _get(".spec.clusterIP")),
        ("External-IP", "string", "", 0, lambda o: "<none>"),
        (
            "Port(s)",
            "string",
            "",
            0,
            lambda o: (
                ",".join(
                    f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in (o.get("spec") or {}).get("ports") or []
                )
                or "<none>"
            ),
        ),
        _AGE,
    ],
    ("", "configmaps"): [
        _NAME,
        ("Data", "integer", "", 0, lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {})),
        _AGE,
    ],
    ("", "events"): [
        (
            "Last Seen",
            "string",
            "",
            0,
            lambda o: _age(events.last_seen(o)),
        ),
        ("Type", "string", "", 0, _get(".type")),
        ("Reason", "string", "", 0, _get(".reason")),
        (
            "Object",
            "string",
            "",
            0,
            lambda o: (
                f"{(events.involved_object(o).get('kind') or '').lower()}/{events.involved_object(o).get('name') or ''}"
            ),
        ),
        # the same Events through core/v1 (message) or events.k8s.io/v1 (note)
        ("Message", "string", "", 0, lambda o: o.get("message", o.get("note"))),
    ],
    ("apps", "deployments"): [
        _NAME,
        (
            "Ready",
            "string",
            "",
            0,
            lambda o: f"{_path(o, '.status.readyReplicas') or 0}/{_path(o, '.spec.replicas') or 0}",
        ),
        ("Up-to-date", "integer", "", 0, lambda o: _path(o, ".status.updatedReplicas") or 0),
        ("Available", "integer", "", 0, lambda o: _path(o, ".status.availableReplicas") or 0),
        _AGE,
    ],
    ("apps", "replicasets"): [
        _NAME,
        ("Desired", "integer", "", 0, lambda o: _path(o, ".spec.replicas") or 0),
        ("Current", "integer", "", 0, lambda o: _path(o, ".status.replicas") or 0),
        ("Ready", "integer", "", 0, lambda o: _path(o, ".status.readyReplicas") or 0),
        _AGE,
    ],
    ("coordination.k8s.io", "leases"): [_NAME, ("Holder", "string", "", 0, _get(".spec.holderIdentity")), _AGE],
    ("apiextensions.k8s.io", "customresourcedefinitions"): [
        _NAME,
        ("Created At", "date", "", 0, lambda o: o["metadata"].get("creationTimestamp")),
    ],
}


def _crd_columns(rtype: ResourceType) -> list[Column]:
    if not rtype.printer_columns:
        return [_NAME, _AGE]
    columns: list[Column] = [_NAME]
    for column in rtype.printer_columns:
        ctype = column.get("type", "string")
        path = column.get("jsonPath", "")

        def value(obj: dict[str, Any], path: str = path, ctype: str = ctype) -> Any:
            found = _path(obj, path)
            if ctype == "date":
                return _age(found) if found is not None else None
            return found

        columns.append(
            (
                column["name"],
                "string" if ctype == "date" else ctype,
                column.get("format", ""),
                int(column.get("priority", 0)),
                value,
            )
        )
    return columns


def columns_for(rtype: ResourceType) -> list[Column]:
    if rtype.is_custom:
        return _crd_columns(rtype)
    return BUILTIN_COLUMNS.get(rtype.storage_key, [_NAME, _AGE])


def partial_metadata(obj: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}


def table(
    rtype: ResourceType,
    objects: list[dict[str, Any]],
    resource_version: str,
    include_object: str = "Metadata",
    *,
    with_columns: bool = True,
) -> dict[str, Any]:
    columns = columns_for(rtype)
    rows = []
    for obj in objects:
        if include_object == "None":
            embedded: dict[str, Any] | None = None
        elif include_object == "Object":
            embedded = obj
        else:
            embedded = partial_metadata(obj)
        row: dict[str, Any] = {"cells": [c[4](obj) for c in columns]}
        if embedded is not None:
            row["object"] = embedded
        rows.append(row)
    result: dict[str, Any] = {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "rows": rows,
    }
    if with_columns:
        result["columnDefinitions"] = [
            {"name": name, "type": ctype, "format": fmt, "description": name, "priority": priority}
            for name, ctype, fmt, priority, _ in columns
        ]
    return result
