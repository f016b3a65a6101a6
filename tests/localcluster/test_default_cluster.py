"""`ttj local-cluster` as users start it: no pool options, the kubeconfig written as soon as the API answers,
the contract's default pools, and the examples' pods (built as the operator builds them) scheduled on them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.pod_prerequisites import collection_path, named_objects, template_pod_specs
from ttj import kubeapi
from ttj.api.models import JobRef, TransientTrainingJobSpec
from ttj.kubeapi import KubeClient
from ttj.planner.children import ps_deployment, trainer_rbac, worker_pod
from ttj_localcluster.nodes.pools import DEFAULT_CPU_POOL, DEFAULT_GPU_NODES, DEFAULT_GPU_POOL, default_pools

from .conftest import wait_for

REPO = Path(__file__).resolve().parents[2]
CRD_PATH = REPO / "crds" / "transient.training_transienttrainingjobs.yaml"
EXAMPLES = ("minimal", "full", "demo")
GROUP_PATH = "/apis/transient.training/v1alpha1"
POOL_LABEL = "cloud.google.com/gke-nodepool"


@pytest.fixture(scope="module")
def default_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeClient]:
    """The command itself, with the default pools; pods are simulated (Running without a process)."""
    workdir = tmp_path_factory.mktemp("default-cluster")
    kubeconfig = workdir / "kubeconfig"
    command = [sys.executable, "-m", "ttj", "local-cluster", "--kubeconfig", str(kubeconfig), "--simulate-pods"]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=open(workdir / "stderr.log", "wb"),  # noqa: SIM115 - closed with the process
        text=True,
        cwd=workdir,
    )
    try:
        assert process.stdout is not None
        serving = process.stdout.readline()
        assert "serving" in serving, (serving, (workdir / "stderr.log").read_text())
        # The kubeconfig exists, and the API answers, before the add-ons report that nodes are registered.
        assert kubeconfig.is_file()
        kube = KubeClient.from_kubeconfig(str(kubeconfig))
        assert kube.request("GET", "/version")["gitVersion"]
        registered = process.stdout.readline()
        assert "nodes registered" in registered, (registered, (workdir / "stderr.log").read_text())
        yield kube
        kube.close()
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def nodes_by_pool(kube: KubeClient) -> dict[str, list[dict[str, Any]]]:
    pools: dict[str, list[dict[str, Any]]] = {}
    for node in kube.request("GET", "/api/v1/nodes")["items"]:
        pools.setdefault(node["metadata"]["labels"][POOL_LABEL], []).append(node)
    return pools


def test_nodes_are_registered_and_ready_when_the_command_says_so(default_cluster: KubeClient) -> None:
    pools = nodes_by_pool(default_cluster)
    assert {name: len(nodes) for name, nodes in pools.items()} == {p.name: p.nodes for p in default_pools()}
    for nodes in pools.values():
        for node in nodes:
            ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
            assert [c["status"] for c in ready] == ["True"], node["metadata"]["name"]


def test_default_pools_are_an_on_demand_cpu_pool_and_a_spot_t4_pool(default_cluster: KubeClient) -> None:
    pools = nodes_by_pool(default_cluster)
    for node in pools[DEFAULT_CPU_POOL]:
        labels = node["metadata"]["labels"]
        assert labels["cloud.google.com/gke-provisioning"] == "standard"
        assert "cloud.google.com/gke-spot" not in labels
        assert "cloud.google.com/gke-accelerator" not in labels
        assert not node["spec"].get("taints")
    assert len(pools[DEFAULT_GPU_POOL]) == DEFAULT_GPU_NODES
    for node in pools[DEFAULT_GPU_POOL]:
        labels = node["metadata"]["labels"]
        assert labels["cloud.google.com/gke-spot"] == "true"
        assert labels["cloud.google.com/gke-accelerator"] == "nvidia-tesla-t4"
        assert node["status"]["capacity"]["nvidia.com/gpu"] == "1"
        assert node["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]


def create_job(kube: KubeClient, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
    job = dict(manifest)
    job["metadata"] = {**manifest["metadata"], "namespace": namespace}
    return kube.request("POST", f"{GROUP_PATH}/namespaces/{namespace}/transienttrainingjobs", body=job)


def without_operator_finalizer(pod: dict[str, Any]) -> dict[str, Any]:
    # No operator runs here to release its finalizer; without it the namespace could not be deleted.
    pod["metadata"].pop("finalizers", None)
    return pod


def node_pool(kube: KubeClient, node_name: str) -> str:
    node = kube.request("GET", f"/api/v1/nodes/{node_name}")
    return str(node["metadata"]["labels"][POOL_LABEL])


def running_pods(kube: KubeClient, namespace: str, selector: str) -> list[dict[str, Any]]:
    pods = kube.request("GET", f"/api/v1/namespaces/{namespace}/pods", query=[("labelSelector", selector)])["items"]
    return [p for p in pods if p.get("status", {}).get("phase") == "Running"]


def create_trainer_identity(kube: KubeClient, namespace: str, job: dict[str, Any]) -> None:
    """The job's ServiceAccount (and its Role and binding), as the operator creates them before any pod: the
    API refuses a pod whose service account does not exist. The account and PriorityClasses the job's
    templates name are the user's to create (examples/full.yaml names them), so they are made here as its user
    would."""
    for obj in named_objects(template_pod_specs(job["spec"])):
        kube.create(collection_path(obj, namespace), obj)  # None when it exists already
    spec = TransientTrainingJobSpec.model_validate(job["spec"])
    for child in trainer_rbac(JobRef.of(job), spec):
        kube.request("POST", kubeapi.path(child["kind"], namespace), body=child)


def test_the_examples_schedule_on_the_default_pools(default_cluster: KubeClient) -> None:
    kube = default_cluster
    kube.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", yaml.safe_load(CRD_PATH.read_text()))
    wait_for(lambda: kube.get(f"{GROUP_PATH}/transienttrainingjobs"), what="the CRD to be served")
    namespace = "examples"
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    expected_workers = 0
    for example in EXAMPLES:
        manifest = yaml.safe_load((REPO / "examples" / f"{example}.yaml").read_text())
        job = create_job(kube, namespace, manifest)  # the CRD (schema, CEL rules) accepts it
        spec = TransientTrainingJobSpec.model_validate(job["spec"])
        create_trainer_identity(kube, namespace, job)
        for index in range(spec.parameter_servers.replicas):
            kube.request(
                "POST",
                f"/apis/apps/v1/namespaces/{namespace}/deployments",
                body=ps_deployment(JobRef.of(job), spec, index),
            )
        for slot in range(spec.workers.replicas):
            kube.request(
                "POST",
                f"/api/v1/namespaces/{namespace}/pods",
                body=without_operator_finalizer(worker_pod(JobRef.of(job), spec, slot, 0)),
            )
        expected_workers += spec.workers.replicas
    assert expected_workers <= DEFAULT_GPU_NODES

    workers = wait_for(
        lambda: (
            (pods := running_pods(kube, namespace, "transient.training/role=worker"))
            and len(pods) == expected_workers
            and pods
        ),
        timeout=60,
        what=f"{expected_workers} worker pods Running",
    )
    assert {node_pool(kube, p["spec"]["nodeName"]) for p in workers} == {DEFAULT_GPU_POOL}
    assert len({p["spec"]["nodeName"] for p in workers}) == expected_workers  # one T4 per node
    servers = wait_for(
        lambda: (
            (pods := running_pods(kube, namespace, "transient.training/role=ps"))
            and len(pods) == len(EXAMPLES)
            and pods
        ),
        timeout=60,
        what="a parameter server per example Running",
    )
    assert {node_pool(kube, p["spec"]["nodeName"]) for p in servers} == {DEFAULT_CPU_POOL}


def test_the_full_example_at_max_replicas_fits_the_t4_spot_pool(default_cluster: KubeClient) -> None:
    """examples/full.yaml selects the pool `t4-spot` by name and may grow to maxReplicas (8) workers."""
    kube = default_cluster
    namespace = "full-at-max"
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    wait_for(lambda: kube.get(f"{GROUP_PATH}/transienttrainingjobs"), what="the CRD to be served")
    # the previous test's pods hold GPUs: wait until they are gone (or were never created)
    kube.delete("/api/v1/namespaces/examples")
    wait_for(lambda: kube.get("/api/v1/namespaces/examples") is None, timeout=60, what="namespace examples deleted")
    manifest = yaml.safe_load((REPO / "examples" / "full.yaml").read_text())
    manifest["spec"]["workers"]["replicas"] = manifest["spec"]["workers"]["maxReplicas"]
    job = create_job(kube, namespace, manifest)
    spec = TransientTrainingJobSpec.model_validate(job["spec"])
    assert spec.workers.node_selector == {POOL_LABEL: DEFAULT_GPU_POOL}
    create_trainer_identity(kube, namespace, job)
    for slot in range(spec.workers.slots):
        kube.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/pods",
            body=without_operator_finalizer(worker_pod(JobRef.of(job), spec, slot, 0)),
        )
    workers = wait_for(
        lambda: (
            (pods := running_pods(kube, namespace, "transient.training/role=worker"))
            and len(pods) == spec.workers.slots
            and pods
        ),
        timeout=60,
        what=f"{spec.workers.slots} workers of the full example Running",
    )
    assert {node_pool(kube, p["spec"]["nodeName"]) for p in workers} == {DEFAULT_GPU_POOL}


def test_bad_pool_options_fail_before_a_kubeconfig_is_written(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    result = subprocess.run(
        [sys.executable, "-m", "ttj", "local-cluster", "--kubeconfig", str(kubeconfig), "--pool", "name=x,nodes=-1"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
        check=False,
    )
    assert result.returncode != 0
    assert "nodes must be >= 0" in result.stderr
    assert not kubeconfig.exists()
