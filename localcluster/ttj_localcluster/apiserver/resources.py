"""Which resources the server serves: the built-in kinds, those CRDs add, and the discovery documents."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import events

#: Where one resource's objects are kept: (group, plural). All served versions of a CRD share it.
StorageKey = tuple[str, str]
NAMESPACES: StorageKey = ("", "namespaces")
PODS: StorageKey = ("", "pods")
SERVICES: StorageKey = ("", "services")


@dataclass(frozen=True)
class ScalePaths:
    """Where the ``scale`` subresource reads and writes replicas (dotted JSON paths without the leading dot)."""

    spec_replicas: str
    status_replicas: str
    label_selector: str | None = None


@dataclass
class ResourceType:
    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    status_subresource: bool = False
    scale: ScalePaths | None = None
    extra_subresources: tuple[str, ...] = ()
    #: metadata.generation is kept and bumped on spec changes
    has_generation: bool = False
    #: served from a CustomResourceDefinition (JSON/merge patches only, status only via /status)
    is_custom: bool = False
    #: set for custom resources: validates, defaults and prunes a whole object (new, old, defaults before
    #: validating: False on the scale subresource, as kube); raises ApiError
    admit: Callable[[dict[str, Any], dict[str, Any] | None, bool], dict[str, Any]] | None = None
    printer_columns: list[dict[str, Any]] = field(default_factory=list)
    #: a custom resource's openAPIV3Schema, for the OpenAPI documents (kubectl explain)
    schema: dict[str, Any] | None = None
    #: another resource's storage when this one is a view of it (events.k8s.io Events are core Events)
    storage: StorageKey | None = None
    #: for a view: the stored form → this API's form, and back
    from_storage: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    to_storage: Callable[[dict[str, Any]], dict[str, Any]] | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def storage_key(self) -> StorageKey:
        return self.storage or (self.group, self.plural)

    @property
    def subresources(self) -> list[str]:
        subs = list(self.extra_subresources)
        if self.status_subresource:
            subs.append("status")
        if self.scale is not None:
            subs.append("scale")
        return subs

    def discovery_entries(self) -> list[dict[str, Any]]:
        verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
        main: dict[str, Any] = {
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": verbs,
        }
        if self.short_names:
            main["shortNames"] = list(self.short_names)
        if self.categories:
            main["categories"] = list(self.categories)
        entries = [main]
        for sub in self.subresources:
            sub_kind = {"scale": "Scale", "binding": "Binding", "eviction": "Eviction", "token": "TokenRequest"}.get(
                sub, self.kind
            )
            sub_verbs = {"binding": ["create"], "eviction": ["create"], "log": ["get"], "token": ["create"]}.get(
                sub, ["get", "patch", "update"]
            )
            entry: dict[str, Any] = {
                "name": f"{self.plural}/{sub}",
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": sub_kind,
                "verbs": sub_verbs,
            }
            if sub == "scale":
                entry.update(group="autoscaling", version="v1")
            elif sub == "token":
                entry.update(group="authentication.k8s.io", version="v1")
            elif sub == "eviction":
                entry.update(group="policy", version="v1")
            entries.append(entry)
        return entries


def _core(kind: str, plural: str, namespaced: bool = True, **kw: Any) -> ResourceType:
    return ResourceType("", "v1", kind, plural, kind.lower(), namespaced, **kw)


def builtin_types() -> list[ResourceType]:
    replicas = ScalePaths("spec.replicas", "status.replicas", None)
    return [
        _core(
            "Namespace",
            "namespaces",
            False,
            short_names=("ns",),
            status_subresource=True,
            extra_subresources=("finalize",),
        ),
        _core(
            "Pod",
            "pods",
            short_names=("po",),
            categories=("all",),
            status_subresource=True,
            extra_subresources=("binding", "eviction", "log"),
        ),
        _core("Service", "services", short_names=("svc",), categories=("all",), status_subresource=True),
        _core("Binding", "bindings"),
        _core("ConfigMap", "configmaps", short_names=("cm",)),
        _core("Secret", "secrets"),
        _core("Event", "events", short_names=("ev",)),
        _core("ServiceAccount", "serviceaccounts", short_names=("sa",), extra_subresources=("token",)),
        _core("Endpoints", "endpoints", short_names=("ep",)),
        _core("PersistentVolumeClaim", "persistentvolumeclaims", short_names=("pvc",), status_subresource=True),
        _core("Node", "nodes", False, short_names=("no",), status_subresource=True),
        ResourceType(
            "events.k8s.io",
            "v1",
            "Event",
            "events",
            "event",
            True,
            short_names=("ev",),
            storage=("", "events"),
            from_storage=events.to_events_v1,
            to_storage=events.to_core,
        ),
        ResourceType(
            "apps",
            "v1",
            "Deployment",
            "deployments",
            "deployment",
            True,
            short_names=("deploy",),
            categories=("all",),
            status_subresource=True,
            scale=replicas,
            has_generation=True,
        ),
        ResourceType(
            "apps",
            "v1",
            "ReplicaSet",
            "replicasets",
            "replicaset",
            True,
            short_names=("rs",),
            categories=("all",),
            status_subresource=True,
            scale=replicas,
            has_generation=True,
        ),
        ResourceType(
            "apps",
            "v1",
            "StatefulSet",
            "statefulsets",
            "statefulset",
            True,
            short_names=("sts",),
            categories=("all",),
            status_subresource=True,
            scale=replicas,
            has_generation=True,
        ),
        ResourceType("coordination.k8s.io", "v1", "Lease", "leases", "lease", True),
        ResourceType(
            "networking.k8s.io",
            "v1",
            "NetworkPolicy",
            "networkpolicies",
            "networkpolicy",
            True,
            short_names=("netpol",),
            has_generation=True,
        ),
        ResourceType("rbac.authorization.k8s.io", "v1", "Role", "roles", "role", True),
        *(
            ResourceType("authorization.k8s.io", "v1", kind, plural, kind.lower(), plural.startswith("local"))
            for plural, kind in (
                ("selfsubjectaccessreviews", "SelfSubjectAccessReview"),
                ("subjectaccessreviews", "SubjectAccessReview"),
                ("localsubjectaccessreviews", "LocalSubjectAccessReview"),
            )
        ),
        ResourceType("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", "rolebinding", True),
        ResourceType("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", "clusterrole", False),
        ResourceType(
            "rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", "clusterrolebinding", False
        ),
        ResourceType(
            "",
            "v1",
            "ResourceQuota",
            "resourcequotas",
            "resourcequota",
            True,
            short_names=("quota",),
            status_subresource=True,
        ),
        ResourceType(
            "scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", "priorityclass", False, short_names=("pc",)
        ),
        ResourceType(
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            "poddisruptionbudget",
            True,
            short_names=("pdb",),
            status_subresource=True,
            has_generation=True,
        ),
        ResourceType(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            "customresourcedefinition",
            False,
            short_names=("crd", "crds"),
            status_subresource=True,
            has_generation=True,
        ),
    ]


class Registry:
    """Resource types by (group, version, plural), plus the discovery documents built from them."""

    def __init__(self) -> None:
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        #: group → versions in preference order
        self._group_versions: dict[str, list[str]] = {}
        for rtype in builtin_types():
            self.add(rtype)

    def add(self, rtype: ResourceType) -> None:
        self._types[(rtype.group, rtype.version, rtype.plural)] = rtype
        versions = self._group_versions.setdefault(rtype.group, [])
        if rtype.version not in versions:
            versions.append(rtype.version)

    def remove_group_resource(self, group: str, plural: str) -> None:
        for key in [k for k in self._types if k[0] == group and k[2] == plural]:
            del self._types[key]
        served = {k[1] for k in self._types if k[0] == group}
        if group in self._group_versions:
            self._group_versions[group] = [v for v in self._group_versions[group] if v in served]
            if not self._group_versions[group]:
                del self._group_versions[group]

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._types.get((group, version, plural))

    def versions_of(self, storage_key: StorageKey) -> list[ResourceType]:
        return [t for t in self._types.values() if t.storage_key == storage_key]

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        group, _, version = api_version.rpartition("/")
        for rtype in self._types.values():
            if rtype.group == group and rtype.version == version and rtype.kind == kind:
                return rtype
        return None

    def has_group_version(self, group: str, version: str) -> bool:
        return version in self._group_versions.get(group, [])

    def all_types(self) -> list[ResourceType]:
        return list(self._types.values())

    # -- discovery documents --------------------------------------------------------------------

    def resource_list(self, group: str, version: str) -> dict[str, Any]:
        resources: list[dict[str, Any]] = []
        for (g, v, _p), rtype in sorted(self._types.items()):
            if (g, v) == (group, version):
                resources.extend(rtype.discovery_entries())
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }

    def group_list(self) -> dict[str, Any]:
        groups = []
        for group, versions in sorted(self._group_versions.items()):
            if not group:
                continue
            gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
            groups.append({"name": group, "versions": gvs, "preferredVersion": gvs[0]})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def group(self, group: str) -> dict[str, Any] | None:
        versions = self._group_versions.get(group)
        if not versions:
            return None
        gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": gvs, "preferredVersion": gvs[0]}
