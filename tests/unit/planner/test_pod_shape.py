"""The pods a job's spec makes: default requests, the per-role pod template, the restricted profile."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.planner.builders import job
from ttj.api.models import TransientTrainingJobSpec
from ttj.planner import children


def spec_of(**fields: Any) -> TransientTrainingJobSpec:
    return TransientTrainingJobSpec.model_validate(job(**fields)["spec"])


def worker(**fields: Any) -> dict[str, Any]:
    return children.worker_pod(job(**fields), spec_of(**fields), 0, 1)


def ps_pod_spec(**fields: Any) -> dict[str, Any]:
    spec: dict[str, Any] = children.ps_deployment(job(**fields), spec_of(**fields), 0)["spec"]["template"]["spec"]
    return spec


def trainer(pod_spec: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = pod_spec["containers"][0]
    return container


# -- default requests: namespaces with a ResourceQuota on cpu/memory accept the pods ----------------
def test_workers_and_parameter_servers_request_cpu_and_memory_by_default() -> None:
    for pod_spec in (worker()["spec"], ps_pod_spec()):
        requests = trainer(pod_spec)["resources"]["requests"]
        assert set(requests) >= {"cpu", "memory"}


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        ({"requests": {"cpu": "3"}}, {"cpu": "3", "memory": children.DEFAULT_WORKER_REQUESTS["memory"]}),
        # a limit alone is also the request (the API server defaults it so): no default may exceed it
        ({"limits": {"cpu": "100m", "memory": "64Mi"}}, None),
    ],
)
def test_given_resources_win_over_the_defaults(resources: dict[str, Any], expected: dict[str, str] | None) -> None:
    container = trainer(worker(workers={"resources": resources})["spec"])
    assert container["resources"].get("requests") == expected
