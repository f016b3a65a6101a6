"""A pass plans on its job's children and status as the operator's own writes left them while the watches lag.

At start-up, with the watches seconds behind at 100 jobs, a pass planned on an index without the pods the
previous pass had created, and created them again (each job's pods were sent three times over, all but the
first refused 409), labelled the chief again and again, and, two status writes behind, lost its status write
to a 409. Each test here runs passes on the local API server's own code (in process) over indexes that show
the cluster as it was before the passes wrote. And until a job first runs, its passes coalesce the changes that
come in a burst (the last test)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from prometheus_client import CollectorRegistry

from tests.unit.controller import in_process_api
from tests.unit.controller.in_process_api import NAMESPACE, InProcessApi, pass_over, reconciler_for
from tests.unit.planner.builders import T0, job, node
from ttj.controller.context import OperatorContext
from ttj.controller.handlers import CHILD_RESOURCES, Handlers
from ttj.controller.memory import OwnWrite
from ttj.controller.metrics import Metrics
from ttj.controller.observe import add_own_writes
from ttj.controller.reconciler import CONFLICT_RETRY_SECONDS, START_UP_COALESCE_SECONDS
from ttj.controller.watches import change_of
from ttj.planner import Observed
from ttj.planner.observed import name_of
from ttj_contract import KIND, LABEL_CHIEF, LABEL_JOB, LABEL_ROLE, Role

NAME = "mnist"
KEY = (NAMESPACE, NAME)
NODES = {n["metadata"]["name"]: n for n in [node(f"gpu-{i}") for i in range(3)] + [node("cpu-0", "on-demand")]}


def creates(cluster: InProcessApi, kind: str) -> int:
    return len(cluster.writes("POST", kind))


def status_writes(cluster: InProcessApi) -> int:
    return sum(1 for r in cluster.writes("PATCH", KIND) if r.path.endswith("/status"))


def test_a_pass_whose_watches_lag_does_not_create_its_children_again() -> None:
    cluster = InProcessApi(T0)
    cluster.create(job(NAME))
    reconciler = reconciler_for(cluster, NAME)
    nothing = cluster.observe(NAME, NODES)  # before the first pass: no child yet

    pass_over(reconciler, cluster.job(NAME), nothing, NODES)
    made = {kind: creates(cluster, kind) for kind in ("Pod", "Lease", *CHILD_RESOURCES)}
    assert made["Pod"] == 3
    assert all(made[kind] == 1 for kind in ("Lease", *CHILD_RESOURCES))

    pass_over(reconciler, cluster.job(NAME), nothing, NODES)  # the watches have shown none of them yet
    assert {kind: creates(cluster, kind) for kind in made} == made

    # Once the watches show the children, what the operator remembers of its writes is let go.
    pass_over(reconciler, cluster.job(NAME), cluster.observe(NAME, NODES), NODES)
    assert reconciler.ctx.state.job(KEY).written_children == {}
    assert {kind: creates(cluster, kind) for kind in made} == made


def test_a_chief_labelled_by_a_pass_is_not_labelled_again_while_the_pod_watch_lags() -> None:
    cluster = InProcessApi(T0)
    cluster.create(job(NAME))
    reconciler = reconciler_for(cluster, NAME)
    in_process_api.run_pass(reconciler, cluster, NAME, NODES)
    cluster.run_parameter_server(NAME, "cpu-0")
    workers = [p for p in cluster.observe(NAME, NODES).pods if p["metadata"]["labels"][LABEL_ROLE] == Role.WORKER]
    for i, pod in enumerate(workers):
        cluster.run(pod["metadata"]["name"], f"gpu-{i}")
    unlabelled = cluster.observe(NAME, NODES)

    pass_over(reconciler, cluster.job(NAME), unlabelled, NODES)  # elects and labels the chief
    labels = [r for r in cluster.writes("PATCH", "Pod") if LABEL_CHIEF in str(r.body)]
    assert len(labels) == 1
    chief = [p for p in cluster.observe(NAME, NODES).pods if p["metadata"]["labels"].get(LABEL_CHIEF) == "true"]
    assert len(chief) == 1

    pass_over(reconciler, cluster.job(NAME), unlabelled, NODES)  # the pod watch has not shown the label yet
    assert [r for r in cluster.writes("PATCH", "Pod") if LABEL_CHIEF in str(r.body)] == labels


def test_a_pass_two_status_writes_behind_the_job_watch_writes_its_status_at_once() -> None:
    cluster = InProcessApi(T0)
    cluster.create(job(NAME))
    reconciler = reconciler_for(cluster, NAME)
    before_any_write = cluster.job(NAME)
    nothing = cluster.observe(NAME, NODES)

    assert pass_over(reconciler, before_any_write, nothing, NODES) != CONFLICT_RETRY_SECONDS
    cluster.run_parameter_server(NAME, "cpu-0")
    assert pass_over(reconciler, before_any_write, cluster.observe(NAME, NODES), NODES) != CONFLICT_RETRY_SECONDS
    written = status_writes(cluster)
    assert written == 2

    worker = next(p for p in cluster.observe(NAME, NODES).pods if p["metadata"]["labels"][LABEL_ROLE] == Role.WORKER)
    cluster.run(name_of(worker), "gpu-0")
    # The job watch still shows the job from before both writes: the pass plans on the second, and its status
    # write (under the resourceVersion that write left) goes through.
    assert pass_over(reconciler, before_any_write, cluster.observe(NAME, NODES), NODES) != CONFLICT_RETRY_SECONDS
    assert status_writes(cluster) == written + 1


def pod(name: str, version: int, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(version), "labels": {LABEL_JOB: NAME, **labels}}}


def test_own_writes_show_until_the_indexes_catch_up() -> None:
    observed = Observed(pods=[pod("w-0", 10), pod("w-1", 12)])
    written = {
        ("Pod", "w-0"): pod("w-0", 11, **{LABEL_CHIEF: "true"}),  # labelled: newer than the index's
        ("Pod", "w-1"): pod("w-1", 11, **{LABEL_CHIEF: "true"}),  # the index already shows a newer one
        ("Pod", "w-2"): pod("w-2", 13),  # created, not indexed yet
        ("Service", NAME): {"metadata": {"name": NAME, "resourceVersion": "9"}},
        ("Lease", f"{NAME}-chief"): {"metadata": {"name": f"{NAME}-chief", "resourceVersion": "8"}},
    }
    add_own_writes(observed, written)
    assert [(name_of(p), p["metadata"]["resourceVersion"]) for p in observed.pods] == [
        ("w-0", "11"),
        ("w-1", "12"),
        ("w-2", "13"),
    ]
    assert ("Service", NAME) in observed.children
    assert observed.lease is not None
    assert set(written) == {("Pod", "w-0"), ("Pod", "w-2"), ("Service", NAME), ("Lease", f"{NAME}-chief")}

    caught_up = Observed(
        pods=[pod("w-0", 11), pod("w-1", 12)],  # w-2 not shown, but the watch is past its creation: deleted
        children={("Service", NAME): {"metadata": {"name": NAME, "resourceVersion": "9"}}},
        lease={"metadata": {"name": f"{NAME}-chief", "resourceVersion": "8"}},
    )
    caught_up.pods.append(pod("w-3", 20))
    add_own_writes(caught_up, written)
    assert written == {}
    assert sorted(name_of(p) for p in caught_up.pods) == ["w-0", "w-1", "w-3"]


def test_the_lease_as_the_operator_wrote_it_wakes_no_pass_but_any_other_version_does() -> None:
    ctx = OperatorContext(api=None, metrics=Metrics(CollectorRegistry()))  # type: ignore[arg-type]
    handlers = Handlers(ctx)
    labels = {LABEL_JOB: NAME}
    ours = {"metadata": {"name": f"{NAME}-chief", "namespace": NAMESPACE, "labels": labels, "resourceVersion": "6"}}
    ctx.state.job(KEY).lease_written = OwnWrite(frozenset({"5"}), copy.deepcopy(ours))
    renewed = {"metadata": {**ours["metadata"], "resourceVersion": "7"}}

    async def woken(body: dict[str, Any]) -> bool:
        ctx.state.loop = asyncio.get_running_loop()
        wakeup = ctx.state.job(KEY).wakeup
        wakeup.clear()
        handlers.changed([change_of("Lease", "MODIFIED", body)])  # type: ignore[list-item]
        return wakeup.is_set()

    assert not asyncio.run(woken(ours))
    assert asyncio.run(woken(renewed))  # a trainer's renewal: the pass reads its progress
    assert not ctx.our_lease_write(KEY, "Pod", ours)


def test_passes_coalesce_changes_until_the_job_first_runs_and_never_after() -> None:
    cluster = InProcessApi(T0)
    cluster.create(job(NAME))
    reconciler = reconciler_for(cluster, NAME)
    assert reconciler.coalesce_seconds() == START_UP_COALESCE_SECONDS  # the first pass runs at once regardless

    in_process_api.run_pass(reconciler, cluster, NAME, NODES)
    assert cluster.job(NAME)["status"]["phase"] == "Pending"
    assert reconciler.coalesce_seconds() == START_UP_COALESCE_SECONDS

    cluster.run_parameter_server(NAME, "cpu-0")
    workers = [p for p in cluster.observe(NAME, NODES).pods if p["metadata"]["labels"][LABEL_ROLE] == Role.WORKER]
    for i, worker in enumerate(workers):
        cluster.run(name_of(worker), f"gpu-{i}")
    for _ in range(2):  # the election, then the job runs
        in_process_api.run_pass(reconciler, cluster, NAME, NODES)
    assert cluster.job(NAME)["status"]["phase"] == "Running"
    assert reconciler.coalesce_seconds() == 0.0

    cluster.end(name_of(workers[0]), 143, "Terminated")  # a loss: Recovering, planned at once
    in_process_api.run_pass(reconciler, cluster, NAME, NODES)
    assert cluster.job(NAME)["status"]["phase"] in ("Recovering", "Running")
    assert reconciler.coalesce_seconds() == 0.0
