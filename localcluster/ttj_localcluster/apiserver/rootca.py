"""The ``kube-root-ca.crt`` ConfigMap in every namespace, as kube-controller-manager's root-ca-cert-publisher
keeps it: created with the namespace, put back when deleted, its data restored when changed."""

from __future__ import annotations

import copy
from typing import Any

from .core import ApiCore
from .resources import NAMESPACES, ResourceType

NAME = "kube-root-ca.crt"
KEY = "ca.crt"
DESCRIPTION = (
    "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as "
    "the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of "
    "Kubernetes clusters."
)


class RootCaPublisher:
    """``ca_pem``: the CA that signed the API server's certificate (empty when it serves plain HTTP)."""

    def __init__(self, core: ApiCore, ca_pem: str) -> None:
        self.core = core
        self.ca_pem = ca_pem
        configmaps = core.registry.get("", "v1", "configmaps")
        assert configmaps is not None
        self.configmaps: ResourceType = configmaps
        core.on_write.setdefault(NAMESPACES, []).append(self._on_namespace)
        core.on_write.setdefault(configmaps.storage_key, []).append(self._on_configmap)

    def publish_everywhere(self) -> None:
        for namespace in self.core.store.items(NAMESPACES, None):
            self._ensure(namespace["metadata"]["name"])

    def _active(self, namespace: str) -> bool:
        ns = self.core.store.get(NAMESPACES, "", namespace)
        return ns is not None and not ns["metadata"].get("deletionTimestamp")

    def _wanted(self) -> dict[str, Any]:
        return {
            "metadata": {"name": NAME, "annotations": {"kubernetes.io/description": DESCRIPTION}},
            "data": {KEY: self.ca_pem},
        }

    def _ensure(self, namespace: str) -> None:
        if not self._active(namespace):
            return
        current = self.core.store.get(self.configmaps.storage_key, namespace, NAME)
        if current is None:
            self.core.create(self.configmaps, namespace, self._wanted())
        elif current.get("data") != {KEY: self.ca_pem} and not current["metadata"].get("deletionTimestamp"):
            fixed = copy.deepcopy(current)
            fixed["data"] = {KEY: self.ca_pem}
            self.core.write_update(self.configmaps, current, fixed, subresource=None)

    def _on_namespace(self, new: dict[str, Any], old: dict[str, Any] | None) -> None:
        if new and old is None:
            self._ensure(new["metadata"]["name"])

    def _on_configmap(self, new: dict[str, Any], old: dict[str, Any] | None) -> None:
        obj = new or old
        if obj and obj["metadata"]["name"] == NAME:
            self._ensure(obj["metadata"]["namespace"])
