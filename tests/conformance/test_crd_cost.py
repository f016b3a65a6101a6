"""CEL rule cost: kube-apiserver (1.25) estimates every x-kubernetes-validations rule's worst-case cost
when a CRD is written and refuses rules over its per-rule budget (10 000 000) and schemas over its
per-CRD budget (100 000 000); the local API server must refuse the same CRDs with the same words.

Each probe puts one rule on the items of a list whose maxItems brings the rule's cost just over the
per-rule budget: kube then prints the factor with six decimals (``1.xxxxxxx``), which pins the estimated
cost of one evaluation exactly. The expected costs are worked out by hand in tests/localcluster/test_celcost.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

GROUP = "costprobe.conformance.ttj.test"
NAME = f"costprobes.{GROUP}"
WHERE = "spec.validation.openAPIV3Schema"
ADVICE = (
    "(try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings "
    "are declared)"
)
PER_RULE = 10_000_000

ITEM = {
    "type": "object",
    "properties": {
        "a": {"type": "integer"},
        "b": {"type": "integer"},
        "s": {"type": "string", "maxLength": 10},
        "t": {"type": "string", "maxLength": 100},
        "l": {"type": "array", "maxItems": 10, "items": {"type": "string", "maxLength": 5}},
        "m": {"type": "object", "maxProperties": 5, "additionalProperties": {"type": "string", "maxLength": 5}},
        "mi": {"type": "object", "additionalProperties": {"type": "integer"}},
        "x": {"type": "object"},
        "y": {"type": "object"},
    },
}

# rule, its estimated cost per evaluation
PROBES = [
    ("self.a < self.b", 5),
    ("self.s == self.t", 8),
    ("!self.s.matches('^[a-z]+$')", 13),
    ("self.s + self.t == 'x'", 49),
    ("self.l.exists(x, x == 'a')", 63),
    ("self.l.filter(x, x == 'a').size() > 0", 165),
    ("self.m.all(k, k.startsWith('a'))", 28),
    ("self.mi.all(k, k == 'a')", 3 + 4 * ((3 * 1024 * 1024 - 2) // 7)),
    ("self.l.join(',') == 'a'", 24),
]


def _crd(rule: str, max_items: int | None) -> dict[str, Any]:
    items: dict[str, Any] = {"type": "array", "items": {**ITEM, "x-kubernetes-validations": [{"rule": rule}]}}
    if max_items is not None:
        items["maxItems"] = max_items
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": NAME},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": "costprobes", "kind": "CostProbe"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": {"type": "object", "properties": {"items": items}}},
                        }
                    },
                }
            ],
        },
    }


def _refusal(k8s_api: client.ApiClient, crd: dict[str, Any]) -> dict[str, Any]:
    ext = client.ApiextensionsV1Api(k8s_api)
    with pytest.raises(client.ApiException) as info:
        ext.create_custom_resource_definition(crd, dry_run="All")
    assert info.value.status == 422
    status: dict[str, Any] = json.loads(info.value.body)
    assert status["reason"] == "Invalid"
    return status


RULE_PATH = f"{WHERE}.properties[spec].properties[items].items.x-kubernetes-validations[0].rule"


@pytest.mark.parametrize(("rule", "cost"), PROBES, ids=[p[0] for p in PROBES])
def test_a_rule_just_over_the_per_rule_budget_is_refused_with_kubes_factor(
    k8s_api: client.ApiClient, rule: str, cost: int
) -> None:
    times = PER_RULE // cost + 1  # the fewest items that take the rule over budget
    status = _refusal(k8s_api, _crd(rule, times))
    factor = float(cost * times) / float(PER_RULE)
    assert 1.0 < factor < 1.5
    message = f"Forbidden: estimated rule cost exceeds budget by factor of {factor:f}x {ADVICE}"
    assert {"field": RULE_PATH, "message": message} in [
        {"field": c.get("field"), "message": c.get("message")} for c in status["details"]["causes"]
    ]
    # one item fewer is within budget: accepted
    client.ApiextensionsV1Api(k8s_api).create_custom_resource_definition(_crd(rule, times - 1), dry_run="All")


def test_an_unbounded_rule_is_refused_per_rule_and_for_the_whole_schema(k8s_api: client.ApiClient) -> None:
    status = _refusal(k8s_api, _crd("has(self.x) != has(self.y)", 2))
    causes = [(c.get("field"), c.get("message")) for c in status["details"]["causes"]]
    assert (RULE_PATH, f"Forbidden: estimated rule cost exceeds budget by factor of more than 100x {ADVICE}") in causes
    assert (
        RULE_PATH,
        "Forbidden: contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema",
    ) in causes
    total = (
        f"Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget "
        f"by factor of more than 100x {ADVICE}"
    )
    assert (WHERE, total) in causes
    assert f"{RULE_PATH}: Forbidden: estimated rule cost exceeds budget by factor of" in status["message"]


def test_a_list_without_max_items_is_sized_from_the_largest_request(k8s_api: client.ApiClient) -> None:
    # a rule under a list with no maxItems runs once per item that fits in 3 MiB: {} and a comma
    status = _refusal(k8s_api, _crd("!self.s.matches('^[a-z]+$')", None))
    factor = float(13 * (3 * 1024 * 1024 // 3)) / float(PER_RULE)
    message = f"Forbidden: estimated rule cost exceeds budget by factor of {factor:f}x {ADVICE}"
    assert {"field": RULE_PATH, "message": message} in [
        {"field": c.get("field"), "message": c.get("message")} for c in status["details"]["causes"]
    ]


def test_the_projects_crd_is_accepted(k8s_api: client.ApiClient, ttj_crd: dict[str, Any]) -> None:
    ext = client.ApiextensionsV1Api(k8s_api)
    response = ext.read_custom_resource_definition(ttj_crd["metadata"]["name"], _preload_content=False)
    current = json.loads(response.data)
    served = current["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert served == ttj_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]  # every rule kept
    established = {c["type"]: c["status"] for c in current["status"]["conditions"]}
    assert established.get("Established") == "True"
