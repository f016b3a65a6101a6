"""The CRD: generated from the models, structural, in sync with crds/, accepting the examples."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from ttj.api import crd as crd_module
from ttj.api.models import TransientTrainingJob

ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "crds" / "transient.training_transienttrainingjobs.yaml"
EXAMPLES = sorted((ROOT / "examples").rglob("*.yaml"))


def schema_nodes(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node under ``node`` with a readable path."""
    if not isinstance(node, dict):
        return
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from schema_nodes(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from schema_nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from schema_nodes(node["additionalProperties"], f"{path}{{}}")


def open_api_schema() -> dict[str, Any]:
    return crd_module.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


def test_committed_crd_matches_the_models() -> None:
    assert CRD_FILE.read_text() == crd_module.crd_yaml(), "crds/ is out of date: run `make crds`"


def test_schema_is_structural() -> None:
    for path, node in schema_nodes(open_api_schema()):
        for forbidden in ("$ref", "$defs", "anyOf", "allOf", "oneOf", "title", "const"):
            assert forbidden not in node, f"{path or '<root>'} has {forbidden}"
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{path} has no type"
        assert not ("properties" in node and "additionalProperties" in node), f"{path} has both"
        assert node.get("default", 0) is not None, f"{path} defaults to null"
        for exclusive in ("exclusiveMinimum", "exclusiveMaximum"):
            assert isinstance(node.get(exclusive, True), bool), f"{path}: {exclusive} must be boolean"


def test_every_spec_and_status_field_is_described() -> None:
    schema = open_api_schema()
    for top in ("spec", "status"):
        for path, node in schema_nodes(schema["properties"][top], top):
            if path.endswith("{}"):
                continue  # map values are described by their map
            assert node.get("description"), f"{path} has no description (kubectl explain shows it)"


def test_contract_names_subresources_and_columns() -> None:
    generated = crd_module.crd()
    spec = generated["spec"]
    assert generated["metadata"]["name"] == "transienttrainingjobs.transient.training"
    assert spec["names"]["shortNames"] == ["ttj"]
    assert spec["scope"] == "Namespaced"
    version = spec["versions"][0]
    assert version["name"] == "v1alpha1"
    assert version["subresources"]["status"] == {}
    scale = version["subresources"]["scale"]
    assert scale["specReplicasPath"] == ".spec.workers.replicas"
    assert scale["statusReplicasPath"] == ".status.workers.active"
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Phase",
        "Reason",
        "Workers",
        "Chief",
        "Step",
        "Of",
        "Cost",
        "ETA",
        "Age",
    ]


def test_cross_field_rules_are_cel_with_the_models_messages() -> None:
    workers = open_api_schema()["properties"]["spec"]["properties"]["workers"]
    rules = {r["rule"]: r["message"] for r in workers["x-kubernetes-validations"]}
    minimum = "(has(self.minReplicas) ? self.minReplicas : 1) <= (has(self.replicas) ? self.replicas : 4)"
    assert rules[minimum] == "workers.minReplicas must not exceed workers.replicas"
    assert "!has(self.maxReplicas) || (has(self.replicas) ? self.replicas : 4) <= self.maxReplicas" in rules
    unique = "!has(self.groups) || self.groups.all(g, self.groups.exists_one(h, h.name == g.name))"
    assert rules[unique] == "workers.groups: each group needs a name of its own"
    assert workers["properties"]["groups"]["maxItems"] == 8


def _unguarded_reads(rule: str, node: dict[str, Any]) -> list[str]:
    """The field paths ``rule`` reads without has() though the field may be absent (not required)."""
    unguarded = []
    for match in re.finditer(r"\b(?:self|oldSelf)(?:\.\w+)+", rule):
        parts = match.group(0).split(".")
        schema = node
        for depth in range(1, len(parts)):
            if parts[depth] not in schema.get("properties", {}):
                break  # a method (all, startsWith, ...) or a map key: not a field of the schema
            prefix = ".".join(parts[: depth + 1])
            if parts[depth] not in schema.get("required", []) and f"has({prefix})" not in rule:
                unguarded.append(prefix)
            schema = schema["properties"][parts[depth]]
    return unguarded


