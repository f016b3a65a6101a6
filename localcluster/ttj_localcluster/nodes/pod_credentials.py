"""What a kubelet mounts for a pod's service account, in the form local processes use: a kubeconfig holding a
token the API server issued for that service account (TokenRequest, bound to the pod), in place of
``/var/run/secrets/kubernetes.io/serviceaccount/token``. A pod or service account with
``automountServiceAccountToken: false`` gets none (no ``KUBECONFIG``), as such a pod gets no token file.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from ttj.kubeapi import JSON, KubeClient, KubeError

log = logging.getLogger(__name__)

#: the name in the API server's certificate that pods check (apiserver.tls)
IN_CLUSTER_NAME = "kubernetes.default.svc"
#: what a kubelet asks for (the API server makes it last a year; a kubelet would rotate it)
TOKEN_SECONDS = 3607


class PodCredentials:
    """Per-pod kubeconfigs naming the API as ``pod_kubeconfig`` does, with the pod's own token."""

    def __init__(self, client: KubeClient, pod_kubeconfig: str) -> None:
        self.client = client
        self.pod_kubeconfig = pod_kubeconfig

    def _mounts_token(self, pod: JSON, namespace: str, account: str) -> bool:
        choice = (pod.get("spec") or {}).get("automountServiceAccountToken")
        if choice is not None:
            return bool(choice)
        service_account = self.client.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}")
        return (service_account or {}).get("automountServiceAccountToken") is not False

    def kubeconfig_for(self, pod: JSON, directory: Path) -> str | None:
        """The kubeconfig for the pod's containers (written once per pod), or None when it mounts no token.

        Raises ValueError when no token can be had (the service account is gone): the container cannot start.
        """
        path = directory / "kubeconfig"
        if path.exists():
            return str(path)
        metadata = pod.get("metadata") or {}
        namespace, name = str(metadata.get("namespace")), str(metadata.get("name"))
        account = str((pod.get("spec") or {}).get("serviceAccountName") or "default")
        if not self._mounts_token(pod, namespace, account):
            return None
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": TOKEN_SECONDS,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": metadata.get("uid")},
            },
        }
        try:
            issued = self.client.request(
                "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token", body=request
            )
        except KubeError as exc:
            raise ValueError(f'failed to fetch token for service account "{account}": {exc.message}') from exc
        token = str(issued["status"]["token"])
        path.write_text(_kubeconfig(self._cluster(), token), encoding="utf-8")
        path.chmod(0o600)
        return str(path)

    def _cluster(self) -> dict[str, Any]:
        import yaml

        config = yaml.safe_load(Path(self.pod_kubeconfig).read_text(encoding="utf-8"))
        cluster = dict(config["clusters"][0]["cluster"])
        if str(cluster.get("server", "")).startswith("https:"):
            # Through the pod network's relay the address is the gateway's: pods verify the name the relayed
            # kubeconfig kept (the server's own, which its certificate names), else the in-cluster one.
            cluster.setdefault("tls-server-name", IN_CLUSTER_NAME)
        return cluster


def _kubeconfig(cluster: dict[str, Any], token: str) -> str:
    """JSON is YAML: the kubernetes client reads it as a kubeconfig."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "ttj-local", "cluster": cluster}],
        "users": [{"name": "pod", "user": {"token": token}}],
        "contexts": [{"name": "pod", "context": {"cluster": "ttj-local", "user": "pod"}}],
        "current-context": "pod",
    }
    return json.dumps(config, indent=1)
