"""The subresources that are not the object itself: ``pods/binding`` (the scheduler's write), ``pods/eviction``
(a delete that asks the pod's disruption budgets first, what ``kubectl drain`` and the cluster autoscaler use)
and ``scale`` (an ``autoscaling/v1`` Scale view of a workload's replicas); ``status`` is an update mode of
ApiCore."""

from __future__ import annotations

import copy
import json
from typing import Any

from ttj_contract import format_time

from . import patching
from .core import ApiCore
from .errors import STALE, ApiError, bad_request, conflict, invalid, not_found
from .resources import PODS, ResourceType
from .selectors import label_selector_to_string, parse_label_selector

PDBS = ("policy", "poddisruptionbudgets")
#: The DisruptionTarget condition kube's Eviction subresource puts on a pod before deleting it (its reason and
#: message, as kube-apiserver writes them).
EVICTION_CONDITION = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
EVICTION_MESSAGE = "Eviction API: evicting"


def _get_path(obj: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def _set_path(obj: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    for part in parts[:-1]:
        obj = obj.setdefault(part, {})
    obj[parts[-1]] = value


class Subresources:
    def __init__(self, core: ApiCore) -> None:
        self.core = core

    def bind(self, namespace: str, name: str, binding: Any) -> dict[str, Any]:
        rtype = self.core.registry.get("", "v1", "pods")
        assert rtype is not None
        pod = self.core.store.get(PODS, namespace, name)
        if pod is None:
            raise not_found("pods", "", name)
        target = (binding or {}).get("target") or {}
        node = target.get("name")
        if not node:
            raise invalid("Binding", "", name, [("target.name", "Required value")])
        if (pod.get("spec") or {}).get("nodeName"):
            raise conflict("pods", "", name, f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"')
        if pod["metadata"].get("deletionTimestamp"):
            raise conflict("pods", "", name, f"pod {name} is being deleted, cannot be assigned to a host")
        new = copy.deepcopy(pod)
        new["spec"]["nodeName"] = node
        conditions = [c for c in (new.get("status") or {}).get("conditions") or [] if c.get("type") != "PodScheduled"]
        conditions.append(
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": format_time(self.core.clock())}
        )
        new.setdefault("status", {})["conditions"] = conditions
        stored = self.core.store.put(PODS, new, pod)
        self.core.notify(rtype, stored, pod)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def evict(self, namespace: str, name: str, eviction: Any) -> dict[str, Any]:
        """``POST pods/NAME/eviction``: refused with 429 while a disruption budget selecting the pod allows no
        disruption (a budget whose status has not been computed allows none, as in kube); else the pod gets the
        ``DisruptionTarget`` condition and is deleted with the Eviction's ``deleteOptions``. A pod that is not
        running (pending, finished, already being deleted) is deleted without asking the budgets."""
        rtype = self.core.registry.get("", "v1", "pods")
        assert rtype is not None
        if not isinstance(eviction, dict):
            raise bad_request("the body of an eviction must be an Eviction object")
        pod = self.core.store.get(PODS, namespace, name)
        if pod is None:
            raise not_found("pods", "", name)
        options = eviction.get("deleteOptions") or {}
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Pending", "Succeeded", "Failed") or pod["metadata"].get("deletionTimestamp"):
            self.core.delete(rtype, namespace, name, options)
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
        for budget in self.core.store.items(PDBS, namespace):
            matches = parse_label_selector(label_selector_to_string((budget.get("spec") or {}).get("selector")))
            if matches is None or not matches(pod):
                continue
            status = budget.get("status") or {}
            computed = status.get("observedGeneration", 0) >= budget["metadata"].get("generation", 1)
            if not computed or int(status.get("disruptionsAllowed") or 0) < 1:
                raise ApiError(
                    429,
                    "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                    causes=[
                        {
                            "reason": "DisruptionBudget",
                            "message": f"The disruption budget {budget['metadata']['name']} needs "
                            f"{status.get('desiredHealthy', 0)} healthy pods and has "
                            f"{status.get('currentHealthy', 0)} currently",
                        }
                    ],
                    retry_after_seconds=10,
                )
        new = copy.deepcopy(pod)
        conditions = [
            c for c in (new.get("status") or {}).get("conditions") or [] if c.get("type") != "DisruptionTarget"
        ]
        conditions.append(
            {**EVICTION_CONDITION, "message": EVICTION_MESSAGE, "lastTransitionTime": format_time(self.core.clock())}
        )
        new.setdefault("status", {})["conditions"] = conditions
        stored = self.core.store.put(PODS, new, pod)
        self.core.notify(rtype, stored, pod)
        self.core.delete(rtype, namespace, name, options)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    @staticmethod
    def scale_of(rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        assert rtype.scale is not None
        paths = rtype.scale
        meta = obj["metadata"]
        if paths.label_selector:
            selector = _get_path(obj, paths.label_selector) or ""
        else:
            selector = label_selector_to_string((obj.get("spec") or {}).get("selector"))
        status: dict[str, Any] = {"replicas": _get_path(obj, paths.status_replicas) or 0}
        if selector:
            status["selector"] = selector
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                "name": meta["name"],
                "namespace": meta.get("namespace"),
                "uid": meta["uid"],
                "resourceVersion": meta["resourceVersion"],
                "creationTimestamp": meta["creationTimestamp"],
            },
            "spec": {"replicas": _get_path(obj, paths.spec_replicas) or 0},
            "status": status,
        }

    def get_scale(self, rtype: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        return self.scale_of(rtype, self.core.get(rtype, namespace, name))

    def write_scale(
        self, rtype: ResourceType, namespace: str, name: str, scale: Any, *, patch_type: str | None = None
    ) -> dict[str, Any]:
        """A PUT (``patch_type`` None) or PATCH of the Scale; only spec.replicas is written through."""
        assert rtype.scale is not None
        obj = self.core.get(rtype, namespace, name)
        current = self.scale_of(rtype, obj)
        new_scale = patching.apply_patch(patch_type, current, scale, strategic_allowed=True) if patch_type else scale
        if not isinstance(new_scale, dict):
            raise bad_request("the body of the request must be a Scale object")
        wanted_rv = (new_scale.get("metadata") or {}).get("resourceVersion")
        if wanted_rv and wanted_rv != obj["metadata"]["resourceVersion"]:
            raise conflict(rtype.plural, rtype.group, name, STALE)
        replicas = (new_scale.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or replicas < 0:
            raise invalid(
                "Scale",
                "autoscaling",
                name,
                [("spec.replicas", f"Invalid value: {json.dumps(replicas)}: must be greater than or equal to 0")],
            )
        updated = copy.deepcopy(obj)
        _set_path(updated, rtype.scale.spec_replicas, replicas)
        stored = self.core.write_update(rtype, obj, updated, subresource="scale")
        return self.scale_of(rtype, stored)
