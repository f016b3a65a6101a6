"""Every way a worker pod can end, and what the planner makes of it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.unit.planner.builders import T0, node
from ttj.planner import PodState, classify_pod
from ttj_contract import format_time

GRACE = timedelta(seconds=30)


def pod(phase: str = "Running", node_name: str = "n1", **extra: Any) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": format_time(T0 - GRACE * 4)}],
    }
    for key in ("reason", "message"):
        if key in extra:
            status[key] = extra.pop(key)
    if "exit" in extra:
        status["containerStatuses"] = [
            {
                "name": "trainer",
                "state": {
                    "terminated": {
                        "exitCode": extra.pop("exit"),
                        "reason": extra.pop("term_reason", "Error"),
                        "message": extra.pop("term_message", ""),
                    }
                },
            }
        ]
    if "condition" in extra:
        status["conditions"].append(extra.pop("condition"))
    metadata: dict[str, Any] = {"name": "w", **extra.pop("metadata", {})}
    return {"metadata": metadata, "spec": {"nodeName": node_name}, "status": status}


READY = {"n1": node("n1")}
NOT_READY_LONG = {"n1": node("n1", ready=False, ready_since=T0 - timedelta(minutes=5))}
NOT_READY_SHORT = {"n1": node("n1", ready=False, ready_since=T0 - timedelta(seconds=5))}


@pytest.mark.parametrize(
    ("case", "the_pod", "nodes", "state", "force"),
    [
        ("running", pod(), READY, PodState.RUNNING, False),
        ("pending", pod("Pending", node_name=""), READY, PodState.PENDING, False),
        ("succeeded", pod("Succeeded", exit=0, term_reason="Completed"), READY, PodState.SUCCEEDED, False),
        ("code error exit 1", pod("Failed", exit=1, term_message="ValueError: bad"), READY, PodState.FAILED, False),
        ("OOMKilled is the code's", pod("Failed", exit=137, term_reason="OOMKilled"), READY, PodState.FAILED, False),
        ("SIGTERM exit 143", pod("Failed", exit=143), READY, PodState.PREEMPTED, False),
        ("kubelet NodeShutdown", pod("Failed", exit=1, reason="NodeShutdown"), READY, PodState.PREEMPTED, False),
        ("pod reason Terminated", pod("Failed", exit=143, reason="Terminated"), READY, PodState.PREEMPTED, False),
        ("pod reason Shutdown", pod("Failed", reason="Shutdown"), READY, PodState.PREEMPTED, False),
        (
            "DisruptionTarget",
            pod(
                "Running",
                condition={
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "PreemptionByScheduler",
                    "lastTransitionTime": format_time(T0),
                },
            ),
            READY,
            PodState.PREEMPTED,
            False,
        ),
        ("exit 1 after its node went away", pod("Failed", exit=1), {}, PodState.PREEMPTED, True),
        ("node gone while running", pod(), {}, PodState.PREEMPTED, True),
        ("node NotReady past grace", pod(), NOT_READY_LONG, PodState.PREEMPTED, True),
        ("node NotReady within grace", pod(), NOT_READY_SHORT, PodState.RUNNING, False),
        (
            "deleted by someone else",
            pod(metadata={"deletionTimestamp": format_time(T0)}),
            READY,
            PodState.PREEMPTED,
            False,
        ),
        (
            "stuck terminating on a lost node",
            pod(metadata={"deletionTimestamp": format_time(T0 - GRACE)}),
            {},
            PodState.PREEMPTED,
            True,
        ),
        (
            "deleted on purpose by the operator",
            pod(
                metadata={
                    "deletionTimestamp": format_time(T0),
                    "annotations": {"transient.training/deleted-by-operator": "true"},
                }
            ),
            READY,
            PodState.RELEASED,
            False,
        ),
    ],
)
def test_classification(
    case: str, the_pod: dict[str, Any], nodes: dict[str, Any], state: PodState, force: bool
) -> None:
    verdict = classify_pod(the_pod, nodes, T0, GRACE)
    assert verdict.state == state, case
    assert verdict.force_delete == force, case


def test_a_just_bound_pod_on_an_unseen_node_is_not_lost() -> None:
    """Pod and node watches race: a pod bound a moment ago may name a node not observed yet."""
    fresh = pod()
    fresh["status"]["conditions"][0]["lastTransitionTime"] = format_time(T0 - timedelta(seconds=2))
    assert classify_pod(fresh, {}, T0, GRACE).state == PodState.RUNNING


def test_failure_message_comes_from_the_container() -> None:
    verdict = classify_pod(pod("Failed", exit=3, term_message="out of data\n"), READY, T0, GRACE)
    assert verdict.message == "exit code 3 (Error): out of data"


def test_unschedulable_reason_is_reported() -> None:
    p = pod("Pending", node_name="")
    p["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes available"}
    ]
    assert classify_pod(p, READY, T0, GRACE).pending_reason == "Unschedulable: 0/3 nodes available"


def _class_pod(
    phase: str = "Running", node_name: str = "n1", compute_class: str | None = "gpu-fallback", **extra: Any
) -> dict[str, Any]:
    the_pod = pod(phase, node_name, **extra)
    if compute_class is not None:
        the_pod["spec"]["nodeSelector"] = {"cloud.google.com/compute-class": compute_class}
    return the_pod


def _disruption(reason: str) -> dict[str, Any]:
    return {"type": "DisruptionTarget", "status": "True", "reason": reason, "lastTransitionTime": format_time(T0)}


def _draining(name: str = "n1", **kwargs: Any) -> dict[str, Any]:
    drained = node(name, **kwargs)
    drained["spec"] = {
        "unschedulable": True,
        "taints": [{"key": "ToBeDeletedByClusterAutoscaler", "value": "1700000000", "effect": "NoSchedule"}],
    }
    return drained


DELETING: dict[str, Any] = {"metadata": {"deletionTimestamp": format_time(T0)}}
EVICTED = _disruption("EvictionByEvictionAPI")


@pytest.mark.parametrize(
    ("case", "the_pod", "nodes", "state", "migrated"),
    [
        ("class worker evicted", _class_pod(condition=EVICTED), READY, "P", True),
        ("class worker evicted, node gone", _class_pod(condition=EVICTED), {}, "P", True),
        ("class worker deleted on a draining node", _class_pod(**DELETING), {"n1": _draining()}, "P", True),
        ("class worker exit 143 on a draining node", _class_pod("Failed", exit=143), {"n1": _draining()}, "P", True),
        ("class worker running on a draining node", _class_pod(), {"n1": _draining()}, "R", False),
        ("class worker, spot shutdown", _class_pod(condition=_disruption("TerminationByKubelet")), READY, "P", False),
        (
            "class worker, spot shutdown of a draining node",
            _class_pod("Failed", exit=143, reason="Terminated", condition=_disruption("TerminationByKubelet")),
            {"n1": _draining()},
            "P",
            False,
        ),
        ("class worker, node lost", _class_pod(), {}, "P", False),
        ("class worker, node NotReady", _class_pod(), NOT_READY_LONG, "P", False),
        ("class worker deleted by someone", _class_pod(**DELETING), READY, "P", False),
        ("class worker exits 1", _class_pod("Failed", exit=1), {"n1": _draining()}, "F", False),
        (
            "plain worker evicted",
            _class_pod(compute_class=None, condition=_disruption("EvictionByEvictionAPI")),
            READY,
            "P",
            False,
        ),
        (
            "plain worker on a draining node",
            _class_pod(compute_class=None, **DELETING),
            {"n1": _draining()},
            "P",
            False,
        ),
    ],
)
def test_a_compute_class_migration_is_a_planned_handover(
    case: str, the_pod: dict[str, Any], nodes: dict[str, Any], state: str, migrated: bool
) -> None:
    """A worker its compute class's active migration drains away (the autoscaler's taint on its node, or the
    Eviction API's DisruptionTarget) is replaced like a preempted one but flagged as a planned handover; a spot
    preemption, a lost node or a deletion without a drain stays a preemption, a failure of the code a failure."""
    verdict = classify_pod(the_pod, nodes, T0, GRACE)
    expected = {"P": PodState.PREEMPTED, "R": PodState.RUNNING, "F": PodState.FAILED}[state]
    assert (verdict.state, verdict.migrated) == (expected, migrated), case
    if migrated:
        assert "gpu-fallback" in verdict.message
        assert "n1" in verdict.message
