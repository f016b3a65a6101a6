"""A write the API refused is a condition in the Kubernetes shape (ReplicaFailure, as a ReplicaSet says it)
and a Warning Event with the API's message, from the one rule table."""

from __future__ import annotations

from tests.unit.planner.builders import T0, job
from ttj.planner import Observed, plan
from ttj.planner.actions import Refusal

QUOTA = 'pods "mnist-worker-2-1" is forbidden: exceeded quota: compute, requested: requests.cpu=1'


def test_a_refused_create_is_a_condition_and_a_warning() -> None:
    refused = [Refusal("Pod", "mnist-worker-2-1", "create", 403, QUOTA)]
    result = plan(job(), Observed(), T0, refused=refused)
    [condition] = [c for c in result.status["conditions"] if c["type"] == "ReplicaFailure"]
    assert condition["status"] == "True"
    assert condition["reason"] == "FailedCreate"
    assert QUOTA in condition["message"]
    assert condition["lastTransitionTime"]
    [event] = [e for e in result.events if e.reason == "FailedCreate"]
    assert event.type == "Warning"
    assert QUOTA in event.message
    # without refusals the condition is not there
    again = plan({**job(), "status": result.status}, Observed(), T0)
    assert all(c["type"] != "ReplicaFailure" for c in again.status["conditions"])


def test_many_refusals_are_summed_up() -> None:
    refused = [Refusal("Pod", f"mnist-worker-{i}-1", "create", 403, f"no {i}") for i in range(5)]
    result = plan(job(), Observed(), T0, refused=refused)
    [condition] = [c for c in result.status["conditions"] if c["type"] == "ReplicaFailure"]
    assert "no 0" in condition["message"]
    assert "5 writes refused" in condition["message"]


def test_a_parameter_server_its_deployment_could_not_create_is_said_the_same_way() -> None:
    """The PS pods are the Deployment's to create: a refusal shows in its ReplicaFailure condition, which the
    job relays (the workers' own creates went through)."""
    missing = 'pods "mnist-ps-0-6d4f-x2k9q" is forbidden: no PriorityClass with name batch-high was found'
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "mnist-ps-0"},
        "status": {
            "conditions": [{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": missing}]
        },
    }
    result = plan(job(), Observed(children={("Deployment", "mnist-ps-0"): deployment}), T0)
    [condition] = [c for c in result.status["conditions"] if c["type"] == "ReplicaFailure"]
    assert (condition["status"], condition["reason"]) == ("True", "FailedCreate")
    assert condition["message"] == f"create Pod for Deployment mnist-ps-0: {missing}"
    # once the Deployment's pods go through, the condition goes
    deployment["status"]["conditions"] = []
    again = plan({**job(), "status": result.status}, Observed(children={("Deployment", "mnist-ps-0"): deployment}), T0)
    assert all(c["type"] != "ReplicaFailure" for c in again.status["conditions"])
