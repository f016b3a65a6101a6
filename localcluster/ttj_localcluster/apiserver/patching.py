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


def _does_not_apply(op: dict[str, Any], reason: str) -> ApiError:
    """What kube-apiserver answers when a well-formed JSON patch operation does not apply to the object."""
    source = f' from "{op["from"]}"' if "from" in op else ""
    message = f'the {op["op"]} operation at "{op["path"]}"{source} does not apply: {reason}'
    return ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: {message}")


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902: a malformed patch document is a 400, an operation that does not apply to the object a 422."""
    if not isinstance(operations, list) or not all(isinstance(op, dict) for op in operations):
        raise bad_request("a JSON patch must be a list of operation objects")
    try:
        jsonpatch.JsonPatch(operations)  # checks every operation's form before any is applied
    except (jsonpatch.InvalidJsonPatch, jsonpatch.JsonPointerException) as exc:
        raise bad_request(f"invalid JSON patch: {exc}") from None
    doc = copy.deepcopy(target)
    for op in operations:  # one at a time, to name the one that fails
        try:
            doc = jsonpatch.JsonPatch([op]).apply(doc, in_place=True)
        except jsonpatch.InvalidJsonPatch as exc:  # without its value or from member
            raise bad_request(f"invalid JSON patch: {exc}") from None
        except jsonpatch.JsonPatchTestFailed:
            raise _does_not_apply(op, "the value differs") from None
        except jsonpatch.JsonPatchConflict as exc:
            raise _does_not_apply(op, str(exc)) from None
        except jsonpatch.JsonPointerException:  # its message quotes the whole document
            raise _does_not_apply(op, "the path does not exist") from None
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
