"""A pass woken while nothing it plans on has changed is not planned.

The planner is pure, so a pass over the same job version, children, nodes and configuration plans the same (but
for cost accrued since): such a pass is skipped until the last pass's timer is due. (At a 100-job start-up, 576
of 1,172 passes planned nothing, but most of those followed a real change of a pod; 10-15 had unchanged inputs.)
Each test runs passes on the local API server's own code (in process)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

import ttj.controller.reconciler as reconciler_module
from tests.unit.controller.in_process_api import NAMESPACE, InProcessApi, pass_over, reconciler_for
from tests.unit.planner.builders import T0, job, node
from ttj.controller.observe import inputs_of
from ttj.controller.reconciler import JobReconciler
from ttj.planner import Observed, PlannerConfig
from ttj.planner.observed import name_of
from ttj_contract import KIND

NAME = "mnist"
KEY = (NAMESPACE, NAME)


def versioned_node(name: str, version: str = "1", pool: str = "spot") -> dict[str, Any]:
    served = node(name, pool)
    served["metadata"]["resourceVersion"] = version
    return served


NODES = {n["metadata"]["name"]: n for n in [versioned_node(f"gpu-{i}") for i in range(3)]}


class Planned:
    """Counts the planner's calls."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        planner = reconciler_module.plan

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return planner(*args, **kwargs)

        monkeypatch.setattr(reconciler_module, "plan", counted)


def started(cluster: InProcessApi, reconciler: JobReconciler) -> None:
    """The first pass creates the children; the second plans on them as the watches show them."""
    pass_over(reconciler, cluster.job(NAME), cluster.observe(NAME, NODES), NODES)
    for i, pod in enumerate(p for p in cluster.objects("Pod") if name_of(p).startswith(f"{NAME}-worker")):
        cluster.run(name_of(pod), f"gpu-{i % 3}")
    pass_over(reconciler, cluster.job(NAME), cluster.observe(NAME, NODES), NODES)


def test_a_pass_on_the_inputs_of_the_last_is_skipped_until_its_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = InProcessApi(T0)
    cluster.create(job(NAME))
    reconciler = reconciler_for(cluster, NAME)
    started(cluster, reconciler)
    planned = Planned(monkeypatch)
    writes = len(cluster.requests)

    # The watch shows the last pass's own writes and nothing else: the pass after it plans on them once ...
    pass_over(reconciler, cluster.job(NAME), cluster.observe(NAME, NODES), NODES)
    assert planned.calls == 1
    # ... and a pass woken again with nothing changed is not planned, nor writes; it sleeps until the same timer.
    due_in = reconciler.due_at
    delay = pass_over(reconciler, cluster.job(NAME), cluster.observe(NAME, NODES), NODES)
    assert planned.calls == 1
    assert reconciler.skipped_passes == 1
    assert delay is not None
    assert delay > 0
    assert reconciler.due_at == due_in
    assert len([r for r in cluster.requests[writes:] if r.method != "GET"]) <= 1  # the planned pass's status at most

    reconciler.due_at = 0.0  # the last pass's timer is due: planned, though nothing changed
    pass_over(reconciler, cluster.job(NAME), cluster.observe(NAME, NODES), NODES)
    assert planned.calls == 2


@pytest.mark.parametrize("change", ["pod", "node", "job", "config"])
def test_a_pass_is_planned_when_any_of_its_inputs_changed(monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    cluster = InProcessApi(T0)
    cluster.create(job(NAME))
    reconciler = reconciler_for(cluster, NAME)
    started(cluster, reconciler)
    pass_over(reconciler, cluster.job(NAME), cluster.observe(NAME, NODES), NODES)
    planned = Planned(monkeypatch)
    nodes = NODES
    if change == "pod":
        worker = next(name_of(p) for p in cluster.objects("Pod") if name_of(p).startswith(f"{NAME}-worker"))
        cluster.patch("Pod", worker, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, "status")
    elif change == "node":
        nodes = {**NODES, "gpu-0": versioned_node("gpu-0", "2")}
    elif change == "job":
        cluster.patch(KIND, NAME, {"metadata": {"labels": {"a": "b"}}})
    else:
        reconciler.ctx.planner = PlannerConfig(resync_seconds=30.0)
    pass_over(reconciler, cluster.job(NAME), cluster.observe(NAME, NODES), nodes)
    assert planned.calls == 1
    assert reconciler.skipped_passes == 0


def test_inputs_without_versions_never_match() -> None:
    """Objects without a resourceVersion (hand-made ones) cannot be told apart: every such pass is planned."""
    observed = Observed(pods=[{"metadata": {"name": "p"}}])
    versioned = {"metadata": {"resourceVersion": "3"}}
    assert inputs_of(versioned, observed, PlannerConfig(), None) is None
    assert inputs_of({"metadata": {}}, Observed(), PlannerConfig(), None) is None
    config = PlannerConfig()
    ready = Observed(pods=[{"metadata": {"name": "p", "resourceVersion": "4"}}], nodes=copy.deepcopy(NODES))
    assert inputs_of(versioned, ready, config, None) == inputs_of(versioned, copy.deepcopy(ready), config, None)
    assert inputs_of(versioned, ready, config, None) != inputs_of(versioned, ready, PlannerConfig(), None)
