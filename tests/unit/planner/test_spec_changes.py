"""Spec changes of a running job: the PS Deployment's template follows the spec, workers take the new
template only as they are replaced (running workers are not restarted for a spec change)."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest

from tests.unit.planner.builders import T0, job, node, pods, run_ps, start, terminate
from ttj.planner import CreateChild, DeleteChild, ReplaceChild
from ttj.planner.children import WORKER_TERMINATION_GRACE_SECONDS
from ttj.planner.world import World
from ttj_contract import ANNOTATION_PS_TEMPLATE

S = timedelta(seconds=1)


def started() -> World:
    world = World(job())
    start(world, [node(f"gpu-{i}", age=timedelta(hours=2 + 5 * i)) for i in range(3)])
    return world


def ps_container(world: World) -> dict[str, Any]:
    deployment = world.observed.children[("Deployment", "mnist-ps-0")]
    return dict(deployment["spec"]["template"]["spec"]["containers"][0])


@pytest.mark.parametrize(
    ("change", "replaces_ps"),
    [
        ({"image": "example.com/trainer:2"}, True),
        ({"parameterServers": {"resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}}, True),
        ({"workers": {"resources": {"requests": {"cpu": "3"}}}}, False),
        ({"workers": {"replicas": 2}}, False),
        ({"trainSteps": 5000}, False),
        ({"learningRate": 0.5}, False),
    ],
)
def test_which_spec_changes_roll_the_parameter_server(change: dict[str, Any], replaces_ps: bool) -> None:
    world = started()
    before = copy.deepcopy(world.observed.children[("Deployment", "mnist-ps-0")])
    for key, value in change.items():
        if isinstance(value, dict):
            world.job["spec"].setdefault(key, {}).update(value)
        else:
            world.job["spec"][key] = value
    world.job["metadata"]["generation"] = 2
    result = world.reconcile(T0 + S)
    replaced = result.of_type(ReplaceChild)
    if not replaces_ps:
        assert replaced == []
        assert world.observed.children[("Deployment", "mnist-ps-0")] == before
        return
    assert [(a.kind, a.name) for a in replaced] == [("Deployment", "mnist-ps-0")]
    assert any(e.reason == "ParameterServerUpdated" for e in result.events)
    container = ps_container(world)
    if "image" in change:
        assert container["image"] == change["image"]
    else:
        assert container["resources"] == {"requests": {"cpu": "2", "memory": "4Gi"}}
    annotation = world.observed.children[("Deployment", "mnist-ps-0")]["metadata"]["annotations"]
    assert annotation[ANNOTATION_PS_TEMPLATE] != before["metadata"]["annotations"][ANNOTATION_PS_TEMPLATE]
    # Converged: the next pass leaves the Deployment alone.
    assert world.reconcile(T0 + 2 * S).of_type(ReplaceChild) == []


def test_running_workers_stay_and_replacements_take_the_new_template() -> None:
    world = started()
    world.job["spec"]["image"] = "example.com/trainer:2"
    world.job["spec"]["workers"]["resources"] = {"limits": {"memory": "8Gi"}}
    result = world.reconcile(T0 + S)
    assert not result.of_type(DeleteChild)  # nobody restarted
    assert all(p["spec"]["containers"][0]["image"] != "example.com/trainer:2" for p in pods(world))
    terminate(world, "mnist-worker-1-1", 143, pod_reason="Terminated", now=T0 + 2 * S)
    result = world.reconcile(T0 + 2 * S)
    created = [a.manifest for a in result.of_type(CreateChild) if a.kind == "Pod"]
    assert [m["metadata"]["name"] for m in created] == ["mnist-worker-1-2"]
    container = created[0]["spec"]["containers"][0]
    assert container["image"] == "example.com/trainer:2"
    assert container["resources"]["limits"]["memory"] == "8Gi"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_a_rollout_of_the_parameter_server_bumps_the_epoch_but_is_no_preemption() -> None:
    world = started()
    world.observed.pods = [p for p in world.observed.pods if p["metadata"]["labels"]["transient.training/role"] != "ps"]
    # The Deployment's pods are named <deployment>-<pod-template-hash>-<suffix>.
    run_ps(world, "mnist-ps-0-7d9f8-abcde", now=T0 + S)
    world.observed.pods[-1]["metadata"]["labels"]["pod-template-hash"] = "7d9f8"
    world.reconcile(T0 + S)
    epoch = world.job["status"]["chief"]["epoch"]
    preemptions = world.job["status"]["preemptions"]
    world.job["spec"]["image"] = "example.com/trainer:2"
    world.reconcile(T0 + 2 * S)  # template patched; the Deployment controller replaces the pod
    world.observed.pods = [p for p in world.observed.pods if p["metadata"]["labels"]["transient.training/role"] != "ps"]
    run_ps(world, "mnist-ps-0-5c6b4-fghij", now=T0 + 3 * S)
    world.observed.pods[-1]["metadata"]["labels"]["pod-template-hash"] = "5c6b4"
    result = world.reconcile(T0 + 3 * S)
    status = world.job["status"]
    assert status["chief"]["epoch"] == epoch + 1  # the chief must restore into the fresh PS
    assert status["preemptions"] == preemptions
    assert status["parameterServerPods"] == ["mnist-ps-0-5c6b4-fghij"]
    assert any(e.reason == "ParameterServerReplaced" for e in result.events)
    # A PS pod of the same template replaced (its node preempted) is a preemption.
    world.observed.pods = [p for p in world.observed.pods if p["metadata"]["labels"]["transient.training/role"] != "ps"]
    run_ps(world, "mnist-ps-0-5c6b4-zzzzz", now=T0 + 4 * S)
    world.observed.pods[-1]["metadata"]["labels"]["pod-template-hash"] = "5c6b4"
    world.reconcile(T0 + 4 * S)
    assert world.job["status"]["preemptions"] == preemptions + 1
    assert world.job["status"]["chief"]["epoch"] == epoch + 2


def test_worker_pods_have_the_termination_grace_the_budget_stops_ahead_by() -> None:
    world = started()
    for pod in pods(world):
        assert pod["spec"]["terminationGracePeriodSeconds"] == WORKER_TERMINATION_GRACE_SECONDS


def test_the_budget_stops_a_grace_period_before_the_money_runs_out() -> None:
    """Spent is just under the limit, but the workers' SIGTERM grace at the running rate would pass it."""
    from ttj.cost.prices import load_price_table
    from ttj.planner import PlannerConfig

    config = PlannerConfig(prices=load_price_table())
    world = World(job(budget={"maxCostUSD": 100}))
    start(world, [node(f"gpu-{i}", age=timedelta(hours=2 + 5 * i)) for i in range(3)])
    hour = timedelta(hours=1)
    rate = world.reconcile(T0 + hour, config).status["cost"]["usdPerHour"]
    assert rate > 0
    # Move the clock to just before the limit: less than the grace's worth of money left.
    spent_per_second = rate / 3600
    left_seconds = (100 - world.job["status"]["cost"]["usd"]) / spent_per_second
    almost = T0 + hour + timedelta(seconds=left_seconds - WORKER_TERMINATION_GRACE_SECONDS / 2)
    status = world.reconcile(almost, config).status
    assert status["cost"]["usd"] < 100
    budget = next(c for c in status["conditions"] if c["type"] == "BudgetExceeded")
    assert budget["status"] == "True"


def test_an_invalid_edit_of_a_running_job_fails_it_and_stops_its_pods() -> None:
    """The edit got past the API server (a cluster without CEL, or a rule only the operator checks): the job is
    Failed and Invalid, and none of its pods is left running, unaccounted for."""
    world = started()
    world.job["spec"]["workers"]["template"] = {"metadata": {"labels": {"transient.training/role": "ps"}}}
    world.job["metadata"]["generation"] = 2
    result = world.reconcile(T0 + S)
    status = world.job["status"]
    assert status["phase"] == "Failed"
    assert any(c["type"] == "Invalid" and c["status"] == "True" for c in status["conditions"])
    deleted = {(d.kind, d.name) for d in result.of_type(DeleteChild)}
    assert {("Pod", p["metadata"]["name"]) for p in pods(world, alive=False)} <= deleted
    assert ("Deployment", "mnist-ps-0") in deleted
    world.reconcile(T0 + 2 * S)
    assert pods(world) == []  # no live worker left
