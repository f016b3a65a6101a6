"""Support for the operator's end-to-end tests: the operator as a real process, and a small stand-in
for scheduler + kubelet + Deployment controller that runs no containers (pods "run" by status only),
so that preemptions can be injected exactly. Needs the embedded cluster (it writes pod status and
nodes, which a real cluster's kubelets own)."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

ROOT = Path(__file__).resolve().parents[2]
JOB = "transient.training/job-name"


def now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def install_crd(api: client.ApiClient) -> None:
    crd = yaml.safe_load((ROOT / "crds" / "transient.training_transienttrainingjobs.yaml").read_text())
    ext = client.ApiextensionsV1Api(api)
    try:
        ext.create_custom_resource_definition(crd)
    except ApiException as exc:
        if exc.status != 409:
            raise
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            client.CustomObjectsApi(api).list_namespaced_custom_object(
                "transient.training", "v1alpha1", "default", "transienttrainingjobs"
            )
            return
        except ApiException:
            time.sleep(0.2)


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    """Poll until ``check`` returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except ApiException as exc:
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


class OperatorProcess:
    """``ttj operator`` in a subprocess, so a test can kill it at any moment and start it again."""

    def __init__(self, kubeconfig: str, namespace: str, log_dir: Path) -> None:
        self.kubeconfig, self.namespace, self.log_dir = kubeconfig, namespace, log_dir
        self.process: subprocess.Popen[bytes] | None = None
        self.metrics_port = free_port()
        self.runs = itertools.count()

    def start(self) -> None:
        env = {**os.environ, "KUBECONFIG": self.kubeconfig}
        log = open(self.log_dir / f"operator-{next(self.runs)}.log", "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ttj",
                "operator",
                "-n",
                self.namespace,
                "--metrics-port",
                str(self.metrics_port),
                "--liveness",
                "none",
                "--lease-duration",
                "6",
                "--chief-startup",
                "8",
                "--node-grace",
                "2",
                "--resync",
                "2",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None

    def metrics(self) -> str:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as answer:
            return str(answer.read().decode())


class FakeKubelet:
    """Scheduler, kubelet and Deployment controller for one namespace, by status writes only."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.namespace = namespace
        self.dead_nodes: set[str] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.counter = itertools.count()
        self.lock = threading.Lock()

    def add_node(self, name: str, kind: str) -> None:
        labels = {"kubernetes.io/hostname": name}
        if kind == "spot":
            labels |= {"cloud.google.com/gke-spot": "true", "cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
        body = {
            "metadata": {"name": name, "labels": labels},
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now_text()}],
                "capacity": {"nvidia.com/gpu": "1" if kind == "spot" else "0"},
            },
        }
        try:
            self.core.create_node(body)
        except ApiException as exc:
            if exc.status != 409:
                raise

    def __enter__(self) -> FakeKubelet:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(10)

    def _loop(self) -> None:
        while not self.stop.is_set():
            try:
                with self.lock:
                    self._sync()
            except ApiException:
                pass
            self.stop.wait(0.1)

    def _nodes(self, kind: str) -> list[str]:
        nodes = self.core.list_node().items
        out = []
        for node in nodes:
            labels = node.metadata.labels or {}
            spot = labels.get("cloud.google.com/gke-spot") == "true"
            mine = node.metadata.name.startswith(f"{self.namespace}-")  # other tests' nodes may be dead
            if mine and node.metadata.name not in self.dead_nodes and spot == (kind == "spot"):
                out.append(node.metadata.name)
        return sorted(out)

    def _renew_chief(self) -> None:
        """What the chief trainer does: renew the Lease while it runs."""
        coordination = client.CoordinationV1Api(self.core.api_client)
        for lease in coordination.list_namespaced_lease(self.namespace, label_selector=JOB).items:
            holder = lease.spec.holder_identity
            if not holder:
                continue
            try:
                pod = self.core.read_namespaced_pod(holder, self.namespace)
            except ApiException:
                continue
            if pod.status.phase == "Running" and not pod.metadata.deletion_timestamp:
                if pod.spec.node_name in self.dead_nodes:
                    continue
                stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                coordination.patch_namespaced_lease(lease.metadata.name, self.namespace, {"spec": {"renewTime": stamp}})

    def _sync(self) -> None:
        self._renew_chief()
        for deployment in self.apps.list_namespaced_deployment(self.namespace).items:
            selector = ",".join(f"{k}={v}" for k, v in deployment.spec.selector.match_labels.items())
            pods = self.core.list_namespaced_pod(self.namespace, label_selector=selector).items
            if not [p for p in pods if not p.metadata.deletion_timestamp]:
                template = client.ApiClient().sanitize_for_serialization(deployment.spec.template)
                template["metadata"]["name"] = f"{deployment.metadata.name}-{next(self.counter):05d}"
                template["metadata"]["ownerReferences"] = [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "name": deployment.metadata.name,
                        "uid": deployment.metadata.uid,
                    }
                ]
                self.core.create_namespaced_pod(self.namespace, template)
        used = {p.spec.node_name for p in self.core.list_namespaced_pod(self.namespace).items if p.spec.node_name}
        for pod in self.core.list_namespaced_pod(self.namespace, label_selector=JOB).items:
            name, meta = pod.metadata.name, pod.metadata
            if pod.spec.node_name in self.dead_nodes:
                continue  # its kubelet is gone with the node
            if meta.deletion_timestamp:
                if meta.deletion_grace_period_seconds:
                    if pod.status.phase in ("Pending", "Running"):
                        self._set_status(name, "Failed", exit_code=143)
                    self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
                continue
            if not pod.spec.node_name:
                kind = "on-demand" if meta.labels.get("transient.training/role") == "ps" else "spot"
                free = [n for n in self._nodes(kind) if kind == "on-demand" or n not in used]
                if free:
                    self.core.create_namespaced_pod_binding(
                        name,
                        self.namespace,
                        {
                            "apiVersion": "v1",
                            "kind": "Binding",
                            "metadata": {"name": name},
                            "target": {"apiVersion": "v1", "kind": "Node", "name": free[0]},
                        },
                        _preload_content=False,
                    )
                    used.add(free[0])
                continue
            if pod.status.phase == "Pending":
                self._set_status(name, "Running")

    def _set_status(self, name: str, phase: str, exit_code: int | None = None, reason: str | None = None) -> None:
        status: dict[str, Any] = {
            "phase": phase,
            "startTime": now_text(),
            "podIP": "127.0.0.1",
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now_text()}],
        }
        if exit_code is None:
            status["containerStatuses"] = [
                {
                    "name": "trainer",
                    "ready": True,
                    "restartCount": 0,
                    "image": "x",
                    "imageID": "",
                    "state": {"running": {"startedAt": now_text()}},
                }
            ]
        else:
            status["containerStatuses"] = [
                {
                    "name": "trainer",
                    "ready": False,
                    "restartCount": 0,
                    "image": "x",
                    "imageID": "",
                    "state": {"terminated": {"exitCode": exit_code, "finishedAt": now_text()}},
                }
            ]
        if reason:
            status["reason"] = reason
        self.core.patch_namespaced_pod_status(name, self.namespace, {"status": status})

    # -- injected faults ---------------------------------------------------------------------------------
    def preempt_pod(self, name: str) -> None:
        """GKE's graceful node shutdown: the kubelet ends the pod with reason Terminated."""
        with self.lock:
            self._set_status(name, "Failed", exit_code=143, reason="Terminated")

    def node_not_ready(self, node: str) -> None:
        with self.lock:
            self.dead_nodes.add(node)
            self.core.patch_node_status(
                node,
                {"status": {"conditions": [{"type": "Ready", "status": "Unknown", "lastTransitionTime": now_text()}]}},
            )

    def delete_node(self, node: str) -> None:
        with self.lock:
            self.dead_nodes.add(node)
            self.core.delete_node(node)

    def crash(self, name: str, exit_code: int = 1, message: str = "boom") -> None:
        with self.lock:
            self._set_status(name, "Failed", exit_code=exit_code)
