"""What the API does with objects: create, read, update, patch, delete with Kubernetes' metadata rules
(uid, generation, resourceVersion conflicts, finalizers, graceful pod deletion). Defaulting and validation
are admission.py's, binding and scale subresources.py's, HTTP handlers.py's; CRDs, garbage collection and
namespaces have their own modules."""

from __future__ import annotations

import base64
import copy
import json
import random
import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from ttj_contract import format_time

from . import patching, quantityfields, timefields
from .admission import Admission
from .errors import STALE, ApiError, already_exists, bad_request, conflict, invalid, not_found
from .resources import NAMESPACES, PODS, Registry, ResourceType, StorageKey
from .selectors import Matcher
from .store import Store

_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"
#: what stays the server's in metadata whatever a client writes
_SERVER_OWNED = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "selfLink",
)


def _check_path_segment_name(rtype: ResourceType, name: Any) -> None:
    """RBAC objects' names need only be usable in a URL (``system:discovery``), as kube validates them."""
    problem = None
    if not isinstance(name, str) or name in (".", ".."):
        problem = f"may not be '{name}'"
    elif "/" in name or "%" in name:
        problem = f"may not contain '{'/' if '/' in name else '%'}'"
    if problem:
        raise invalid(
            rtype.kind, rtype.group, str(name), [("metadata.name", f"Invalid value: {json.dumps(name)}: {problem}")]
        )


def _check_uid(rtype: ResourceType, name: str, wanted: Any, old: dict[str, Any]) -> None:
    """As kube-apiserver: an update naming another uid than the stored object's fails its precondition, 409."""
    if wanted and wanted != old["metadata"]["uid"]:
        raise conflict(
            rtype.plural,
            rtype.group,
            name,
            f"Precondition failed: UID in precondition: {wanted}, UID in object meta: {old['metadata']['uid']}",
        )


def _check_patched_uid(rtype: ResourceType, name: str, patched: dict[str, Any], old: dict[str, Any]) -> None:
    """A patch carries no precondition in kube-apiserver: a patched uid unlike the stored one fails validation
    (422, ``metadata.uid`` is immutable), twice: in the checks common to every kind and in the kind's own."""
    wanted = (patched.get("metadata") or {}).get("uid")
    if wanted and wanted != old["metadata"]["uid"]:
        cause = ("metadata.uid", f"Invalid value: {json.dumps(wanted)}: field is immutable")
        raise invalid(rtype.kind, rtype.group, name, [cause, cause])


