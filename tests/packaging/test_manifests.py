"""The install as kustomize renders it: the base, every example overlay, and every component composed in one
overlay of a platform team's own. Each rendered operator must be one that acts safely: leader election on
whenever it has more than one replica, and one watch scope (all namespaces, or the listed ones with their
RoleBindings and no cluster-wide binding of its job rights)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
OVERLAYS = sorted(p.parent for p in (MANIFESTS / "overlays").glob("*/kustomization.yaml"))
COMPONENTS = sorted(p.parent for p in (MANIFESTS / "components").glob("*/kustomization.yaml"))

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl (kubectl kustomize) here")


def _build(directory: Path) -> list[dict[str, Any]]:
    built = subprocess.run(
        ["kubectl", "kustomize", str(directory)], capture_output=True, text=True, check=False, timeout=120
    )
    assert built.returncode == 0, built.stderr
    return [doc for doc in yaml.safe_load_all(built.stdout) if doc]


def _composed() -> list[dict[str, Any]]:
    """A platform team's overlay of its own: the base, every component, and what the components leave to it (one
    watched namespace with its RoleBinding, the GKE settings). Kustomize takes bases by relative path only, so
    it is written inside the repository, under the ignored build/."""
    scratch = ROOT / "build"
    scratch.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="overlay-", dir=scratch) as directory:
        binding = yaml.safe_load((MANIFESTS / "overlays" / "namespaced" / "rolebindings.yaml").read_text())
        binding["metadata"]["namespace"] = "team-a"
        (Path(directory) / "rolebinding.yaml").write_text(yaml.safe_dump(binding))
        args = "/spec/template/spec/containers/0/args/-"
        overlay = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [os.path.relpath(MANIFESTS / "base", directory), "rolebinding.yaml"],
            "components": [os.path.relpath(c, directory) for c in COMPONENTS],
            "configMapGenerator": [
                {"name": "ttj-gke", "namespace": "ttj-system", "literals": ["TTJ_GKE_PROJECT=p", "TTJ_GKE_CLUSTER=c"]}
            ],
            "patches": [
                {
                    "target": {"kind": "Deployment", "name": "ttj-operator"},
                    "patch": yaml.safe_dump([{"op": "add", "path": args, "value": "--namespace=team-a"}]),
                }
            ],
        }
        (Path(directory) / "kustomization.yaml").write_text(yaml.safe_dump(overlay, sort_keys=False))
        return _build(Path(directory))


def _operator(documents: list[dict[str, Any]]) -> tuple[int, list[str]]:
    (deployment,) = [d for d in documents if d["kind"] == "Deployment" and d["metadata"]["name"] == "ttj-operator"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return deployment["spec"]["replicas"], container["args"]


def _check_operator(documents: list[dict[str, Any]]) -> None:
    replicas, args = _operator(documents)
    if replicas > 1:
        assert "--leader-elect" in args, f"{replicas} replicas without leader election act on the same jobs at once"
    watched = sorted(a.removeprefix("--namespace=") for a in args if a.startswith("--namespace="))
    bindings = {
        d["metadata"]["name"]
        for d in documents
        if d["kind"] == "ClusterRoleBinding" and d["roleRef"]["name"] == "ttj-operator"
    }
    if "--all-namespaces" in args:
        assert watched == []
        assert bindings == {"ttj-operator"}
    else:
        assert watched, "the operator watches neither all namespaces nor any listed one"
        assert bindings == set(), "a namespaced operator keeps a cluster-wide binding of its job rights"
        granted = sorted(
            d["metadata"]["namespace"]
            for d in documents
            if d["kind"] == "RoleBinding" and d["roleRef"]["name"] == "ttj-operator"
        )
        assert granted == watched


@pytest.mark.parametrize("target", [MANIFESTS / "base", *OVERLAYS], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_overlay_renders_an_operator_that_acts_safely(target: Path) -> None:
    _check_operator(_build(target))


def test_every_component_composes_with_the_others() -> None:
    documents = _composed()
    _check_operator(documents)
    _, args = _operator(documents)
    assert {"--leader-elect", "--verbose", "--namespace=team-a"} <= set(args)
    (gke,) = [d for d in documents if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("ttj-gke")]
    (deployment,) = [d for d in documents if d["kind"] == "Deployment"]
    env_from = deployment["spec"]["template"]["spec"]["containers"][0]["envFrom"]
    assert env_from == [{"configMapRef": {"name": gke["metadata"]["name"]}}]
    assert {d["kind"] for d in documents} >= {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


def test_everything_lands_in_ttj_system_but_the_job_namespaces_rolebindings() -> None:
    """What a platform team is told (docs/install.md): the operator's objects in ttj-system, the RoleBindings
    of the namespaced component in the namespaces that hold jobs, the rest cluster-scoped."""
    cluster_scoped = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
    placed = {(d["kind"], d["metadata"].get("namespace")) for d in _composed() if d["kind"] not in cluster_scoped}
    assert {ns for _, ns in placed} == {"ttj-system", "team-a"}
    assert {kind for kind, ns in placed if ns == "team-a"} == {"RoleBinding"}


def test_the_registry_overlay_names_both_images_from_one_registry_and_release() -> None:
    documents = _build(MANIFESTS / "overlays" / "my-registry")
    (deployment,) = [d for d in documents if d["kind"] == "Deployment"]
    operator = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    (crd,) = [d for d in documents if d["kind"] == "CustomResourceDefinition"]
    trainer = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["image"]
    assert trainer["default"] == operator.replace("/ttj-operator:", "/ttj-trainer:")
    assert not operator.startswith("ghcr.io/transient-training/")
