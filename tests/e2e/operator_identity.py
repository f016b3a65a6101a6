"""The operator's own identity from its install manifests: the ServiceAccount and RBAC objects of
``manifests/base`` (loaded as kustomize would: its resource list, its namespace), created in the cluster, and a
kubeconfig that authenticates as that ServiceAccount with a TokenRequest token. The e2e operator runs with it, so
that every verb the operator sends is proven to be granted by the manifests it ships with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "manifests" / "base"
#: what the identity is made of; the rest of the base (Deployment, Service, prices, CRD) is not needed here
IDENTITY_KINDS = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
TOKEN_SECONDS = 24 * 3600


def identity_manifests() -> list[dict[str, Any]]:
    """The base's identity objects, with the kustomization's namespace applied to the namespaced ones."""
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    namespace = kustomization["namespace"]
    objects = []
    for resource in kustomization["resources"]:
        path = BASE / resource
        if path.is_dir():
            continue  # ../../crds: installed by the tests themselves
        for document in yaml.safe_load_all(path.read_text()):
            if not document or document["kind"] not in IDENTITY_KINDS:
                continue
            if document["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
                document["metadata"]["namespace"] = namespace
            objects.append(document)
    return objects


def operator_account(manifests: list[dict[str, Any]]) -> tuple[str, str]:
    account = next(m for m in manifests if m["kind"] == "ServiceAccount")
    return account["metadata"]["namespace"], account["metadata"]["name"]


def _create(api: client.ApiClient, manifest: dict[str, Any]) -> None:
    kind, namespace = manifest["kind"], manifest["metadata"].get("namespace")
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    create = {
        "Namespace": lambda: core.create_namespace(manifest),
        "ServiceAccount": lambda: core.create_namespaced_service_account(namespace, manifest),
        "ClusterRole": lambda: rbac.create_cluster_role(manifest),
        "ClusterRoleBinding": lambda: rbac.create_cluster_role_binding(manifest),
        "Role": lambda: rbac.create_namespaced_role(namespace, manifest),
        "RoleBinding": lambda: rbac.create_namespaced_role_binding(namespace, manifest),
    }[kind]
    try:
        create()
    except ApiException as exc:
        if exc.status != 409:
            raise
        if kind in ("ClusterRole", "Role"):  # an older install's rules: bring them to this checkout's
            name = manifest["metadata"]["name"]
            if kind == "ClusterRole":
                rbac.patch_cluster_role(name, {"rules": manifest["rules"]})
            else:
                rbac.patch_namespaced_role(name, namespace, {"rules": manifest["rules"]})


def install_operator_identity(api: client.ApiClient, admin_kubeconfig: str, directory: Path) -> tuple[str, str]:
    """Creates the identity objects; returns (a kubeconfig acting as the operator's ServiceAccount, its user name)."""
    manifests = identity_manifests()
    for manifest in manifests:
        _create(api, manifest)
    namespace, name = operator_account(manifests)
    issued = client.CoreV1Api(api).create_namespaced_service_account_token(
        name, namespace, {"spec": {"expirationSeconds": TOKEN_SECONDS}}
    )
    config = yaml.safe_load(Path(admin_kubeconfig).read_text())
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])
    cluster = next(c for c in config["clusters"] if c["name"] == context["context"]["cluster"])
    operator_config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": "ttj-operator", "user": {"token": issued.status.token}}],
        "contexts": [{"name": "ttj-operator", "context": {"cluster": cluster["name"], "user": "ttj-operator"}}],
        "current-context": "ttj-operator",
    }
    path = directory / "operator.kubeconfig"
    path.write_text(yaml.safe_dump(operator_config))
    path.chmod(0o600)
    return str(path), f"system:serviceaccount:{namespace}:{name}"
