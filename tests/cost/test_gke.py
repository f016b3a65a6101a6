"""The real ``google-cloud-container`` client (REST) against a local server that answers like GKE's v1 API."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials

from ttj.api.models import TransientTrainingJobSpec
from ttj.controller.placement import PlacementSource
from ttj.cost.gke import GkeError, GkeNodePools, GkeSettings, GkeSettingsError, make_client
from ttj.cost.pools import autoscaling_max_needed, validate_placement
from ttj.planner import Observed, plan
from ttj_contract import Provisioning

CLUSTER_PATH = "/v1/projects/my-project/locations/us-central1/clusters/training"
NODE_POOLS = {
    "nodePools": [
        {
            "name": "default-pool",
            "config": {"machineType": "e2-standard-4", "diskSizeGb": 100},
            "initialNodeCount": 1,
            "locations": ["us-central1-a", "us-central1-b"],
            "status": "RUNNING",
        },
        {
            "name": "t4-spot",
            "config": {
                "machineType": "n1-standard-4",
                "spot": True,
                "accelerators": [{"acceleratorCount": "1", "acceleratorType": "nvidia-tesla-t4"}],
                "labels": {"team": "ml"},
            },
            "initialNodeCount": 0,
            "autoscaling": {"enabled": True, "minNodeCount": 0, "maxNodeCount": 2},
            "locations": ["us-central1-a", "us-central1-b"],
            "status": "RUNNING",
        },
        {
            "name": "v100-preemptible",
            "config": {
                "machineType": "n1-standard-8",
                "preemptible": True,
                "accelerators": [{"acceleratorCount": "2", "acceleratorType": "nvidia-tesla-v100"}],
            },
            "autoscaling": {"enabled": True, "totalMinNodeCount": 1, "totalMaxNodeCount": 3},
            "locations": ["us-central1-a"],
            "status": "RUNNING",
        },
    ]
}


@dataclass
class FakeGke:
    url: str
    requests: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    #: Methods of the API answered 403 (e.g. ":setAutoscaling", for an account without container.clusters.update).
    forbidden: set[str] = field(default_factory=set)


@pytest.fixture
def gke() -> Iterator[FakeGke]:
    received: list[tuple[str, str, dict[str, Any]]] = []
    forbidden: set[str] = set()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            received.append(("GET", self.path.split("?")[0], {}))  # the client adds $alt=json
            if self.path.split("?")[0] == f"{CLUSTER_PATH}/nodePools":
                self._answer(200, NODE_POOLS)
            else:
                self._answer(404, {"error": {"code": 404, "message": "Not found", "status": "NOT_FOUND"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            received.append(("POST", self.path.split("?")[0], body))
            method = ":" + self.path.split("?")[0].rsplit(":", 1)[-1]
            if method == ":setAutoscaling" and method not in forbidden:
                self._answer(
                    200,
                    {
                        "name": "operation-1700000000000-abcdef",
                        "operationType": "SET_NODE_POOL_SIZE",
                        "status": "RUNNING",
                        "selfLink": f"https://container.googleapis.com{CLUSTER_PATH}/operations/operation-1",
                    },
                )
            else:
                self._answer(
                    403, {"error": {"code": 403, "message": "Permission denied", "status": "PERMISSION_DENIED"}}
                )

        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield FakeGke(url=f"http://127.0.0.1:{server.server_address[1]}", requests=received, forbidden=forbidden)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def pools_api(url: str, raise_autoscaling: bool = False) -> GkeNodePools:
    settings = GkeSettings.from_env(
        {
            "TTJ_GKE_PROJECT": "my-project",
            "TTJ_GKE_LOCATION": "us-central1",
            "TTJ_GKE_CLUSTER": "training",
            "TTJ_GKE_ENDPOINT": url,
            "TTJ_GKE_RAISE_AUTOSCALING": "true" if raise_autoscaling else "false",
        }
    )
    assert settings is not None
    return GkeNodePools(settings, client_factory=lambda s: make_client(s, credentials=AnonymousCredentials()))


def test_settings_are_all_or_nothing() -> None:
    assert GkeSettings.from_env({}) is None
    with pytest.raises(GkeSettingsError, match="missing: TTJ_GKE_CLUSTER"):
        GkeSettings.from_env({"TTJ_GKE_PROJECT": "p", "TTJ_GKE_LOCATION": "l"})
    with pytest.raises(GkeSettingsError, match="TTJ_GKE_RAISE_AUTOSCALING must be true or false"):
        GkeSettings.from_env(
            {
                "TTJ_GKE_PROJECT": "p",
                "TTJ_GKE_LOCATION": "l",
                "TTJ_GKE_CLUSTER": "c",
                "TTJ_GKE_RAISE_AUTOSCALING": "maybe",
            }
        )


def test_node_pools_are_read_through_the_real_client(gke: FakeGke) -> None:
    api = pools_api(gke.url)
    pools = {pool.name: pool for pool in api.list()}
    assert [request[:2] for request in gke.requests] == [("GET", f"{CLUSTER_PATH}/nodePools")]
    t4 = pools["t4-spot"]
    assert (t4.shape.machine_type, t4.shape.accelerator_type, t4.shape.accelerator_count) == (
        "n1-standard-4",
        "nvidia-tesla-t4",
        1,
    )
    assert t4.shape.provisioning == Provisioning.SPOT
    assert (t4.min_nodes, t4.max_nodes, t4.zone_count) == (0, 4, 2)  # per-zone bounds x 2 zones
    assert t4.labels["team"] == "ml"
    assert t4.labels["cloud.google.com/gke-spot"] == "true"
    v100 = pools["v100-preemptible"]
    assert (v100.shape.provisioning, v100.max_nodes, v100.total_bounds) == (Provisioning.PREEMPTIBLE, 3, True)
    assert pools["default-pool"].shape.provisioning == Provisioning.ON_DEMAND
    assert not pools["default-pool"].autoscaling
    api.list()
    assert len(gke.requests) == 1  # cached


def test_api_pools_validate_jobs_like_node_labels_do(gke: FakeGke) -> None:
    pools = pools_api(gke.url).list()
    fits = TransientTrainingJobSpec.model_validate(
        {"trainSteps": 1, "checkpoint": {"uri": "/c"}, "workers": {"replicas": 4, "nodeSelector": {"team": "ml"}}}
    )
    check = validate_placement(fits, pools)
    assert check.ok
    assert check.worker_capacity == 4
    wrong = TransientTrainingJobSpec.model_validate(
        {"trainSteps": 1, "checkpoint": {"uri": "/c"}, "workers": {"acceleratorType": "nvidia-l4"}}
    )
    check = validate_placement(wrong, pools)
    assert check.reason == "Unschedulable"
    assert "no node pool has spot nodes with 1 x nvidia-l4" in check.message


def test_raising_the_autoscaling_maximum_posts_set_autoscaling(gke: FakeGke) -> None:
    spec = TransientTrainingJobSpec.model_validate(
        {"trainSteps": 1, "checkpoint": {"uri": "/c"}, "workers": {"replicas": 4, "maxReplicas": 7}}
    )
    off = pools_api(gke.url)
    t4 = next(pool for pool in off.list() if pool.name == "t4-spot")
    needed = autoscaling_max_needed(spec, t4)
    assert needed == 7
    assert off.raise_autoscaling_max(t4, needed) is None  # off by default: nothing sent
    assert all(method == "GET" for method, _, _ in gke.requests)

    on = pools_api(gke.url, raise_autoscaling=True)
    assert on.raise_autoscaling_max(t4, needed) == "operation-1700000000000-abcdef"
    method, path, body = gke.requests[-1]
    assert (method, path.split("?")[0]) == ("POST", f"{CLUSTER_PATH}/nodePools/t4-spot:setAutoscaling")
    assert body["autoscaling"] == {"enabled": True, "maxNodeCount": 4}  # 7 over 2 zones, rounded up; min 0 omitted

    v100 = next(pool for pool in on.list(refresh=True) if pool.name == "v100-preemptible")
    on.raise_autoscaling_max(v100, 5)
    assert gke.requests[-1][2]["autoscaling"] == {"enabled": True, "totalMinNodeCount": 1, "totalMaxNodeCount": 5}


def test_api_errors_say_which_call_failed(gke: FakeGke) -> None:
    settings = GkeSettings("other-project", "us-central1", "training", endpoint=gke.url)
    api = GkeNodePools(settings, client_factory=lambda s: make_client(s, credentials=AnonymousCredentials()))
    with pytest.raises(
        GkeError,
        match="listing the node pools of projects/other-project/locations/us-central1/clusters/training failed",
    ):
        api.list()


def test_the_operator_raises_a_pool_too_small_for_the_jobs_slots_once_and_says_so(gke: FakeGke) -> None:
    """TTJ_GKE_RAISE_AUTOSCALING=true end to end: the placement check of a job whose 7 worker slots the matching
    spot T4 pool (at most 4 nodes) cannot hold raises that pool's maximum through the real client, once, and the
    job's pass posts a Normal AutoscalingRaised Event naming the pool, the maxima and the GKE operation."""
    job_spec = {"trainSteps": 1, "checkpoint": {"uri": "/c"}, "workers": {"replicas": 4, "maxReplicas": 7}}
    job_spec["workers"]["nodeSelector"] = {"team": "ml"}
    source = PlacementSource(pools_api(gke.url, raise_autoscaling=True))

    check = asyncio.run(source.check(job_spec, list))
    assert check is not None
    assert check.ok
    posts = [(method, path) for method, path, _ in gke.requests if method == "POST"]
    assert posts == [("POST", f"{CLUSTER_PATH}/nodePools/t4-spot:setAutoscaling")]
    assert check.raised == (
        "node pool t4-spot: autoscaling maximum raised from 4 nodes to 7 nodes for the job's 7 worker slots "
        "(GKE operation operation-1700000000000-abcdef)"
    )
    again = asyncio.run(source.check(job_spec, list))
    assert again is not None
    assert again.raised == ""
    assert [method for method, _, _ in gke.requests].count("POST") == 1  # asked once

    manifest = {"apiVersion": "transient.training/v1alpha1", "kind": "TransientTrainingJob", "spec": job_spec}
    manifest["metadata"] = {"name": "big", "namespace": "ns", "uid": "u", "generation": 1}
    planned = plan(manifest, Observed(placement=check), datetime(2026, 11, 28, tzinfo=UTC))
    assert [(e.type, e.reason, e.message) for e in planned.events if e.reason.startswith("Autoscaling")] == [
        ("Normal", "AutoscalingRaised", check.raised)
    ]


def test_the_off_switch_and_a_refused_raise(gke: FakeGke) -> None:
    """Off by default: nothing is sent. A raise GKE refuses (403 here) is a Warning Event, asked once."""
    job_spec = {"trainSteps": 1, "checkpoint": {"uri": "/c"}, "workers": {"replicas": 4, "maxReplicas": 7}}
    job_spec["workers"]["nodeSelector"] = {"team": "ml"}
    off = asyncio.run(PlacementSource(pools_api(gke.url)).check(job_spec, list))
    assert off is not None
    assert (off.raised, off.raise_failed) == ("", "")
    assert all(method == "GET" for method, _, _ in gke.requests)

    gke.forbidden.add(":setAutoscaling")
    source = PlacementSource(pools_api(gke.url, raise_autoscaling=True))
    refused = asyncio.run(source.check(job_spec, list))
    assert refused is not None
    assert refused.raise_failed.startswith(
        "node pool t4-spot: its autoscaling maximum could not be raised to 7 nodes: "
    )
    assert "Permission denied" in refused.raise_failed
    assert asyncio.run(source.check(job_spec, list)).raise_failed == ""  # type: ignore[union-attr]
    assert [method for method, _, _ in gke.requests].count("POST") == 1