def _spec_part(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


class ApiCore:
    def __init__(
        self, store: Store, registry: Registry, clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> None:
        self.store = store
        self.registry = registry
        #: the time stamped into creationTimestamp and deletionTimestamp (a test may hold it still)
        self.clock = clock
        self.admission = Admission(clock)
        self._rng = random.Random()
        #: called after an object with this storage key is written or removed (CRD manager, GC)
        self.on_write: dict[StorageKey, list[Callable[[dict[str, Any], dict[str, Any] | None], None]]] = {}

    # -- helpers ----------------------------------------------------------------------------------

    def _rtype_for(self, storage_key: StorageKey) -> ResourceType | None:
        versions = self.registry.versions_of(storage_key)
        return versions[0] if versions else None

    def _output(self, rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """A stored object as the requested version presents it (CR versions differ only in apiVersion; a view
        such as events.k8s.io Events converts fields)."""
        if rtype.from_storage is not None:
            return rtype.from_storage(obj)
        if obj.get("apiVersion") != rtype.api_version:
            return {**obj, "apiVersion": rtype.api_version}
        return obj

    @staticmethod
    def _storage_form(rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        return rtype.to_storage(obj) if rtype.to_storage is not None else obj

    @staticmethod
    def _decode_times(rtype: ResourceType, body: dict[str, Any]) -> None:
        """Time fields of a built-in object as kube writes them back (UTC, its precision); 400 as
        kube-apiserver's decoder answers a time or a quantity Go cannot parse."""
        if rtype.is_custom:
            return
        error = timefields.decode(rtype.group, rtype.kind, body) or quantityfields.decode(rtype.group, rtype.kind, body)
        if error is None:
            return
        sent_kind = body.get("kind") if isinstance(body.get("kind"), str) and body.get("kind") else rtype.kind
        api_version = body.get("apiVersion")
        version = api_version.rpartition("/")[2] if isinstance(api_version, str) and api_version else rtype.version
        raise bad_request(f"{sent_kind} in version {json.dumps(version)} cannot be handled as a {rtype.kind}: {error}")

    @staticmethod
    def _decode_patched_times(rtype: ResourceType, patched: dict[str, Any]) -> None:
        """The same for a patch's result, where kube answers 422 with the field ``patch``."""
        if rtype.is_custom:
            return
        error = timefields.decode(rtype.group, rtype.kind, patched) or quantityfields.decode(
            rtype.group, rtype.kind, patched
        )
        if error is not None:
            rendered = json.dumps(json.dumps(patched, separators=(",", ":")))
            raise invalid("", "", "", [("patch", f"Invalid value: {rendered}: {error}")])

    def _require_namespace(self, rtype: ResourceType, namespace: str, name: str) -> None:
        ns = self.store.get(NAMESPACES, "", namespace)
        if ns is None:
            raise not_found("namespaces", "", namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise ApiError(
                403,
                "Forbidden",
                f'{rtype.plural} "{name}" is forbidden: unable to create new content in namespace {namespace} '
                "because it is being terminated",
                name=name,
                group=rtype.group,
                kind=rtype.plural,
            )

    # -- reads ------------------------------------------------------------------------------------

    def get(self, rtype: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        obj = self.store.get(rtype.storage_key, namespace, name)
        if obj is None:
            raise not_found(rtype.plural, rtype.group, name)
        return self._output(rtype, obj)

    def list_objects(
        self,
        rtype: ResourceType,
        namespace: str | None,
        matchers: list[Matcher],
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> tuple[list[dict[str, Any]], str, str | None]:
        """Matching objects in (namespace, name) order, the list's resourceVersion and a continue token."""
        items = sorted(
            self.store.items(rtype.storage_key, namespace),
            key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]),
        )
        rv = str(self.store.resource_version)
        start_after: tuple[str, str] | None = None
        if continue_token:
            try:
                decoded = json.loads(base64.urlsafe_b64decode(continue_token.encode()))
                start_after, rv = (decoded["ns"], decoded["name"]), decoded["rv"]
            except (ValueError, KeyError, TypeError):
                raise bad_request("continue key is not valid") from None
        selected = []
        for obj in items:
            meta = obj["metadata"]
            if start_after is not None and (meta.get("namespace", ""), meta["name"]) <= start_after:
                continue
            shown = self._output(rtype, obj)  # selectors name the fields of the API asked, as in kube
            if all(m(shown) for m in matchers):
                selected.append(shown)
        token = None
        if limit and len(selected) > limit:
            selected = selected[:limit]
            last = selected[-1]["metadata"]
            token = base64.urlsafe_b64encode(
                json.dumps({"ns": last.get("namespace", ""), "name": last["name"], "rv": rv}).encode()
            ).decode()
        return selected, rv, token

    # -- create -----------------------------------------------------------------------------------

    def create(self, rtype: ResourceType, namespace: str, body: Any, *, dry_run: bool = False) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise bad_request("the body of the request must be a JSON object")
        obj = copy.deepcopy(body)
        self._decode_times(rtype, obj)
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            meta = obj["metadata"] = {}
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise invalid(
                    rtype.kind, rtype.group, "", [("metadata.name", "Required value: name or generateName is required")]
                )
            meta["name"] = prefix + "".join(self._rng.choice(_SUFFIX_CHARS) for _ in range(5))
        name = meta["name"]
        if rtype.group == "rbac.authorization.k8s.io":
            _check_path_segment_name(rtype, name)
        elif not isinstance(name, str) or len(name) > 253 or not _NAME_RE.match(name):
            raise invalid(
                rtype.kind,
                rtype.group,
                str(name),
                [
                    (
                        "metadata.name",
                        f"Invalid value: {json.dumps(name)}: a lowercase RFC 1123 subdomain must consist of "
                        "lower case alphanumeric characters, '-' or '.', "
                        "and must start and end with an alphanumeric character",
                    )
                ],
            )
        if rtype.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace
            self._require_namespace(rtype, namespace, name)
        else:
            meta.pop("namespace", None)
        if self.store.get(rtype.storage_key, namespace if rtype.namespaced else "", name) is not None:
            raise already_exists(rtype.plural, rtype.group, name)
        for key in _SERVER_OWNED:
            meta.pop(key, None)
        meta.pop("resourceVersion", None)
        meta.pop("managedFields", None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = format_time(self.clock())
        if rtype.has_generation or rtype.is_custom:
            meta["generation"] = 1
        obj["apiVersion"] = rtype.api_version
        obj["kind"] = rtype.kind
        self.admission.default_on_create(rtype, obj)
        obj = self.admission.admit(rtype, obj, None)
        if dry_run:
            return obj
        stored = self.store.put(rtype.storage_key, self._storage_form(rtype, obj), None)
        self.notify(rtype, stored, None)
        return self._output(rtype, stored)

    # -- update / patch ---------------------------------------------------------------------------

    def update(
        self,
        rtype: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise bad_request("the body of the request must be a JSON object")
        body = copy.deepcopy(body)
        self._decode_times(rtype, body)
        ns = namespace if rtype.namespaced else ""
        old = self.store.get(rtype.storage_key, ns, name)
        if old is None:
            raise not_found(rtype.plural, rtype.group, name)
        meta = body.get("metadata") or {}
        if meta.get("name") not in (None, name):
            raise bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
            )
        wanted_rv = meta.get("resourceVersion")
        if wanted_rv and wanted_rv != old["metadata"]["resourceVersion"]:
            raise conflict(rtype.plural, rtype.group, name, STALE)
        _check_uid(rtype, name, meta.get("uid"), old)
        return self.write_update(rtype, old, body, subresource=subresource, dry_run=dry_run)

    def write_update(
        self,
        rtype: ResourceType,
        old: dict[str, Any],
        new: dict[str, Any],
        *,
        subresource: str | None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """``old`` is the stored object, ``new`` the object as the API of ``rtype`` presents it."""
        stored_old = old
        if rtype.from_storage is not None:
            old = rtype.from_storage(stored_old)
        old_meta = old["metadata"]
        new = _with_server_owned_parts(rtype, old, new, subresource)
        new = self.admission.admit(rtype, new, old, defaults_first=subresource != "scale")
        if "generation" in old_meta and subresource != "status" and _spec_part(new) != _spec_part(old):
            new["metadata"]["generation"] = old_meta["generation"] + 1
        if new == old:
            return self._output(rtype, old)  # a no-op write changes nothing, not even the resourceVersion
        if dry_run:
            return new
        if (
            new["metadata"].get("deletionTimestamp")
            and not new["metadata"].get("finalizers")
            and not self._graceful_pending(rtype, new)
        ):
            final = self.store.remove(rtype.storage_key, self._storage_form(rtype, new))
            self.notify(rtype, None, final)
            return self._output(rtype, final)
        stored = self.store.put(rtype.storage_key, self._storage_form(rtype, new), stored_old)
        self.notify(rtype, stored, stored_old)
        return self._output(rtype, stored)

    def _graceful_pending(self, rtype: ResourceType, obj: dict[str, Any]) -> bool:
        """A pod on a node waits for its kubelet to finish deletion (it deletes with grace 0)."""
        if rtype.storage_key == NAMESPACES:
            return bool((obj.get("spec") or {}).get("finalizers"))  # the namespace controller empties it first
        return rtype.storage_key == PODS and bool(obj["metadata"].get("deletionGracePeriodSeconds"))

    def patch(
        self,
        rtype: ResourceType,
        namespace: str,
        name: str,
        content_type: str,
        patch_body: Any,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        ns = namespace if rtype.namespaced else ""
        old = self.store.get(rtype.storage_key, ns, name)
        if old is None:
            raise not_found(rtype.plural, rtype.group, name)
        patched = patching.apply_patch(
            content_type, self._output(rtype, old), patch_body, strategic_allowed=not rtype.is_custom
        )
        if not isinstance(patched, dict):
            raise bad_request("the patch did not produce an object")
        self._decode_patched_times(rtype, patched)
        wanted_rv = (patched.get("metadata") or {}).get("resourceVersion")
        if wanted_rv and wanted_rv != old["metadata"]["resourceVersion"]:
            raise conflict(rtype.plural, rtype.group, name, STALE)
        if not (subresource == "status" and rtype.is_custom):  # a custom resource's status keeps the old metadata
            _check_patched_uid(rtype, name, patched, old)
        return self.write_update(rtype, old, patched, subresource=subresource, dry_run=dry_run)

    # -- delete -----------------------------------------------------------------------------------

    def delete(
        self,
        rtype: ResourceType,
        namespace: str,
        name: str,
        options: dict[str, Any],
    ) -> dict[str, Any]:
        """Delete now, or start a graceful/finalized deletion; returns the object (or a Success Status)."""
        ns = namespace if rtype.namespaced else ""
        obj = self.store.get(rtype.storage_key, ns, name)
        if obj is None:
            raise not_found(rtype.plural, rtype.group, name)
        meta = obj["metadata"]
        _check_delete_preconditions(rtype, name, meta, options.get("preconditions") or {})
        if options.get("dryRun"):
            return self._output(rtype, obj)
        finalizers = _finalizers_of_propagation(meta, _propagation_policy(options))
        grace = self._grace_period(rtype, obj, options.get("gracePeriodSeconds"))
        if meta.get("deletionTimestamp"):
            if (
                grace is not None
                and rtype.storage_key == PODS
                and grace < (meta.get("deletionGracePeriodSeconds") or 0)
            ):
                return self._mark_deleting(rtype, obj, finalizers, grace)
            return self._output(rtype, obj)
        needs_controller = rtype.storage_key == NAMESPACES
        if finalizers or (grace and rtype.storage_key == PODS) or needs_controller:
            return self._mark_deleting(rtype, obj, finalizers, grace or 0)
        final = self.store.remove(rtype.storage_key, obj)
        self.notify(rtype, None, final)
        if rtype.storage_key == PODS:
            return self._output(rtype, final)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": name, "group": rtype.group, "kind": rtype.plural, "uid": meta["uid"]},
        }

    def _grace_period(self, rtype: ResourceType, obj: dict[str, Any], requested: Any) -> int | None:
        if rtype.storage_key != PODS:
            return None
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
            return 0  # nothing runs it, so nothing to wait for
        if requested is not None:
            return max(0, int(requested))
        return int(spec.get("terminationGracePeriodSeconds", 30))

    def _mark_deleting(
        self, rtype: ResourceType, obj: dict[str, Any], finalizers: list[str], grace: int
    ) -> dict[str, Any]:
        new = copy.deepcopy(obj)
        meta = new["metadata"]
        if finalizers:
            meta["finalizers"] = finalizers
        if rtype.storage_key == PODS and grace == 0 and not finalizers:
            final = self.store.remove(rtype.storage_key, obj)
            self.notify(rtype, None, final)
            return self._output(rtype, final)
        if not meta.get("deletionTimestamp") or rtype.storage_key == PODS:
            meta["deletionTimestamp"] = format_time(self.clock() + timedelta(seconds=grace))
        meta["deletionGracePeriodSeconds"] = grace
        if "generation" in meta and not obj["metadata"].get("deletionTimestamp"):
            meta["generation"] += 1
        if rtype.storage_key == NAMESPACES:
            new["status"] = {**(new.get("status") or {}), "phase": "Terminating"}
        stored = self.store.put(rtype.storage_key, new, obj)
        self.notify(rtype, stored, obj)
        return self._output(rtype, stored)

    def remove_finalizer(self, storage_key: StorageKey, obj: dict[str, Any], finalizer: str) -> None:
        """Used by the in-process controllers (GC, namespaces) to finish what they blocked."""
        rtype = self._rtype_for(storage_key)
        if rtype is None:
            return
        current = self.store.get(storage_key, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if current is None or finalizer not in (current["metadata"].get("finalizers") or []):
            return
        new = copy.deepcopy(current)
        new["metadata"]["finalizers"] = [f for f in new["metadata"]["finalizers"] if f != finalizer]
        if not new["metadata"]["finalizers"]:
            del new["metadata"]["finalizers"]
        self.write_update(rtype, current, new, subresource=None)

    def delete_object(self, storage_key: StorageKey, obj: dict[str, Any], policy: str = "Background") -> None:
        """Controller-side delete of a stored object (ignores a concurrent removal)."""
        rtype = self._rtype_for(storage_key)
        if rtype is None:
            return
        try:
            self.delete(
                rtype, obj["metadata"].get("namespace", ""), obj["metadata"]["name"], {"propagationPolicy": policy}
            )
        except ApiError as exc:
            if exc.code != 404:
                raise

    def notify(self, rtype: ResourceType, new: dict[str, Any] | None, old: dict[str, Any] | None) -> None:
        for callback in self.on_write.get(rtype.storage_key, ()):
            if new is not None:
                callback(new, old)
            elif old is not None:
                callback({}, old)  # removed: the first argument is empty


def _with_server_owned_parts(
    rtype: ResourceType, old: dict[str, Any], new: dict[str, Any], subresource: str | None
) -> dict[str, Any]:
    """``new`` with what a client cannot change through this write taken from ``old``: all but the status on
    the status subresource; else the status (when it has its own subresource), the server-owned metadata,
    the name and namespace, and a bound pod's node. Fills in ``new`` itself outside the status subresource."""
    old_meta = old["metadata"]
    if subresource == "status":
        new = {**copy.deepcopy(old), "status": new.get("status")}
        if new["status"] is None:
            new.pop("status")
    else:
        new_meta = new.get("metadata")
        if not isinstance(new_meta, dict):
            new["metadata"] = new_meta = {}
        if rtype.status_subresource:
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)
        for key in _SERVER_OWNED:
            if key in old_meta:
                new_meta[key] = old_meta[key]
            else:
                new_meta.pop(key, None)
        new_meta["name"] = old_meta["name"]
        if "namespace" in old_meta:
            new_meta["namespace"] = old_meta["namespace"]
        new_meta.pop("managedFields", None)
        if rtype.storage_key == PODS and (old.get("spec") or {}).get("nodeName") and isinstance(new.get("spec"), dict):
            new["spec"].setdefault("nodeName", old["spec"]["nodeName"])
    new["apiVersion"] = old["apiVersion"]
    new["kind"] = old["kind"]
    new["metadata"]["resourceVersion"] = old_meta["resourceVersion"]
    return new


def _check_delete_preconditions(
    rtype: ResourceType, name: str, meta: dict[str, Any], preconditions: dict[str, Any]
) -> None:
    """A delete whose preconditions (uid, resourceVersion) the object no longer meets is a conflict."""
    if preconditions.get("uid") and preconditions["uid"] != meta["uid"]:
        raise conflict(
            rtype.plural,
            rtype.group,
            name,
            f"Precondition failed: UID in precondition: {preconditions['uid']}, UID in object meta: {meta['uid']}",
        )
    if preconditions.get("resourceVersion") and preconditions["resourceVersion"] != meta["resourceVersion"]:
        raise conflict(
            rtype.plural,
            rtype.group,
            name,
            f"Precondition failed: ResourceVersion in precondition: {preconditions['resourceVersion']}, "
            f"ResourceVersion in object meta: {meta['resourceVersion']}",
        )


def _propagation_policy(options: dict[str, Any]) -> str | None:
    """The delete's propagationPolicy, ``orphanDependents: true`` read as Orphan; None: the default."""
    policy = options.get("propagationPolicy")
    if policy is None and options.get("orphanDependents") is True:
        policy = "Orphan"
    if policy not in (None, "Background", "Foreground", "Orphan"):
        raise bad_request(f"unsupported propagationPolicy {policy!r}")
    return cast("str | None", policy)


def _finalizers_of_propagation(meta: dict[str, Any], policy: str | None) -> list[str]:
    """The object's finalizers with the one the garbage collector acts on for ``policy`` (unless it has one)."""
    finalizers = list(meta.get("finalizers") or [])
    if policy == "Foreground" and "foregroundDeletion" not in finalizers and "orphan" not in finalizers:
        finalizers.append("foregroundDeletion")
    elif policy == "Orphan" and "orphan" not in finalizers and "foregroundDeletion" not in finalizers:
        finalizers.append("orphan")
    return finalizers