def test_cel_rules_read_optional_fields_only_through_has() -> None:
    """kube-apiserver validates a write through the scale subresource before any default fills in the object
    the write makes (`kubectl scale` of a job written without workers): a rule reading an optional field
    without has() then fails with "no such key" even when the field has a default."""
    unguarded = {
        f"{path}: {rule['rule']}": reads
        for path, node in schema_nodes(open_api_schema())
        for rule in node.get("x-kubernetes-validations", [])
        if (reads := _unguarded_reads(rule["rule"], node))
    }
    assert unguarded == {}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_examples_are_valid(example: Path) -> None:
    documents = [d for d in yaml.safe_load_all(example.read_text()) if d]
    assert documents, f"{example} is empty"
    for document in documents:
        assert document["kind"] == "TransientTrainingJob"
        # Kubernetes' schema is OpenAPI v3.0, whose keywords are JSON Schema draft 4's.
        jsonschema.Draft4Validator(open_api_schema()).validate(document)
        TransientTrainingJob.model_validate(document)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "trainSteps"), -1),
        (("spec", "workers", "provisioning"), "reserved"),
        (("spec", "checkpoint", "uri"), "relative/dir"),
        (("spec", "budget", "maxCostUSD"), 0),
        (("spec", "workers", "gpusPerWorker"), "one"),
    ],
)
def test_schema_refuses_what_users_get_wrong(path: tuple[str, ...], value: Any) -> None:
    document = yaml.safe_load((ROOT / "examples" / "full.yaml").read_text())
    node = document
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(open_api_schema()).validate(document)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
@pytest.mark.parametrize(
    "target",
    ["crds", "manifests/base"],  # the overlays and components: tests/packaging/test_manifests.py
)
def test_kustomize_builds(target: str) -> None:
    built = subprocess.run(
        ["kubectl", "kustomize", str(ROOT / target)], capture_output=True, text=True, check=False, timeout=60
    )
    assert built.returncode == 0, built.stderr
    kinds = {doc["kind"] for doc in yaml.safe_load_all(built.stdout) if doc}
    assert "CustomResourceDefinition" in kinds
    if target != "crds":
        assert {"Deployment", "ClusterRole", "ServiceAccount", "Service", "Namespace"} <= kinds


