"""What a pod names that must exist before the API server admits it: its ServiceAccount (the ServiceAccount
admission plugin) and its PriorityClass (the Priority plugin). A user creates them for the templates of a
job; the tests that offer ttj's pods to an API server create them the same way."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

#: The value of the PriorityClasses the tests create: any user-definable one does.
TEST_PRIORITY = 1000
PRIORITY_API = "scheduling.k8s.io/v1"


def pod_spec_of(manifest: dict[str, Any]) -> dict[str, Any]:
    """A Pod's spec, or a workload's pod template spec."""
    spec: dict[str, Any] = manifest.get("spec") or {}
    return ((spec.get("template") or {}).get("spec")) or spec


def template_pod_specs(job_spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod specs of a TransientTrainingJob spec's role templates (JSON, as the API holds it)."""
    return [
        ((job_spec.get(role) or {}).get("template") or {}).get("spec") or {} for role in ("workers", "parameterServers")
    ]


def named_objects(pod_specs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ServiceAccounts and PriorityClasses these pod specs name, as objects to create (accounts first)."""
    specs = list(pod_specs)
    accounts = sorted({s["serviceAccountName"] for s in specs if s.get("serviceAccountName")})
    classes = sorted({s["priorityClassName"] for s in specs if s.get("priorityClassName")})
    return [
        *({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}} for name in accounts),
        *(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": TEST_PRIORITY,
            }
            for name in classes
        ),
    ]


def collection_path(obj: dict[str, Any], namespace: str) -> str:
    """Where to POST one of :func:`named_objects`' objects: accounts are namespaced, classes cluster-wide."""
    if obj["kind"] == "ServiceAccount":
        return f"/api/v1/namespaces/{namespace}/serviceaccounts"
    return f"/apis/{PRIORITY_API}/priorityclasses"
