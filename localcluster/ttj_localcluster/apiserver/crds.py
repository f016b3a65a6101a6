"""CustomResourceDefinitions: checking a CRD when it is written, serving its resource (each served version, with
its schema, subresources and printer columns), and cleaning up its objects when it is deleted."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from datetime import datetime
from typing import Any

from ttj_contract import format_time

from . import celcost
from .core import ApiCore
from .errors import invalid
from .resources import ResourceType, ScalePaths, StorageKey
from .schema import CrdSchema
from .store import WatchEvent

CRDS: StorageKey = ("apiextensions.k8s.io", "customresourcedefinitions")
CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"


def _soon(callback: Callable[[StorageKey], None], arg: StorageKey) -> None:
    """Run after the current write has finished (controllers never write from inside another write)."""
    try:
        asyncio.get_running_loop().call_soon(callback, arg)
    except RuntimeError:
        callback(arg)


def _json_path(path: str | None) -> str | None:
    return path.lstrip(".") if path else None


class CrdManager:
    def __init__(self, core: ApiCore) -> None:
        self.core = core
        rtype = core.registry.get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        assert rtype is not None
        rtype.admit = self._admit_crd
        core.on_write.setdefault(CRDS, []).append(self._on_crd_written)
        core.store.listeners.append(self._on_event)
        #: storage key of a deleting CRD's objects → CRD name
        self._terminating: dict[StorageKey, str] = {}
        self._schemas: dict[tuple[str, str], CrdSchema] = {}

    def _admit_crd(self, crd: dict[str, Any], old: dict[str, Any] | None, _defaults_first: bool) -> dict[str, Any]:
        name = crd["metadata"]["name"]
        spec = crd.get("spec") or {}
        errors = _definition_errors(crd)
        errors.extend(self._compile_schemas(crd))
        if old is not None and old["spec"].get("group") != (spec.get("group") or ""):
            errors.append(("spec.group", 'Invalid value: "object": field is immutable'))
        if errors:
            raise invalid("CustomResourceDefinition", "apiextensions.k8s.io", name, errors)
        crd = copy.deepcopy(crd)
        if old is None:
            crd["metadata"].setdefault("finalizers", [])
            if CLEANUP_FINALIZER not in crd["metadata"]["finalizers"]:
                crd["metadata"]["finalizers"].append(CLEANUP_FINALIZER)
        names = spec.get("names") or {}
        accepted = _accepted_names(names)
        spec["names"] = {**names, "singular": accepted["singular"], "listKind": accepted["listKind"]}
        crd["spec"] = spec
        crd["status"] = {
            "conditions": _crd_conditions(crd, old, self.core.clock),
            "acceptedNames": accepted,
            "storedVersions": [v["name"] for v in spec.get("versions") or [] if v.get("storage")],
        }
        return crd

    def _compile_schemas(self, crd: dict[str, Any]) -> list[tuple[str, str]]:
        """Compiles and keeps each version's schema; the errors of the schemas kube checks."""
        name = crd["metadata"]["name"]
        errors: list[tuple[str, str]] = []
        # a schema every version shares is reported once, where kube reports it (spec.validation)
        reported = {version_name: where for version_name, where, _ in celcost.version_schemas(crd)}
        for version in (crd.get("spec") or {}).get("versions") or []:
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            if not isinstance(schema, dict):
                continue
            version_name = str(version.get("name", ""))
            compiled = CrdSchema(schema, reported.get(version_name, "spec.validation.openAPIV3Schema"))
            if version_name in reported:
                errors.extend(compiled.definition_errors)
            self._schemas[(name, version_name)] = compiled
        return errors

    def _on_crd_written(self, crd: dict[str, Any], old: dict[str, Any] | None) -> None:
        source = crd or old
        assert source is not None
        spec = source["spec"]
        group, plural = spec["group"], spec["names"]["plural"]
        if not crd:  # removed for good
            self.core.registry.remove_group_resource(group, plural)
            self._terminating.pop((group, plural), None)
            return
        self.core.registry.remove_group_resource(group, plural)
        for version in spec["versions"]:
            if not version.get("served", True):
                continue
            self.core.registry.add(self._resource_type(crd, version))
        if crd["metadata"].get("deletionTimestamp"):
            self._terminating[(group, plural)] = crd["metadata"]["name"]
            _soon(self._cleanup, (group, plural))

    def _resource_type(self, crd: dict[str, Any], version: dict[str, Any]) -> ResourceType:
        spec = crd["spec"]
        names = spec["names"]
        subresources = version.get("subresources") or {}
        scale = subresources.get("scale")
        compiled = self._schemas.get((crd["metadata"]["name"], version["name"]))
        if compiled is None:
            compiled = CrdSchema(version["schema"]["openAPIV3Schema"])
        kind, group = names["kind"], spec["group"]

        def admit(obj: dict[str, Any], old: dict[str, Any] | None, defaults_first: bool) -> dict[str, Any]:
            admitted, errors = compiled.admit(obj, old, defaults_first)
            if errors:
                raise invalid(kind, group, obj["metadata"].get("name", ""), errors)
            return admitted

        return ResourceType(
            group=group,
            version=version["name"],
            kind=kind,
            plural=names["plural"],
            singular=names.get("singular") or kind.lower(),
            namespaced=spec.get("scope") == "Namespaced",
            short_names=tuple(names.get("shortNames") or ()),
            categories=tuple(names.get("categories") or ()),
            status_subresource="status" in subresources,
            scale=ScalePaths(
                _json_path(scale["specReplicasPath"]) or "spec.replicas",
                _json_path(scale["statusReplicasPath"]) or "status.replicas",
                _json_path(scale.get("labelSelectorPath")),
            )
            if scale
            else None,
            has_generation=True,
            is_custom=True,
            admit=admit,
            printer_columns=list(version.get("additionalPrinterColumns") or []),
            schema=version["schema"]["openAPIV3Schema"],
        )

    def _on_event(self, event: WatchEvent) -> None:
        if event.type == "DELETED" and event.storage_key in self._terminating:
            _soon(self._cleanup, event.storage_key)

    def _cleanup(self, storage_key: StorageKey) -> None:
        """Delete every object of a deleting CRD; when none is left, let the CRD go."""
        remaining = list(self.core.store.items(storage_key))
        for obj in remaining:
            if not obj["metadata"].get("deletionTimestamp"):
                self.core.delete_object(storage_key, obj)
        if not list(self.core.store.items(storage_key)):
            name = self._terminating.get(storage_key)
            crd = self.core.store.get(CRDS, "", name) if name else None
            if crd is not None:
                self.core.remove_finalizer(CRDS, crd, CLEANUP_FINALIZER)


