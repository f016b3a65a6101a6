"""Admission of built-in kinds: the defaults kube-apiserver fills in on create (pods, services, namespaces,
apps workloads) and the validation it applies on every write; custom resources bring their own ``admit``."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from ttj_contract import format_time

from . import priority, quota, validation
from .errors import invalid
from .resources import NAMESPACES, PODS, SERVICES, ResourceType

#: what a pod update may change in a pod's spec besides container images
_POD_MUTABLE_SPEC = (
    "containers",
    "initContainers",
    "activeDeadlineSeconds",
    "tolerations",
    "terminationGracePeriodSeconds",
)


def _without_images(containers: Any) -> list[dict[str, Any]]:
    return [{k: v for k, v in c.items() if k != "image"} for c in containers or []]


def _qos_class(pod: dict[str, Any]) -> str:
    containers = (pod.get("spec") or {}).get("containers") or []
    resources = [c.get("resources") or {} for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    guaranteed = all(
        (r.get("limits") or {}).get(res) is not None
        and (r.get("requests") or {}).get(res, (r.get("limits") or {}).get(res)) == (r.get("limits") or {}).get(res)
        for r in resources
        for res in ("cpu", "memory")
    )
    return "Guaranteed" if guaranteed else "Burstable"


def _validate(rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> list[tuple[str, str]]:
    errors: list[tuple[str, str]] = []
    meta = obj["metadata"]
    for field in ("labels", "annotations"):
        for key, value in (meta.get(field) or {}).items():
            if not isinstance(value, str):
                errors.append((f"metadata.{field}", f"Invalid value: {json.dumps(value)}: {key} must be a string"))
    if not errors:
        errors.extend(validation.metadata(meta))
    if rtype.storage_key == PODS:
        errors.extend(_validate_pod(obj, old))
        if old is None:
            errors.extend(validation.pod_spec("spec", obj.get("spec") or {}))
    if rtype.group == "apps" and rtype.kind in ("Deployment", "ReplicaSet", "StatefulSet"):
        errors.extend(_validate_workload(obj, old))
        template = (obj.get("spec") or {}).get("template") or {}
        errors.extend(
            validation.labels("spec.template.metadata.labels", (template.get("metadata") or {}).get("labels"))
        )
        errors.extend(validation.pod_spec("spec.template.spec", template.get("spec") or {}))
    if rtype.group == "networking.k8s.io" and rtype.kind == "NetworkPolicy":
        errors.extend(validation.network_policy(obj.get("spec") or {}))
    if rtype.storage_key == priority.PRIORITY_CLASSES:
        errors.extend(priority.validate_class(obj, old))
    if rtype.storage_key == quota.QUOTAS:
        errors.extend(quota.validate(obj))
    return errors


def _validate_pod(obj: dict[str, Any], old: dict[str, Any] | None) -> list[tuple[str, str]]:
    errors: list[tuple[str, str]] = []
    spec = obj.get("spec") or {}
    if old is None:
        return errors
    old_spec = old.get("spec") or {}
    fixed_new = {k: v for k, v in spec.items() if k not in _POD_MUTABLE_SPEC}
    fixed_old = {k: v for k, v in old_spec.items() if k not in _POD_MUTABLE_SPEC}
    if fixed_new != fixed_old or _without_images(spec.get("containers")) != _without_images(old_spec.get("containers")):
        errors.append(
            (
                "spec",
                "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
                "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` "
                "(only additions to existing tolerations) or `spec.terminationGracePeriodSeconds`",
            )
        )
    return errors


def _validate_workload(obj: dict[str, Any], old: dict[str, Any] | None) -> list[tuple[str, str]]:
    spec = obj.get("spec") or {}
    selector = spec.get("selector")
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if not selector:
        return [("spec.selector", "Required value")]
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return [
            ("spec.template.metadata.labels", 'Invalid value: "object": `selector` does not match template `labels`')
        ]
    if old is not None and selector != (old.get("spec") or {}).get("selector"):
        return [("spec.selector", 'Invalid value: "object": field is immutable')]
    return []


class Admission:
    """Defaulting and validation; holds the one piece of state defaulting needs, the next free cluster IP."""

    def __init__(self, clock: Callable[[], datetime]) -> None:
        self.clock = clock
        self._next_cluster_ip = 10
        #: mutating admission plugins run before validation (the ServiceAccount plugin): raise ApiError
        self.mutating: list[Callable[[ResourceType, dict[str, Any], dict[str, Any] | None], None]] = []
        #: validating admission plugins run after validation (RBAC escalation, Pod Security): raise ApiError
        self.plugins: list[Callable[[ResourceType, dict[str, Any], dict[str, Any] | None], None]] = []

    def admit(
        self, rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None, *, defaults_first: bool = True
    ) -> dict[str, Any]:
        """The object as it will be stored, or ApiError (422 Invalid) for every rule it breaks."""
        name = obj["metadata"].get("name", "")
        if rtype.admit is not None:
            obj = rtype.admit(obj, old, defaults_first)
        for plugin in self.mutating:
            plugin(rtype, obj, old)
        errors = _validate(rtype, obj, old)
        if errors:
            raise invalid(rtype.kind, rtype.group, name, errors)
        for plugin in self.plugins:
            plugin(rtype, obj, old)
        return obj

    def default_on_create(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        key = rtype.storage_key
        if key == PODS:
            _default_pod(obj, self.clock())
        elif key == SERVICES:
            self._default_service(obj)
        elif key == NAMESPACES:
            obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
            obj["status"] = {"phase": "Active"}
            obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
        elif rtype.group == "apps":
            _default_workload(rtype, obj)
        elif key == priority.PRIORITY_CLASSES:
            priority.default_class(obj)
        elif rtype.status_subresource and rtype.is_custom:
            obj.pop("status", None)  # custom resources: status is written through /status only

    def _default_service(self, obj: dict[str, Any]) -> None:
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        if "clusterIP" not in spec:
            self._next_cluster_ip += 1
            spec["clusterIP"] = f"10.96.{self._next_cluster_ip // 250}.{self._next_cluster_ip % 250 + 1}"
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
        for port in spec.get("ports") or []:
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
        obj["status"] = {"loadBalancer": {}}


def _default_pod(obj: dict[str, Any], now: datetime) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("securityContext", {})
    for container in spec.get("containers") or []:
        container.setdefault("imagePullPolicy", "IfNotPresent")
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("resources", {})
        for port in container.get("ports") or []:
            port.setdefault("protocol", "TCP")
    obj["status"] = {"phase": "Pending", "qosClass": _qos_class(obj)}
    if spec.get("nodeName"):
        scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": format_time(now)}
        obj["status"]["conditions"] = [scheduled]


def _default_workload(rtype: ResourceType, obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    spec.setdefault("revisionHistoryLimit", 10)
    if rtype.kind == "Deployment":
        spec.setdefault("progressDeadlineSeconds", 600)
        spec.setdefault(
            "strategy", {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}
        )
    obj["status"] = {}
