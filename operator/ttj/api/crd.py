"""Generate the CustomResourceDefinition from the pydantic models.

Pydantic writes JSON Schema with ``$defs``/``$ref``, ``anyOf`` for optional fields and ``title``s;
Kubernetes wants a *structural* schema: every node typed, references inlined, nullable fields
simply omitted. :func:`structural` does that rewrite.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml
from pydantic import BaseModel

import ttj_contract as contract
from ttj.api import models

_DROP_KEYS = {"title"}
_INT_OR_STRING_BOUNDS = ("pattern", "maxLength", "minimum", "maximum")
#: Keys first in every schema node, so that the generated YAML reads like a hand-written CRD.
_KEY_ORDER = ["type", "description", "format", "enum", "default", "minimum", "maximum", "pattern"]


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    """Inline ``$ref``s, drop titles, and turn ``anyOf [X, null]`` into plain ``X``."""
    if isinstance(node, list):
        return [_resolve(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]])
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        target.update(siblings)  # a field's description overrides its type's
        return _resolve(target, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP_KEYS or key == "$defs":
            continue
        out[key] = _resolve(value, defs)
    if "anyOf" in out:
        out = _collapse_any_of(out)
    if out.get("default", 0) is None:
        del out["default"]  # Optional → omitted, never null
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        # OpenAPI v3.0 (what Kubernetes speaks) has boolean exclusive bounds beside the bound.
        if isinstance(out.get(exclusive), int | float) and not isinstance(out[exclusive], bool):
            out[bound] = out[exclusive]
            out[exclusive] = True
    if "const" in out:  # Literal with one value
        out["enum"] = [out.pop("const")]
        out.setdefault("type", "string")
    return out


def _collapse_any_of(node: dict[str, Any]) -> dict[str, Any]:
    branches = [b for b in node.pop("anyOf") if b.get("type") != "null"]
    if len(branches) == 1:
        merged = dict(branches[0])
        merged.update(node)
        return merged
    types = {b.get("type") for b in branches}
    if types == {"integer", "string"} or any(b.get("x-kubernetes-int-or-string") for b in branches):
        # A Kubernetes quantity: structural schemas say int-or-string instead of anyOf.
        merged = {k: v for k, v in node.items() if k != "x-kubernetes-int-or-string"}
        merged["x-kubernetes-int-or-string"] = True
        # Each branch's bounds still hold: a pattern checks only strings, minimum/maximum only numbers.
        for branch in branches:
            merged.update({k: v for k, v in branch.items() if k in _INT_OR_STRING_BOUNDS})
        return merged
    raise ValueError(f"cannot express anyOf {branches!r} in a structural schema")


def _tidy(node: Any) -> Any:
    """Make int-or-string nodes carry no type, as structural schemas require."""
    if isinstance(node, list):
        return [_tidy(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _tidy(v) for k, v in node.items()}
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
    if "properties" in out and out.get("additionalProperties") is False:
        # Structural schemas forbid both; the apiserver prunes unknown fields instead.
        del out["additionalProperties"]
    first = [k for k in _KEY_ORDER if k in out]
    return {k: out[k] for k in first + sorted(k for k in out if k not in _KEY_ORDER)}


def structural(model: type[BaseModel]) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of a pydantic model, by alias."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    return _tidy(_resolve(raw, defs))  # type: ignore[no-any-return]


def open_api_schema() -> dict[str, Any]:
    """The CRD's ``openAPIV3Schema``: spec and status of a TransientTrainingJob."""
    spec = structural(models.TransientTrainingJobSpec)
    status = structural(models.TransientTrainingJobStatus)
    return {
        "type": "object",
        "description": models.TransientTrainingJob.__doc__,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": f"API version: {contract.API_VERSION}."},
            "kind": {"type": "string", "description": f"{contract.KIND}."},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    }


PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase", "description": "Lifecycle phase."},
    # why the job trains or not (Training, WaitingForWorkers, BelowMinReplicas, ...), beside the phase
    {
        "name": "Reason",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Running")].reason',
        "description": "The reason of the Running condition: why the job trains, or what it waits for.",
    },
    {
        "name": "Workers",
        "type": "string",
        "jsonPath": ".status.workers.summary",
        "description": "Active/desired workers.",
    },
    {"name": "Chief", "type": "string", "jsonPath": ".status.chief.pod", "description": "Current chief pod."},
    {"name": "Step", "type": "integer", "jsonPath": ".status.progress.globalStep", "description": "Global step."},
    # beside Step, so progress reads at a glance: step 12000 of 64000
    {"name": "Of", "type": "integer", "jsonPath": ".spec.trainSteps", "description": "Global steps to reach."},
    {"name": "Cost", "type": "string", "jsonPath": ".status.cost.summary", "description": "Cost so far."},
    # a time, not kubectl's date type: that prints an age and shows a future time as <invalid>
    {
        "name": "ETA",
        "type": "string",
        "jsonPath": ".status.progress.eta.p90",
        "description": "Completion projected at 90 % confidence.",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def crd() -> dict[str, Any]:
    """The whole CustomResourceDefinition object."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{contract.PLURAL}.{contract.GROUP}"},
        "spec": {
            "group": contract.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": contract.KIND,
                "listKind": f"{contract.KIND}List",
                "plural": contract.PLURAL,
                "singular": contract.SINGULAR,
                "shortNames": [contract.SHORT_NAME],
                "categories": ["all"],
            },
            "versions": [
                {
                    "name": contract.VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": open_api_schema()},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.workers.replicas",
                            "statusReplicasPath": ".status.workers.active",
                            "labelSelectorPath": ".status.workers.selector",
                        },
                    },
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }


HEADER = "# Generated from operator/ttj/api/models.py by `make crds` (ttj crd). Do not edit.\n"


def crd_yaml() -> str:
    """The CRD as the YAML document committed in ``crds/``."""
    return HEADER + yaml.safe_dump(crd(), sort_keys=False, width=100)
