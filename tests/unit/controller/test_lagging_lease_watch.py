"""A pass whose Lease watch lags must not record an election the Lease does not hold, nor lose a round trip
to a precondition its own pass made stale.

The first pass creates the chief Lease without a holder (no worker runs yet). If the operator's
Lease watch has not delivered it when the workers start running, the next pass sees no Lease, elects
a chief inside a fresh Lease create, and gets 409 AlreadyExists. Taking that 409 as "the intent
holds" wrote chief epoch 1 into the status while the Lease stayed holderless; the pass after it saw
the holderless Lease and elected again, at epoch 2 (the e2e flake under CPU load).
"""

from __future__ import annotations

from typing import Any

from tests.unit.controller import in_process_api
from tests.unit.controller.in_process_api import InProcessApi, reconciler_for
from tests.unit.planner.builders import T0, job, node
from ttj.controller.reconciler import CONFLICT_RETRY_SECONDS, JobReconciler
from ttj.kubeapi import KubeError
from ttj_contract import KIND, LABEL_ROLE, Role

NAME = "mnist"
NODES = {n["metadata"]["name"]: n for n in [node(f"gpu-{i}") for i in range(3)] + [node("cpu-0", "on-demand")]}


def run_pass(
    reconciler: JobReconciler, cluster: InProcessApi, *, lease_seen: bool = True, lease: dict[str, Any] | None = None
) -> float | None:
    """One pass over what the watches show: the cluster, with or without the Lease, or with an older Lease."""
    return in_process_api.run_pass(reconciler, cluster, NAME, NODES, lease_seen=lease_seen, lease=lease)


def status_writes(cluster: InProcessApi) -> list[dict[str, Any]]:
    return [r.body["status"] for r in cluster.writes("PATCH", KIND) if r.path.endswith("/status")]


def test_an_election_refused_by_an_existing_lease_is_not_recorded() -> None:
    cluster = InProcessApi(T0)
    cluster.create(job(NAME))
    reconciler = reconciler_for(cluster, NAME)

    run_pass(reconciler, cluster, lease_seen=True)  # children and a holderless Lease
    lease = cluster.observe(NAME, NODES).lease
    assert lease is not None
    assert not lease["spec"].get("holderIdentity")
    cluster.run_parameter_server(NAME, "cpu-0")
    workers = [p for p in cluster.observe(NAME, NODES).pods if p["metadata"]["labels"][LABEL_ROLE] == Role.WORKER]
    for i, pod in enumerate(workers):
        cluster.run(pod["metadata"]["name"], f"gpu-{i}")
    written = len(status_writes(cluster))

    # A restarted operator (which remembers no Lease of its own making) whose Lease watch lags: the pass sees no
    # Lease, elects in a create, and the API refuses it.
    reconciler = reconciler_for(cluster, NAME)
    delay = run_pass(reconciler, cluster, lease_seen=False)
    assert delay is not None
    assert delay < 1
    assert len(status_writes(cluster)) == written  # no chief recorded that the Lease does not hold
    assert [r.body["spec"]["holderIdentity"] for r in cluster.writes("POST", "Lease")[1:]]  # the refused election
    lease = cluster.observe(NAME, NODES).lease
    assert lease is not None
    assert not lease["spec"].get("holderIdentity")

    # The watch catches up: one election, epoch 1, held by the Lease and told by the status.
    run_pass(reconciler, cluster, lease_seen=True)
    status = status_writes(cluster)[-1]
    assert status["chiefElections"] == 1
    assert status["chief"]["epoch"] == 1
    lease = cluster.observe(NAME, NODES).lease
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == status["chief"]["pod"]
    assert lease["spec"]["leaseTransitions"] == 1


