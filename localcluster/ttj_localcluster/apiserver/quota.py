"""ResourceQuota as kube-apiserver's admission plugin and kube-controller-manager's quota controller keep it:
a create that would take a namespace past its quota is refused (403 ``exceeded quota``), a pod that omits a
cpu/memory request or limit a quota tracks is refused (403 ``failed quota: … must specify``), and each quota's
``status.used`` follows what the namespace holds.

Usage is computed from the store at each decision (kube adds the request to the last ``status.used``); the
figures agree once the controller has caught up, which here is at once.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from datetime import datetime
from decimal import Decimal
from typing import Any

from ttj_contract import parse_time

from . import validation
from .errors import ApiError

QUOTAS = ("", "resourcequotas")
PODS = ("", "pods")
#: Object counts with a legacy name (kube's ``pods``, ``services``, …) besides ``count/<plural>[.<group>]``.
LEGACY_COUNTS = {
    "pods": PODS,
    "services": ("", "services"),
    "configmaps": ("", "configmaps"),
    "secrets": ("", "secrets"),
    "persistentvolumeclaims": ("", "persistentvolumeclaims"),
    "replicationcontrollers": ("", "replicationcontrollers"),
}
#: Compute resources a container must state once a quota tracks them (kube's backward-compatibility rule).
MUST_SPECIFY = ("cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory")
_RESOURCE_NAME = re.compile(r"^(count/)?[a-z0-9]([-a-z0-9./]*[a-z0-9])?$")
_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))

Usage = dict[str, Decimal]
Errors = list[tuple[str, str]]


def validate(obj: dict[str, Any]) -> Errors:
    """ValidateResourceQuota: every hard limit is a quantity, never negative, under a resource name."""
    errors: Errors = []
    hard = (obj.get("spec") or {}).get("hard") or {}
    if not isinstance(hard, dict):
        return [("spec.hard", "Invalid value: must be a map of resource names to quantities")]
    for name, value in hard.items():
        if not isinstance(name, str) or not _RESOURCE_NAME.match(name):
            errors.append((f"spec.hard[{name}]", f'Invalid value: "{name}": must be a standard resource for quota'))
            continue
        parsed = validation.parse_quantity(value)
        if parsed is None:
            errors.append((f"spec.hard[{name}]", f'Invalid value: "{value}": must be a quantity'))
        elif parsed < 0:
            errors.append((f"spec.hard[{name}]", f'Invalid value: "{value}": must be greater than or equal to 0'))
    return errors


def counts_as_usage(pod: dict[str, Any], now: datetime) -> bool:
    """kube's QuotaV1Pod: a pod stops counting once it has ended, or once its deletion's grace has run out."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    deleting = parse_time(pod["metadata"].get("deletionTimestamp"))
    return deleting is None or now <= deleting


def _container_amount(container: dict[str, Any], kind: str, resource: str) -> Decimal | None:
    resources = container.get("resources") or {}
    amount = (resources.get(kind) or {}).get(resource)
    if amount is None and kind == "requests":
        amount = (resources.get("limits") or {}).get(resource)  # kube defaults a request to its limit
    return validation.parse_quantity(amount) if amount is not None else None


def pod_usage(pod: dict[str, Any]) -> Usage:
    """What one pod uses of a quota: 1 pod, and the sum of its containers' requests and limits."""
    usage: Usage = {"pods": Decimal(1), "count/pods": Decimal(1)}
    containers = (pod.get("spec") or {}).get("containers") or []
    names = {
        name
        for c in containers
        for kind in ("requests", "limits")
        for name in ((c.get("resources") or {}).get(kind) or {})
    }
    for resource in names:
        for kind in ("requests", "limits"):
            total = sum((_container_amount(c, kind, resource) or Decimal(0) for c in containers), Decimal(0))
            usage[f"{kind}.{resource}"] = total
            if kind == "requests" and resource in ("cpu", "memory", "ephemeral-storage"):
                usage[resource] = total
    return usage


def object_usage(storage_key: tuple[str, str], plural: str, group: str) -> Usage:
    """What any other object uses: one of its count."""
    usage = {f"count/{plural}" + (f".{group}" if group else ""): Decimal(1)}
    for legacy, key in LEGACY_COUNTS.items():
        if key == storage_key:
            usage[legacy] = Decimal(1)
    return usage


def namespace_usage(
    tracked: Iterable[str], objects: dict[tuple[str, str], list[dict[str, Any]]], now: datetime
) -> Usage:
    """The usage of every tracked resource, over what the namespace holds (``objects`` by storage key)."""
    used = {name: Decimal(0) for name in tracked}
    for storage_key, items in objects.items():
        group, plural = storage_key
        for obj in items:
            if storage_key == PODS:
                if not counts_as_usage(obj, now):
                    continue
                usage = pod_usage(obj)
            else:
                usage = object_usage(storage_key, plural, group)
            for name, amount in usage.items():
                if name in used:
                    used[name] += amount
    return used


def tracked_keys(tracked: Iterable[str]) -> set[tuple[str, str]]:
    """The storage keys whose objects count toward these resource names."""
    keys: set[tuple[str, str]] = set()
    for name in tracked:
        if name in LEGACY_COUNTS:
            keys.add(LEGACY_COUNTS[name])
        elif name.startswith("count/"):
            plural, _, group = name.removeprefix("count/").partition(".")
            keys.add((group, plural))
        else:
            keys.add(PODS)  # compute resources are the pods'
    return keys


