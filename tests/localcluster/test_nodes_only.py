"""Nodes only: the simulated nodes attach to an API server they did not start, here a local one serving HTTPS
with a certificate of its own CA (as kind, k3s or a kube-apiserver do), through ``ttj local-cluster
--nodes-only``. Pods reach that API through the relay on the pod network's gateway and verify its
certificate by the original host name (``tls-server-name``)."""

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

from ttj.kubeapi import KubeClient
from ttj_localcluster.cluster import LocalCluster
from ttj_localcluster.nodes.netns import PodNetworkNamespaces
from ttj_localcluster.nodes.pod_networking import relayed_kubeconfig

from .conftest import wait_for


@pytest.fixture(scope="module")
def https_api() -> Iterator[LocalCluster]:
    """An API server only (no nodes, scheduler or controllers of its own), serving HTTPS with a certificate of
    its own CA that names 127.0.0.1 but not the pod network's gateway."""
    with LocalCluster(tls=True) as cluster:
        yield cluster


def test_relayed_kubeconfig_keeps_the_server_name_for_tls() -> None:
    config = {
        "clusters": [
            {"name": "other", "cluster": {"server": "https://other.example:443"}},
            {"name": "real", "cluster": {"server": "https://api.example.com:6443", "certificate-authority-data": "x"}},
        ],
        "contexts": [{"name": "ctx", "context": {"cluster": "real", "user": "u"}}],
        "current-context": "ctx",
    }
    relayed = relayed_kubeconfig(config, "10.200.0.1", 40000)
    cluster = relayed["clusters"][1]["cluster"]
    assert cluster == {
        "server": "https://10.200.0.1:40000",
        "certificate-authority-data": "x",
        "tls-server-name": "api.example.com",
    }
    assert config["clusters"][1]["cluster"]["server"] == "https://api.example.com:6443"  # not changed in place
    plain = relayed_kubeconfig({"clusters": [{"name": "l", "cluster": {"server": "http://127.0.0.1:8080"}}]}, "g", 1)
    assert plain["clusters"][0]["cluster"] == {"server": "http://g:1"}


def test_the_https_api_server_publishes_its_ca(https_api: LocalCluster) -> None:
    assert https_api.url.startswith("https://127.0.0.1:")
    kube = KubeClient.from_kubeconfig(https_api.kubeconfig_path)  # verifies the certificate with the CA
    try:
        published = kube.get("/api/v1/namespaces/default/configmaps/kube-root-ca.crt")
    finally:
        kube.close()
    assert published is not None
    assert https_api.server.certificates is not None
    assert published["data"] == {"ca.crt": https_api.server.certificates.ca_pem.decode()}


def test_nodes_only_runs_a_pod_that_reads_the_api_over_tls(https_api: LocalCluster, tmp_path: Path) -> None:
    state = tmp_path / "state"
    command = [
        sys.executable,
        "-c",
        "from ttj_localcluster.cli import run; raise SystemExit(run())",
        "--nodes-only",
        "--with-scheduler",
        "--kubeconfig",
        https_api.kubeconfig_path,
        "--pool",
        "name=attached,nodes=1",
        "--state-dir",
        str(state),
    ]
    log = (tmp_path / "nodes.log").open("w")
    nodes = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy())
    kube = KubeClient.from_kubeconfig(https_api.kubeconfig_path)
    try:
        wait_for(lambda: kube.request("GET", "/api/v1/nodes").get("items"), timeout=60, what="a node to register")
        reader = (
            "from kubernetes import client, config\n"
            "config.load_kube_config()\n"
            "name = client.CoreV1Api().read_namespace('default').metadata.name\n"
            "open('/dev/termination-log', 'w').write('read namespace ' + name)\n"
        )
        pod = {
            "metadata": {"name": "reader"},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "python", "command": ["python", "-c", reader]}],
            },
        }
        kube.create("/api/v1/namespaces/default/pods", pod)

        def finished() -> dict[str, Any] | None:
            current = kube.get("/api/v1/namespaces/default/pods/reader") or {}
            return current if (current.get("status") or {}).get("phase") in ("Succeeded", "Failed") else None

        done = wait_for(finished, timeout=120, what="the pod to finish")
        terminated = done["status"]["containerStatuses"][0]["state"]["terminated"]
        assert done["status"]["phase"] == "Succeeded", terminated
        assert terminated["message"] == "read namespace default"
        if PodNetworkNamespaces.available():
            pod_config = yaml.safe_load((state / "pod-kubeconfig").read_text())
            cluster = pod_config["clusters"][0]["cluster"]
            assert cluster["tls-server-name"] == "127.0.0.1"
            assert not cluster["server"].startswith("https://127.0.0.1:")  # through the gateway's relay
        kube.delete("/api/v1/namespaces/default/pods/reader", grace_seconds=0)
    finally:
        kube.close()
        nodes.send_signal(signal.SIGTERM)
        try:
            nodes.wait(timeout=30)
        except subprocess.TimeoutExpired:
            nodes.kill()
            nodes.wait()
        log.close()
    assert nodes.returncode == 0, (tmp_path / "nodes.log").read_text()
    assert "attached to the API server" in (tmp_path / "nodes.log").read_text()
