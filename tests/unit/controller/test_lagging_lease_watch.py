"""A pass whose Lease watch lags must not record an election the Lease does not hold.

The first pass creates the chief Lease without a holder (no worker runs yet). If the operator's
Lease watch has not delivered it when the workers start running, the next pass sees no Lease, elects
a chief inside a fresh Lease create, and gets 409 AlreadyExists. Taking that 409 as "the intent
holds" wrote chief epoch 1 into the status while the Lease stayed holderless; the pass after it saw
the holderless Lease and elected again, at epoch 2 (the e2e flake under CPU load).
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry

from tests.unit.planner.builders import T0, job, node, pods, run_pod, run_ps
from ttj.controller.apply import Applier
from ttj.controller.handlers import JobReconciler, OperatorContext
from ttj.controller.metrics import Metrics
from ttj.planner.world import World

KEY = ("ns", "mnist")


class RecordingApi(Applier):
    """An API server just big enough for one job's pass: objects by path, 409s as the real one answers."""

    def __init__(self) -> None:
        super().__init__(None)  # type: ignore[arg-type]
        self.objects: dict[str, dict[str, Any]] = {}
        self.status_writes: list[dict[str, Any]] = []
        self.version = 100

    def _bump(self, obj: dict[str, Any]) -> None:
        self.version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)

    def _call(self, method: str, path: str, body: Any = None, content_type: str | None = None) -> Any:
        if method == "POST":
            if path.endswith("/events"):
                return {}
            where = f"{path}/{body['metadata']['name']}"
            if where in self.objects:
                raise ApiException(status=409, reason="AlreadyExists")
            self.objects[where] = copy.deepcopy(body)
            self._bump(self.objects[where])
            return self.objects[where]
        if method == "PATCH" and path.endswith("/status"):
            self.status_writes.append(body["status"])
            self.version += 1
            return {"metadata": {"resourceVersion": str(self.version)}, "status": body["status"]}
        if method == "PATCH":
            current = self.objects.get(path)
            if current is None:
                raise ApiException(status=404, reason="NotFound")
            wanted = (body.get("metadata") or {}).get("resourceVersion")
            if wanted and wanted != current["metadata"]["resourceVersion"]:
                raise ApiException(status=409, reason="Conflict")
            for part in ("spec", "metadata"):
                for field, value in (body.get(part) or {}).items():
                    if isinstance(value, dict):
                        current.setdefault(part, {}).setdefault(field, {}).update(value)
                    elif field != "resourceVersion":
                        current.setdefault(part, {})[field] = value
            self._bump(current)
            return current
        return {}


def test_an_election_refused_by_an_existing_lease_is_not_recorded() -> None:
    world = World(job())
    for i in range(3):
        world.observed.nodes[f"gpu-{i}"] = node(f"gpu-{i}")
    world.observed.nodes["cpu-0"] = node("cpu-0", "on-demand")
    world.reconcile(T0)  # children and a holderless Lease
    lease = world.observed.lease
    assert lease is not None
    assert not lease["spec"].get("holderIdentity")
    run_ps(world, "mnist-ps-0-abc")
    for i, pod in enumerate(pods(world)):
        run_pod(world, pod["metadata"]["name"], f"gpu-{i}")

    api = RecordingApi()
    lease_path = api.path("Lease", "ns", lease["metadata"]["name"])
    api.objects[lease_path] = copy.deepcopy(lease)
    ctx = OperatorContext(api=None, metrics=Metrics(CollectorRegistry()), clock=lambda: T0)  # type: ignore[arg-type]
    reconciler = JobReconciler(ctx, KEY)
    reconciler.applier = api
    pods_by_job = {KEY: [("Pod", p["metadata"]["name"], p) for p in world.observed.pods]}
    nodes_by_name = {name: [n] for name, n in world.observed.nodes.items()}

    # The Lease watch lags: the pass sees no Lease, elects in a create, and the API refuses it.
    lagging: dict[Any, Any] = {}
    delay = asyncio.run(reconciler.run_pass(copy.deepcopy(world.job), pods_by_job, lagging, [], nodes_by_name))
    assert delay is not None
    assert delay < 1
    assert api.status_writes == []  # no chief recorded that the Lease does not hold
    assert not api.objects[lease_path]["spec"].get("holderIdentity")

    # The watch catches up: one election, epoch 1, held by the Lease and told by the status.
    caught_up = {KEY: [("Lease", lease["metadata"]["name"], copy.deepcopy(api.objects[lease_path]))]}
    asyncio.run(reconciler.run_pass(copy.deepcopy(world.job), pods_by_job, caught_up, [], nodes_by_name))
    status = api.status_writes[-1]
    assert status["chiefElections"] == 1
    assert status["chief"]["epoch"] == 1
    held = api.objects[lease_path]["spec"]
    assert held["holderIdentity"] == status["chief"]["pod"]
    assert held["leaseTransitions"] == 1