def _definition_errors(crd: dict[str, Any]) -> list[tuple[str, str]]:
    """What kube's validation says of the CRD's names, scope and versions (not of its schemas' content)."""
    name = crd["metadata"]["name"]
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = spec.get("group") or ""
    errors: list[tuple[str, str]] = []
    if not group:
        errors.append(("spec.group", "Required value"))
    for field in ("plural", "kind"):
        if not names.get(field):
            errors.append((f"spec.names.{field}", "Required value"))
    if names.get("plural") and group and name != f"{names['plural']}.{group}":
        errors.append(("metadata.name", f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group'))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        errors.append(
            ("spec.scope", f'Unsupported value: "{spec.get("scope")}": supported values: "Cluster", "Namespaced"')
        )
    versions = spec.get("versions") or []
    if not versions:
        errors.append(("spec.versions", "Invalid value: null: must have exactly one version marked as storage version"))
    elif sum(1 for v in versions if v.get("storage")) != 1:
        errors.append(
            ("spec.versions", 'Invalid value: "array": must have exactly one version marked as storage version')
        )
    for index, version in enumerate(versions):
        if not isinstance((version.get("schema") or {}).get("openAPIV3Schema"), dict):
            errors.append((f"spec.versions[{index}].schema.openAPIV3Schema", "Required value: schemas are required"))
    return errors


def _accepted_names(names: dict[str, Any]) -> dict[str, Any]:
    """status.acceptedNames: the spec's names with kube's defaults for singular and listKind."""
    accepted = {
        "plural": names["plural"],
        "singular": names.get("singular") or names["kind"].lower(),
        "kind": names["kind"],
        "listKind": names.get("listKind") or names["kind"] + "List",
    }
    for optional in ("shortNames", "categories"):
        if names.get(optional):
            accepted[optional] = names[optional]
    return accepted


def _crd_conditions(
    crd: dict[str, Any], old: dict[str, Any] | None, clock: Callable[[], datetime]
) -> list[dict[str, Any]]:
    """NamesAccepted and Established (since they first were), and Terminating while the CRD is deleted."""
    previous = {c["type"]: c for c in ((old or {}).get("status") or {}).get("conditions") or []}
    conditions = []
    for ctype, reason, message in (
        ("NamesAccepted", "NoConflicts", "no conflicts found"),
        ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
    ):
        since = previous.get(ctype, {}).get("lastTransitionTime") or format_time(clock())
        conditions.append(
            {"type": ctype, "status": "True", "reason": reason, "message": message, "lastTransitionTime": since}
        )
    if crd["metadata"].get("deletionTimestamp"):
        conditions.append(
            {
                "type": "Terminating",
                "status": "True",
                "reason": "InstanceDeletionInProgress",
                "message": "CustomResource deletion is in progress",
                "lastTransitionTime": format_time(clock()),
            }
        )
    return conditions
