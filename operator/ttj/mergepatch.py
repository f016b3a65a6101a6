"""JSON merge patch (RFC 7396), both ways: apply one, and compute the one that turns a document into another.

Pure and standard-library only: the planner's in-memory interpreter, the controller's status writes and
the local cluster's API server all use this one.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """``target`` with ``patch`` applied: null removes a key, objects merge, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


def merge_patch_between(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The patch that makes ``old`` into ``new``: removed keys become null, nested objects recurse, lists and
    scalars are replaced whole."""
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            nested = merge_patch_between(before, value)
            if nested:
                patch[key] = nested
        elif before != value or key not in old:
            patch[key] = value
    return patch
