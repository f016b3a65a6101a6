"""``resource.Quantity`` fields, refused as kube-apiserver's decoder refuses them.

kube-apiserver decodes a built-in object into its Go type before validating it, and a quantity's
``UnmarshalJSON`` runs ``resource.ParseQuantity`` on the JSON text (quoted or not; ``null`` is zero). A value
it cannot parse fails the whole request with 400, before any field validation: ``go_quantity_error`` follows
its scanner (sign, digits, an optional fraction, a suffix of ``eEinumkKMGTP`` letters, an optional signed
exponent) and its suffix table, and words the refusal as it does. The field table says where each served
kind keeps quantities.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

FORMAT_WRONG = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
SUFFIX_WRONG = "unable to parse quantity's suffix"

_SCAN = re.compile(r"^[+-]?[0-9]*(\.[0-9]*)?(?P<suffix>[eEinumkKMGTP]*[-+]?[0-9]*)$")
_SUFFIXES = frozenset({"", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"})
_EXPONENT = re.compile(r"^[eE][+-]?[0-9]+$")
_INT64 = 2**63


def go_quantity_error(value: Any) -> str | None:
    """The error ``Quantity.UnmarshalJSON`` returns for this JSON value, None when it parses."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
    elif isinstance(value, bool) or not isinstance(value, int | float):
        text = json.dumps(value, separators=(",", ":"))
    else:
        text = json.dumps(value)
    if not text:
        return FORMAT_WRONG
    match = _SCAN.match(text)
    if match is None:
        return FORMAT_WRONG
    suffix = match.group("suffix")
    if suffix in _SUFFIXES:
        return None
    if _EXPONENT.match(suffix) and abs(int(suffix[1:])) < _INT64:
        return None
    return SUFFIX_WRONG


def _pod_spec_quantities(spec: Any) -> Iterator[Any]:
    if not isinstance(spec, dict):
        return
    for key in ("containers", "initContainers", "ephemeralContainers"):
        for container in spec.get(key) or []:
            resources = container.get("resources") if isinstance(container, dict) else None
            if isinstance(resources, dict):
                for part in ("limits", "requests"):
                    if isinstance(resources.get(part), dict):
                        yield from resources[part].values()
    if isinstance(spec.get("overhead"), dict):
        yield from spec["overhead"].values()
    for volume in spec.get("volumes") or []:
        empty_dir = volume.get("emptyDir") if isinstance(volume, dict) else None
        if isinstance(empty_dir, dict) and "sizeLimit" in empty_dir:
            yield empty_dir["sizeLimit"]


def _template_spec(obj: dict[str, Any]) -> Any:
    template = (obj.get("spec") or {}).get("template") if isinstance(obj.get("spec"), dict) else None
    return template.get("spec") if isinstance(template, dict) else None


def _maps(obj: dict[str, Any], *paths: tuple[str, str]) -> Iterator[Any]:
    for outer, inner in paths:
        holder = obj.get(outer)
        values = holder.get(inner) if isinstance(holder, dict) else None
        if isinstance(values, dict):
            yield from values.values()


def _quantities(group: str, kind: str, obj: dict[str, Any]) -> Iterator[Any]:
    if (group, kind) == ("", "Pod"):
        yield from _pod_spec_quantities(obj.get("spec"))
    elif (group, kind) in (("apps", "Deployment"), ("apps", "ReplicaSet"), ("apps", "StatefulSet")):
        yield from _pod_spec_quantities(_template_spec(obj))
    elif (group, kind) == ("", "ResourceQuota"):
        yield from _maps(obj, ("spec", "hard"), ("status", "hard"), ("status", "used"))
    elif (group, kind) == ("", "Node"):
        yield from _maps(obj, ("status", "capacity"), ("status", "allocatable"))


def decode(group: str, kind: str, obj: dict[str, Any]) -> str | None:
    """The first quantity of ``obj`` kube's decoder refuses, as its error; None when all parse."""
    for value in _quantities(group, kind, obj):
        error = go_quantity_error(value)
        if error is not None:
            return error
    return None