def test_operator_deployment_is_locked_down() -> None:
    deployment = yaml.safe_load((ROOT / "manifests" / "base" / "deployment.yaml").read_text())
    spec = deployment["spec"]
    # Highly available: two replicas, one acting (leader election), on different nodes, a PDB.
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    pod = spec["template"]["spec"]
    assert "--leader-elect" in pod["containers"][0]["args"]
    spread = {c["topologyKey"]: c["whenUnsatisfiable"] for c in pod["topologySpreadConstraints"]}
    assert spread["kubernetes.io/hostname"] == "DoNotSchedule"
    base = ROOT / "manifests" / "base"
    pdb = yaml.safe_load((base / "poddisruptionbudget.yaml").read_text())
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"] == spec["selector"]
    role, _binding = yaml.safe_load_all((base / "leader-election-role.yaml").read_text())
    assert {n for rule in role["rules"] for n in rule.get("resourceNames", [])} == {"ttj-operator-leader"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    container = pod["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


RBAC_FILES = sorted(
    path.name
    for path in (ROOT / "manifests" / "base").glob("*.yaml")
    if any((doc or {}).get("kind") in ("Role", "ClusterRole") for doc in yaml.safe_load_all(path.read_text()))
)


@pytest.mark.parametrize("name", RBAC_FILES)
def test_every_rbac_rule_says_why(name: str) -> None:
    """A rule is commented, or shares the comment of the rule just above it (same reason, other resources)."""
    lines = (ROOT / "manifests" / "base" / name).read_text().splitlines()
    for number, line in enumerate(lines):
        if line.strip().startswith("- apiGroups:"):
            before = lines[number - 1].strip()
            assert before.startswith("#") or before.startswith("verbs:"), f"{name}: rule at line {number + 1}"


def _first_pass_creates() -> list[dict[str, Any]]:
    """What the planner creates for a new job (examples/demo.yaml): every kind of child the operator makes."""
    from datetime import UTC, datetime

    from ttj.planner import CreateChild, Observed, PlannerConfig, plan

    job = yaml.safe_load((ROOT / "examples" / "demo.yaml").read_text())
    job["metadata"].update(namespace="ns", uid="uid-1")
    result = plan(job, Observed(), datetime.now(UTC), PlannerConfig())
    return [w.manifest for w in result.writes if isinstance(w, CreateChild)]


def _granted(rules: list[dict[str, Any]], group: str, resource: str) -> set[str]:
    return {
        v for r in rules if group in r.get("apiGroups", []) and resource in r.get("resources", []) for v in r["verbs"]
    }


def test_the_operator_may_create_and_watch_every_child_the_planner_makes() -> None:
    from ttj.kubeapi import RESOURCES

    rules = yaml.safe_load((ROOT / "manifests" / "base" / "clusterrole.yaml").read_text())["rules"]
    for manifest in _first_pass_creates():
        where = RESOURCES[manifest["kind"]]
        assert {"create", "list", "watch"} <= _granted(rules, where.group, where.plural), manifest["kind"]


def test_the_operator_holds_what_it_grants_its_trainers() -> None:
    """RBAC lets the operator create each job's trainer Role and bind it only if it holds every permission in it
    itself (it has no escalate or bind): every verb of the trainer Role is in the operator's Lease rule."""
    rules = yaml.safe_load((ROOT / "manifests" / "base" / "clusterrole.yaml").read_text())["rules"]
    roles = [m for m in _first_pass_creates() if m["kind"] == "Role"]
    assert roles
    for granted in (rule for role in roles for rule in role["rules"]):
        for group in granted["apiGroups"]:
            for resource in granted["resources"]:
                assert set(granted["verbs"]) <= _granted(rules, group, resource), granted
    verbs = {v for r in rules for v in r["verbs"]}
    assert not verbs & {"escalate", "bind", "impersonate", "*", "update"}


@pytest.mark.parametrize(
    ("rule", "unguarded"),
    [
        ("self.minReplicas <= self.replicas", ["self.minReplicas", "self.replicas"]),
        ("!has(self.maxReplicas) || self.replicas <= self.maxReplicas", ["self.replicas"]),
        ("(has(self.replicas) ? self.replicas : 4) >= 1", []),
        ("!has(self.groups) || self.groups.all(g, g.name != '')", []),
    ],
)
def test_the_has_check_finds_what_kube_cannot_read(rule: str, unguarded: list[str]) -> None:
    workers = open_api_schema()["properties"]["spec"]["properties"]["workers"]
    assert _unguarded_reads(rule, workers) == unguarded


#: Kubernetes' own types, passed through to pods: examples/full.yaml shows them used, not every field of them.
PASSED_THROUGH = {"template", "resources", "tolerations", "nodeSelector", "args"}


def _spec_fields(node: dict[str, Any], path: str = "spec") -> Iterator[str]:
    for name, child in node.get("properties", {}).items():
        yield f"{path}.{name}"
        if name in PASSED_THROUGH:
            continue
        item = child.get("items", child) if child.get("type") == "array" else child
        yield from _spec_fields(item, f"{path}.{name}")


def _written_fields(value: Any, path: str) -> Iterator[str]:
    if isinstance(value, dict):
        for name, child in value.items():
            yield f"{path}.{name}"
            yield from _written_fields(child, f"{path}.{name}")
    elif isinstance(value, list):
        for item in value:
            yield from _written_fields(item, path)


def test_the_full_example_shows_every_field_of_the_spec() -> None:
    """examples/full.yaml says it has every field: with full-groups.yaml it writes each one the schema has."""
    documents = [yaml.safe_load((ROOT / "examples" / name).read_text()) for name in ("full.yaml", "full-groups.yaml")]
    written = {field for document in documents for field in _written_fields(document["spec"], "spec")}
    missing = sorted(set(_spec_fields(open_api_schema()["properties"]["spec"])) - written)
    assert missing == []
