"""Pod priority as kube-apiserver keeps it: PriorityClasses (scheduling.k8s.io/v1), their validation, and the
``Priority`` admission plugin (on by default in kube), which refuses a pod naming a PriorityClass that does
not exist and writes the class's value into the pod's ``spec.priority``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .errors import ApiError

GROUP = "scheduling.k8s.io"
PRIORITY_CLASSES = (GROUP, "priorityclasses")
#: The classes kube-apiserver creates at start, and the only ones whose names may start with ``system-``.
SYSTEM_CLASSES = {"system-node-critical": 2_000_001_000, "system-cluster-critical": 2_000_000_000}
HIGHEST_USER_DEFINABLE = 1_000_000_000
PREEMPT_LOWER = "PreemptLowerPriority"
PREEMPTION_POLICIES = (PREEMPT_LOWER, "Never")

Errors = list[tuple[str, str]]
Lookup = Callable[[str], dict[str, Any] | None]


def bootstrap() -> list[dict[str, Any]]:
    """The system PriorityClasses, as kube-apiserver's post-start hook makes them."""
    return [
        {
            "metadata": {"name": name},
            "value": value,
            "globalDefault": False,
            "preemptionPolicy": PREEMPT_LOWER,
            "description": "Used for system critical pods that must not be moved from their current node."
            if name == "system-node-critical"
            else "Used for system critical pods that must run in the cluster, but can be moved to another node "
            "if necessary.",
        }
        for name, value in SYSTEM_CLASSES.items()
    ]


def default_class(obj: dict[str, Any]) -> None:
    obj.setdefault("preemptionPolicy", PREEMPT_LOWER)


def validate_class(obj: dict[str, Any], old: dict[str, Any] | None) -> Errors:
    """ValidatePriorityClass (and its update rules)."""
    errors: Errors = []
    name = obj["metadata"].get("name", "")
    value = obj.get("value")
    if not isinstance(value, int) or isinstance(value, bool):
        errors.append(("value", "Required value"))
    elif name.startswith("system-") and SYSTEM_CLASSES.get(name) != value:
        errors.append(
            ("metadata.name", "Forbidden: priority class names with 'system-' prefix are reserved for system use only")
        )
    elif not name.startswith("system-") and value > HIGHEST_USER_DEFINABLE:
        errors.append(
            ("value", f"Forbidden: maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE}")
        )
    policy = obj.get("preemptionPolicy")
    if policy not in PREEMPTION_POLICIES:
        errors.append(
            ("preemptionPolicy", f'Unsupported value: "{policy}": supported values: "Never", "{PREEMPT_LOWER}"')
        )
    if old is not None:
        if old.get("value") != value:
            errors.append(("value", "Forbidden: may not be changed in an update."))
        if old.get("preemptionPolicy") != policy:
            errors.append(("preemptionPolicy", "Invalid value: field is immutable"))
    return errors


def admit_class(obj: dict[str, Any], old: dict[str, Any] | None, classes: Iterable[dict[str, Any]]) -> None:
    """The plugin's check of PriorityClasses themselves: one global default at most."""
    if not obj.get("globalDefault") or (old is not None and old.get("globalDefault")):
        return
    for other in classes:
        if other.get("globalDefault") and other["metadata"]["name"] != obj["metadata"]["name"]:
            name = obj["metadata"]["name"]
            raise ApiError(
                403,
                "Forbidden",
                f'priorityclasses.scheduling.k8s.io "{name}" is forbidden: PriorityClass '
                f"{other['metadata']['name']} is already marked as default. Only one default can exist",
                name=name,
                kind="priorityclasses",
                group=GROUP,
            )


def admit_pod(pod: dict[str, Any], lookup: Lookup, classes: Iterable[dict[str, Any]]) -> None:
    """On pod creation: the class named (or the global default) gives ``spec.priority`` and
    ``spec.preemptionPolicy``; a class that does not exist, or a priority the pod sets itself, is refused."""
    spec = pod.setdefault("spec", {})
    name = pod["metadata"].get("name", "")
    wanted = spec.get("priorityClassName")
    if wanted:
        chosen = lookup(wanted)
        if chosen is None:
            raise _forbidden(name, f"no PriorityClass with name {wanted} was found")
    else:
        defaults = [c for c in classes if c.get("globalDefault")]
        chosen = max(defaults, key=lambda c: int(c.get("value") or 0), default=None)
        if chosen is not None:
            spec["priorityClassName"] = chosen["metadata"]["name"]
    priority = int(chosen["value"]) if chosen is not None else 0
    policy = str(chosen.get("preemptionPolicy") or PREEMPT_LOWER) if chosen is not None else PREEMPT_LOWER
    given = spec.get("priority")
    if given is not None and given != priority:
        raise _forbidden(
            name,
            f"the integer value of priority ({given}) must not be provided in pod spec; priority admission "
            f"controller computed {priority} from the given PriorityClass name",
        )
    given_policy = spec.get("preemptionPolicy")
    if given_policy is not None and given_policy != policy:
        raise _forbidden(
            name,
            f"the string value of PreemptionPolicy ({given_policy}) must not be provided in pod spec; priority "
            f"admission controller computed {policy} from the given PriorityClass name",
        )
    spec["priority"] = priority
    spec["preemptionPolicy"] = policy


def _forbidden(pod: str, why: str) -> ApiError:
    return ApiError(403, "Forbidden", f'pods "{pod}" is forbidden: {why}', name=pod, kind="pods")