def started(cluster: InProcessApi, reconciler: JobReconciler) -> list[str]:
    """The job's children made, its workers running, its chief elected; the workers' names."""
    run_pass(reconciler, cluster, lease_seen=True)
    cluster.run_parameter_server(NAME, "cpu-0")
    workers = [p for p in cluster.observe(NAME, NODES).pods if p["metadata"]["labels"][LABEL_ROLE] == Role.WORKER]
    for i, pod in enumerate(workers):
        cluster.run(pod["metadata"]["name"], f"gpu-{i}")
    run_pass(reconciler, cluster, lease_seen=True)
    return [p["metadata"]["name"] for p in workers]


def three_workers_running(cluster: InProcessApi, kube: Any) -> tuple[JobReconciler, str, str, dict[str, Any] | None]:
    """A job of three workers started on ``cluster`` by an operator writing through ``kube``: its reconciler, its
    chief, another worker, and its Lease."""
    cluster.create(job(NAME, workers={"replicas": 3}))
    reconciler = reconciler_for(kube, NAME)
    workers = started(cluster, reconciler)
    chief = status_writes(cluster)[-1]["chief"]["pod"]
    other = next(w for w in workers if w != chief)
    return reconciler, chief, other, cluster.observe(NAME, NODES).lease


def test_an_election_right_after_a_lease_write_the_watch_has_not_shown_goes_through_in_one_pass() -> None:
    cluster = InProcessApi(T0)
    reconciler, chief, other, before = three_workers_running(cluster, cluster)

    # A worker is preempted: its pass replaces it and publishes the counts on the Lease.
    cluster.end(other, 143, "Terminated")
    run_pass(reconciler, cluster, lease_seen=True)
    counts = cluster.writes("PATCH", "Lease")[-1]
    assert "resourceVersion" not in counts.body.get("metadata", {})
    after_counts = cluster.observe(NAME, NODES).lease
    assert after_counts is not None
    # Then the chief stops, while the Lease watch still shows the Lease from before that write.
    cluster.end(chief, 143, "Terminated")
    delay = run_pass(reconciler, cluster, lease=before)

    election = cluster.writes("PATCH", "Lease")[-1]
    assert election.body["metadata"]["resourceVersion"] == after_counts["metadata"]["resourceVersion"]
    assert delay != CONFLICT_RETRY_SECONDS  # not planned again after a 409
    lease = cluster.observe(NAME, NODES).lease
    assert lease is not None
    assert status_writes(cluster)[-1]["chief"]["epoch"] == 2
    assert lease["spec"]["holderIdentity"] == status_writes(cluster)[-1]["chief"]["pod"] != chief


class RefusingStatus:
    """The cluster, but once ``refuse`` is set the next status write is refused: the job changed since the pass
    read it."""

    def __init__(self, cluster: InProcessApi) -> None:
        self.cluster = cluster
        self.refuse = False

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        if self.refuse and method == "PATCH" and path.endswith("/status"):
            self.refuse = False
            raise KubeError(409, '{"message": "the object has been modified"}')
        return self.cluster.request(method, path, **kwargs)


def test_a_pass_whose_status_write_is_refused_still_remembers_the_lease_its_writes_left() -> None:
    cluster = InProcessApi(T0)
    refusing = RefusingStatus(cluster)
    reconciler, chief, other, before = three_workers_running(cluster, refusing)

    # A worker is preempted: its pass publishes the counts on the Lease, then its status write is refused.
    cluster.end(other, 143, "Terminated")
    refusing.refuse = True
    assert run_pass(reconciler, cluster) == CONFLICT_RETRY_SECONDS
    after_counts = cluster.observe(NAME, NODES).lease
    assert after_counts is not None
    assert after_counts["metadata"]["resourceVersion"] != (before or {})["metadata"]["resourceVersion"]

    # The chief stops while the Lease watch still shows the Lease from before the counts: the election
    # carries the version the counts left, as the refused pass remembered it.
    cluster.end(chief, 143, "Terminated")
    delay = run_pass(reconciler, cluster, lease=before)
    election = cluster.writes("PATCH", "Lease")[-1]
    assert election.body["metadata"]["resourceVersion"] == after_counts["metadata"]["resourceVersion"]
    assert delay != CONFLICT_RETRY_SECONDS
