"""The fallback network: pods share the host's network stack, each with a 127.x address it binds."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ttj.kubeapi import KubeClient
from ttj_localcluster.cluster import LocalCluster
from ttj_localcluster.nodes.fleet import NodeFleet
from ttj_localcluster.nodes.pools import NodePool
from ttj_localcluster.nodes.runtime import namespaces_available
from ttj_localcluster.nodes.scheduler import Scheduler

from .conftest import wait_for

SERVER = textwrap.dedent(
    """
    import os, socket
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((os.environ["POD_IP"], 7000)); s.listen()
    while True:
        c, _ = s.accept(); c.sendall(b"pong"); c.close()
    """
)
CLIENT = textwrap.dedent(
    """
    import socket, time
    for _ in range(200):
        try:
            print(socket.create_connection(("srv.default.svc.cluster.local", 7000), timeout=2).recv(10).decode()); break
        except OSError:
            time.sleep(0.1)
    else:
        raise SystemExit("unreachable")
    """
)


def pod(name: str, code: str, labels: dict[str, str]) -> dict[str, object]:
    env = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "python:3.11", "command": ["python", "-c", code], "env": env}],
        },
    }


@pytest.mark.skipif(not namespaces_available(), reason="DNS names need root and unshare (per-pod /etc/hosts)")
def test_host_network_pods_talk_by_service_name(tmp_path: Path) -> None:
    fleet = NodeFleet([NodePool(name="cpu", nodes=1)], run_pods=True, state_dir=tmp_path, pod_network=False)
    with LocalCluster(addons=[fleet, Scheduler()]) as cluster:
        kube = KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "srv"},
            "spec": {"selector": {"app": "srv"}},
        }
        kube.request("POST", "/api/v1/namespaces/default/services", body=service)
        kube.request("POST", "/api/v1/namespaces/default/pods", body=pod("srv", SERVER, {"app": "srv"}))
        kube.request("POST", "/api/v1/namespaces/default/pods", body=pod("cli", CLIENT, {}))
        done = wait_for(
            lambda: (
                (kube.get("/api/v1/namespaces/default/pods/cli") or {}).get("status", {}).get("phase")
                in ("Succeeded", "Failed")
            ),
            what="client done",
        )
        assert done
        client = kube.get("/api/v1/namespaces/default/pods/cli")
        assert client is not None
        log_path = fleet.log_file("default", "cli")
        hosts = fleet.network.hosts_file("default", "cli").read_text()
        assert client["status"]["phase"] == "Succeeded", (log_path.read_text()[-300:] if log_path else "", hosts)
        assert client["status"]["podIP"].startswith("127.")
        assert fleet.podnet is None
        kube.close()