def admit(
    obj: dict[str, Any],
    usage: Usage,
    quotas: Iterable[dict[str, Any]],
    used_of: Callable[[dict[str, Any]], Usage],
    resource: str,
) -> None:
    """Refuse ``obj`` (whose use of a quota is ``usage``) when a quota of its namespace would be exceeded.
    ``used_of(quota)`` is what the namespace already uses of that quota's resources."""
    name = obj["metadata"].get("name", "")
    for quota in sorted(quotas, key=lambda q: q["metadata"]["name"]):
        hard = {
            k: validation.parse_quantity(v) or Decimal(0)
            for k, v in ((quota.get("spec") or {}).get("hard") or {}).items()
        }
        quota_name = quota["metadata"]["name"]
        if resource == "pods":
            missing = _missing_requests(obj, set(hard))
            if missing:
                raise ApiError(
                    403,
                    "Forbidden",
                    f'pods "{name}" is forbidden: failed quota: {quota_name}: must specify {missing}',
                    name=name,
                    kind="pods",
                )
        requested = {k: v for k, v in usage.items() if k in hard}
        if not requested:
            continue
        used = used_of(quota)
        exceeded = sorted(k for k, v in requested.items() if used.get(k, Decimal(0)) + v > hard[k])
        if exceeded:
            raise ApiError(
                403,
                "Forbidden",
                f'{resource} "{name}" is forbidden: exceeded quota: {quota_name}, '
                f"requested: {_pretty(requested, exceeded)}, used: {_pretty(used, exceeded)}, "
                f"limited: {_pretty(hard, exceeded)}",
                name=name,
                kind=resource,
            )


def _missing_requests(pod: dict[str, Any], tracked: set[str]) -> str:
    """kube's message for the containers that state no request/limit of a tracked cpu/memory resource."""
    missing: dict[str, list[str]] = {}
    for resource in sorted(tracked & set(MUST_SPECIFY)):
        kind, _, what = resource.rpartition(".")
        kind = kind or "requests"
        for container in (pod.get("spec") or {}).get("containers") or []:
            if _container_amount(container, kind, what) is None:
                missing.setdefault(resource, []).append(str(container.get("name")))
    return "; ".join(f"{resource} for: {','.join(sorted(names))}" for resource, names in sorted(missing.items()))


def format_quantity(value: Decimal) -> str:
    """A quantity as kube prints a canonical one: whole numbers plain or with a binary suffix, fractions in m."""
    if value == value.to_integral_value():
        whole = int(value)
        for suffix, size in _BINARY:
            if whole and whole % size == 0:
                return f"{whole // size}{suffix}"
        return str(whole)
    milli = value * 1000
    if milli == milli.to_integral_value():
        return f"{int(milli)}m"
    return f"{int((milli * 1000).to_integral_value())}u"


def _pretty(values: dict[str, Decimal], names: list[str]) -> str:
    return ",".join(f"{name}={format_quantity(values.get(name, Decimal(0)))}" for name in names)


def status_of(quota: dict[str, Any], used: Usage) -> dict[str, Any]:
    hard = (quota.get("spec") or {}).get("hard") or {}
    return {"hard": dict(hard), "used": {name: format_quantity(used.get(name, Decimal(0))) for name in hard}}


class QuotaKeeper:
    """The admission plugin and the status controller, over one API server's store."""

    def __init__(self, core: Any) -> None:
        self.core = core
        quotas = core.registry.get("", "v1", "resourcequotas")
        assert quotas is not None
        self.quotas = quotas
        for rtype in core.registry.all_types():
            if rtype.namespaced:
                core.on_write.setdefault(rtype.storage_key, []).append(functools.partial(self._on_write, rtype))

    def _quotas(self, namespace: str) -> list[dict[str, Any]]:
        return list(self.core.store.items(QUOTAS, namespace))

    def _used(self, quota: dict[str, Any]) -> Usage:
        hard = (quota.get("spec") or {}).get("hard") or {}
        namespace = quota["metadata"]["namespace"]
        objects = {key: list(self.core.store.items(key, namespace)) for key in tracked_keys(hard)}
        return namespace_usage(hard, objects, self.core.admission.clock())

    def admit(self, rtype: Any, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        """On creation of any namespaced object but a quota: the namespace's quotas must allow it."""
        if old is not None or not rtype.namespaced or rtype.storage_key == QUOTAS:
            return
        quotas = self._quotas(obj["metadata"].get("namespace", ""))
        if not quotas:
            return
        if rtype.storage_key == PODS:
            usage = pod_usage(obj) if counts_as_usage(obj, self.core.admission.clock()) else {}
        else:
            usage = object_usage(rtype.storage_key, rtype.plural, rtype.group)
        admit(obj, usage, quotas, self._used, rtype.plural)

    def _on_write(self, rtype: Any, new: dict[str, Any], old: dict[str, Any] | None) -> None:
        obj = new or old
        if not obj:
            return
        if rtype.storage_key == PODS and new and old and self._same_use(new, old):
            return  # most pod writes are status reports that change nothing a quota counts
        self.refresh(obj["metadata"].get("namespace", ""), rtype.storage_key)

    def _same_use(self, new: dict[str, Any], old: dict[str, Any]) -> bool:
        now = self.core.admission.clock()
        counted = counts_as_usage(new, now)
        return counted == counts_as_usage(old, now) and (not counted or pod_usage(new) == pod_usage(old))

    def refresh(self, namespace: str, written: tuple[str, str] = QUOTAS) -> None:
        """Write the ``status`` (hard and used) of each quota counting what was ``written`` where it changed,
        as the quota controller does."""
        for quota in self._quotas(namespace):
            if quota["metadata"].get("deletionTimestamp"):
                continue
            hard = (quota.get("spec") or {}).get("hard") or {}
            if written != QUOTAS and written not in tracked_keys(hard):
                continue
            status = status_of(quota, self._used(quota))
            if quota.get("status") != status:
                self.core.write_update(self.quotas, quota, {"status": status}, subresource="status")
