"""JSON merge patch (RFC 7396, the operator's ``ttj.mergepatch``), JSON patch (RFC 6902, the ``jsonpatch`` library)
and the subset of strategic merge patch clients send."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from ttj.mergepatch import apply_merge_patch

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


#: kube-apiserver's answer to any JSON patch operation that does not apply: a generic 422 that keeps nothing of
#: the library's reason (``errors.NewGenericServerResponse`` drops the server message).
_UNPROCESSABLE = "the server rejected our request due to an error in our request"
_OPERATIONS = frozenset({"add", "remove", "replace", "move", "copy", "test"})


def _does_not_apply() -> ApiError:
    return ApiError(422, "Invalid", _UNPROCESSABLE)


def _missing_member(doc: Any, path: Any) -> bool:
    """Whether ``path`` names a member its (existing) parent object does not have."""
    try:
        pointer = jsonpatch.JsonPointer(path)
        parent, key = pointer.to_last(doc)
    except (jsonpatch.JsonPointerException, TypeError, KeyError, IndexError):
        return False
    return isinstance(parent, dict) and key not in parent


def _as_kube_reads(op: dict[str, Any], doc: Any) -> dict[str, Any]:
    """An operation as kube's JSON patch library (evanphx/json-patch v4) applies it, where RFC 6902 differs: a
    missing ``value`` is null; replacing a member the object does not have adds it; copying from a missing
    member copies null. Anything else it cannot apply is a 422."""
    kind = op.get("op")
    if kind not in _OPERATIONS or not isinstance(op.get("path"), str):
        raise _does_not_apply()
    if kind in ("move", "copy") and not isinstance(op.get("from"), str):
        raise _does_not_apply()
    if kind in ("add", "replace", "test") and "value" not in op:
        op = {**op, "value": None}
    if kind == "replace" and _missing_member(doc, op["path"]):
        op = {**op, "op": "add"}
    if kind == "copy" and _missing_member(doc, op["from"]):
        op = {"op": "add", "path": op["path"], "value": None}
    return op


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 as kube-apiserver applies it: a body that is not a list of operation objects is a 400, an
    operation that does not apply to the object a 422, and the whole patch applies or nothing does."""
    if not isinstance(operations, list) or not all(isinstance(op, dict) for op in operations):
        raise bad_request("a JSON patch must be a list of operation objects")
    doc = copy.deepcopy(target)
    for op in operations:
        try:
            doc = jsonpatch.JsonPatch([_as_kube_reads(op, doc)]).apply(doc, in_place=True)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException):
            raise _does_not_apply() from None
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


def apply_patch(content_type: str, target: dict[str, Any], patch: Any, *, strategic_allowed: bool) -> Any:
    kind = content_type.split(";", maxsplit=1)[0].strip()
    if kind == MERGE:
        return apply_merge_patch(target, patch)
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
