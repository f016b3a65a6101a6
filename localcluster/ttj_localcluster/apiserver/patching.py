"""JSON merge patch (RFC 7386), JSON patch (RFC 6902) and the subset of strategic merge patch clients send."""

from __future__ import annotations

import copy
from typing import Any

from .errors import ApiError, bad_request

#: list field → merge key, for strategic merge patch (what kube's Go types declare for these fields)
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "conditions": "type",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
}
#: primitive lists whose strategic patches merge (set union) instead of replacing
MERGED_PRIMITIVE_LISTS = {"finalizers"}


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str]) -> Any:
    node = doc
    for part in parts:
        if isinstance(node, list):
            try:
                node = node[int(part)]
            except (ValueError, IndexError):
                raise _patch_failed(f"index {part} out of range") from None
        elif isinstance(node, dict):
            if part not in node:
                raise _patch_failed(f"path segment {part!r} not found")
            node = node[part]
        else:
            raise _patch_failed(f"cannot descend into {part!r}")
    return node


def _patch_failed(message: str) -> ApiError:
    return ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: {message}")


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _walk(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, list):
        if last == "-":
            parent.append(value)
        else:
            index = int(last)
            if index > len(parent):
                raise _patch_failed(f"index {index} out of range")
            parent.insert(index, value)
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise _patch_failed("cannot add to a scalar")
    return doc


def _remove(doc: Any, parts: list[str]) -> Any:
    parent = _walk(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, list):
        try:
            return parent.pop(int(last))
        except (ValueError, IndexError):
            raise _patch_failed(f"index {last} out of range") from None
    if isinstance(parent, dict):
        if last not in parent:
            raise _patch_failed(f"path {last!r} not found for remove")
        return parent.pop(last)
    raise _patch_failed("cannot remove from a scalar")


def json_patch(target: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise bad_request("a JSON patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise bad_request(f"invalid JSON patch operation {op!r}")
        kind, parts = op["op"], _pointer(op["path"])
        if kind == "add":
            doc = _add(doc, parts, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            _remove(doc, parts)
        elif kind == "replace":
            _walk(doc, parts)  # must exist
            if parts:
                _remove(doc, parts)
            doc = _add(doc, parts, copy.deepcopy(op.get("value")))
        elif kind in ("move", "copy"):
            source = _pointer(op["from"])
            value = _remove(doc, source) if kind == "move" else copy.deepcopy(_walk(doc, source))
            doc = _add(doc, parts, value)
        elif kind == "test":
            if _walk(doc, parts) != op.get("value"):
                raise _patch_failed(f"test operation failed at {op['path']}")
        else:
            raise bad_request(f"unknown JSON patch operation {kind!r}")
    return doc


def _merge_key(field: str, items: list[Any]) -> str | None:
    if field == "ports":
        sample = next((i for i in items if isinstance(i, dict)), {})
        return "containerPort" if "containerPort" in sample else "port"
    return MERGE_KEYS.get(field)


def _strategic_list(field: str, original: Any, patch: list[Any]) -> list[Any]:
    key = _merge_key(field, patch + (original if isinstance(original, list) else []))
    if not isinstance(original, list):
        original = []
    if field in MERGED_PRIMITIVE_LISTS:
        return list(original) + [v for v in patch if v not in original]
    if key is None or not all(isinstance(i, dict) for i in patch):
        return [strategic_merge({}, i) if isinstance(i, dict) else i for i in patch]
    result = [copy.deepcopy(i) for i in original]
    for item in patch:
        directive = item.get("$patch")
        if directive == "replace":
            return [{k: v for k, v in i.items() if k != "$patch"} for i in patch]
        index = next(
            (n for n, old in enumerate(result) if isinstance(old, dict) and old.get(key) == item.get(key)), None
        )
        if directive == "delete":
            if index is not None:
                result.pop(index)
            continue
        if index is None:
            result.append(strategic_merge({}, item))
        else:
            result[index] = strategic_merge(result[index], item)
    return result


def strategic_merge(target: Any, patch: Any) -> Any:
    """Strategic merge: maps merge, keyed lists (containers, env, conditions…) merge by key, ``$patch`` directives."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            current = result.get(field)
            if isinstance(current, list):
                result[field] = [v for v in current if v not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list):
            result[key] = _strategic_list(key, result.get(key), value)
        else:
            result[key] = strategic_merge(result.get(key), value)
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"


def apply_patch(content_type: str, target: dict[str, Any], patch: Any, *, strategic_allowed: bool) -> Any:
    kind = content_type.split(";", maxsplit=1)[0].strip()
    if kind == MERGE:
        return merge_patch(target, patch)
    if kind == JSON_PATCH:
        return json_patch(target, patch)
    if kind == STRATEGIC:
        if not strategic_allowed:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: "
                "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            )
        return strategic_merge(target, patch)
    raise ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format ({kind}) - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json",
    )
