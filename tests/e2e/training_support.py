"""Shared by the end-to-end tests with real TensorFlow trainers (test_training*.py).

Everything here works against the embedded local cluster (a :class:`Stack` that started it) and
against the cluster in ``KUBECONFIG``; operations only the local cluster can do are behind
``stack.local`` (in :class:`Stack`) and nothing local-only is imported at module import time.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.operator_identity import install_operator_identity

from ttj_contract import (
    ANNOTATION_ACTIVE_WORKERS,
    API_VERSION,
    GROUP,
    KIND,
    LABEL_ROLE,
    PLURAL,
    VERSION,
    Role,
    lease_name,
)
from ttj_demo.stack import Stack

#: Every wait below polls a condition; this is only the point at which a test gives up.
DEADLINE = 400.0
#: On a real cluster the checkpoints must be where both the pods and this test can read them (gs://…).
CHECKPOINT_ENV = "TTJ_E2E_CHECKPOINT_URI"
METRICS_PORT = 9090
_CHECKPOINT_FILE = re.compile(r"ckpt-(\d+)-e(\d+)\.index$")


def start_stack(
    tmp_path_factory: pytest.TempPathFactory,
    gpu_nodes: int = 4,
    program_path: Sequence[Path] = (),
    gpu_pools: Sequence[str] = (),
) -> Iterator[Stack]:
    """The body of a module-scoped ``stack`` fixture: a local cluster authorizing by RBAC, the operator running as
    the ServiceAccount and RBAC of manifests/base, and each trainer as its job's ServiceAccount; ``program_path``:
    directories of programs' code the local cluster's pods import (``ttj local-cluster --program-path``);
    ``gpu_pools``: GPU pools as ``ttj local-cluster --pool`` values (default: ``gpu_nodes`` spot T4 nodes)."""
    workdir = tmp_path_factory.mktemp("stack")

    def operator_kubeconfig(admin_kubeconfig: str) -> str:
        from kubernetes import config

        api = config.new_client_from_config(config_file=admin_kubeconfig)
        try:
            return install_operator_identity(api, admin_kubeconfig, workdir)[0]
        finally:
            api.close()

    stack = Stack(
        workdir,
        gpu_nodes=gpu_nodes,
        authorization_mode="RBAC",
        operator_identity=operator_kubeconfig,
        program_path=program_path,
        gpu_pools=gpu_pools,
    )
    with stack as running:
        yield running


def checkpoint_uri(stack: Stack, tmp_path: Path, name: str) -> str:
    """Where a job's checkpoints go: a local directory, or a fresh prefix under $TTJ_E2E_CHECKPOINT_URI."""
    if stack.local:
        return str(tmp_path / "checkpoints")
    base = os.environ.get(CHECKPOINT_ENV)
    if not base:
        pytest.skip(
            f"on a real cluster the pods and this test must share the checkpoints: set {CHECKPOINT_ENV} "
            "to a gs:// prefix both can read and write"
        )
    return f"{base.rstrip('/')}/{name}"


def job_manifest(name: str, checkpoints: str | Path, **spec: Any) -> dict[str, Any]:
    """A small job (small-cnn on synthetic data, batch 64). ``workers``/``checkpoint`` keys merge into the defaults."""
    workers = {"replicas": 3, "minReplicas": 1, "maxReplicas": 3, **spec.pop("workers", {})}
    checkpoint = {"uri": str(checkpoints), "intervalSteps": 100, "intervalSeconds": 10, **spec.pop("checkpoint", {})}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "model": "small-cnn",
            "dataset": "synthetic",
            "trainSteps": 4000,
            "batchSize": 64,
            "learningRate": 0.05,
            "checkpoint": checkpoint,
            "workers": workers,
            "backoffLimit": 1,
            "cleanPodPolicy": "None",
            **spec,
        },
    }


def step(status: dict[str, Any]) -> int:
    return int((status.get("progress") or {}).get("globalStep") or 0)


def checkpoint_step(status: dict[str, Any]) -> int:
    return int((status.get("progress") or {}).get("checkpointStep") or 0)


def epoch(status: dict[str, Any]) -> int:
    return int((status.get("chief") or {}).get("epoch") or 0)


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), {})


def poll(what: str, probe: Callable[[], Any], timeout: float = DEADLINE, interval: float = 1.0) -> Any:
    """Calls ``probe`` until it returns something truthy (returned), failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")


class Run:
    """One job on the stack, with the history of its status kept for assertions."""

    def __init__(self, stack: Stack, manifest: dict[str, Any]) -> None:
        self.stack = stack
        self.name: str = manifest["metadata"]["name"]
        self.namespace: str = manifest["metadata"]["namespace"]
        self.checkpoint_uri: str = manifest["spec"]["checkpoint"]["uri"]
        self.history: list[dict[str, Any]] = []
        stack.create_job(manifest)

    def job(self) -> dict[str, Any]:
        return self.stack.job(self.namespace, self.name)

    def status(self) -> dict[str, Any]:
        self.stack.check_alive()
        status: dict[str, Any] = self.stack.job(self.namespace, self.name).get("status") or {}
        self.history.append(status)
        return status

    def wait(
        self,
        what: str,
        test: Callable[[dict[str, Any]], bool],
        timeout: float = DEADLINE,
        allow_failed: bool = False,
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.status()
            if test(status):
                return status
            if status.get("phase") == "Failed" and not allow_failed:
                pytest.fail(f"job failed while waiting for {what}: {status.get('conditions')}")
            time.sleep(1)
        pytest.fail(f"timed out waiting for {what}; last status: {self.history[-1] if self.history else None}")

    # -- children --------------------------------------------------------------------------------------
    def pods(self, role: str | None = None) -> list[dict[str, Any]]:
        pods = self.stack.pods(self.namespace, self.name)
        return [p for p in pods if role is None or p["metadata"]["labels"].get(LABEL_ROLE) == role]

    def running_workers(self) -> list[dict[str, Any]]:
        return [
            p
            for p in self.pods(Role.WORKER)
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        ]

    def lease(self) -> dict[str, Any]:
        client = self.stack.client()
        lease = client.CoordinationV1Api().read_namespaced_lease(lease_name(self.name), self.namespace)
        return client.ApiClient().sanitize_for_serialization(lease)  # type: ignore[no-any-return]

    def active_workers_annotation(self) -> int | None:
        value = (self.lease()["metadata"].get("annotations") or {}).get(ANNOTATION_ACTIVE_WORKERS)
        return int(value) if value is not None else None

    def events(self) -> list[Any]:
        """The job's Events (core/v1 objects), oldest first."""
        events = self.stack.client().CoreV1Api().list_namespaced_event(self.namespace)
        mine = [e for e in events.items if e.involved_object.kind == KIND and e.involved_object.name == self.name]
        return sorted(mine, key=lambda e: str(e.last_timestamp or e.event_time or e.metadata.creation_timestamp))

    def warnings(self) -> list[str]:
        """The job's Warning Events as ``reason: message`` lines: what an assertion shows when it fails."""
        return [f"{e.reason}: {e.message}" for e in self.events() if e.type == "Warning"]

    def event_reasons(self) -> set[str]:
        return {e.reason for e in self.events()}

    def delete(self) -> None:
        custom = self.stack.client().CustomObjectsApi()
        try:
            custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name)
        except self.stack.client().ApiException as err:
            if err.status != 404:
                raise

    # -- checkpoints -----------------------------------------------------------------------------------
    def latest_checkpoint(self) -> Any:
        from ttj_trainer import checkpoints

        return checkpoints.latest(self.checkpoint_uri)

    def checkpoints_on_disk(self) -> list[tuple[int, int]]:
        """(step, epoch) of every checkpoint whose files are still there, by step."""
        import tensorflow as tf

        found = []
        for path in tf.io.gfile.glob(f"{self.checkpoint_uri.rstrip('/')}/ckpt-*-e*.index"):
            match = _CHECKPOINT_FILE.search(path)
            if match:
                found.append((int(match.group(1)), int(match.group(2))))
        return sorted(found)

    # -- trainer metrics -------------------------------------------------------------------------------
    def trainer_metrics(self, pod: dict[str, Any]) -> dict[str, float]:
        """The trainer's Prometheus samples (unlabelled ones by name; labelled as name{labels})."""
        name = pod["metadata"]["name"]
        if self.stack.local:
            # Pods have their own IP on a bridge this machine is on, as a VPC-native cluster's nodes do.
            url = f"http://{pod['status']['podIP']}:{METRICS_PORT}/metrics"
            with urllib.request.urlopen(url, timeout=5) as response:
                text = response.read().decode()
        else:
            # From outside a real cluster pod IPs are not routable: go through the API server's pod proxy.
            core = self.stack.client().CoreV1Api()
            text = core.connect_get_namespaced_pod_proxy_with_path(f"{name}:{METRICS_PORT}", self.namespace, "metrics")
        samples: dict[str, float] = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            key, _, value = line.rpartition(" ")
            try:
                samples[key] = float(value)
            except ValueError:
                continue
        return samples


def drawn_timeline(stack: Stack, name: str, picture: Path) -> str:
    """``ttj timeline default/NAME -o PICTURE --text`` against the stack: the text it printed, once it exited 0
    and wrote a PNG."""
    drawn = subprocess.run(
        [sys.executable, "-m", "ttj", "timeline", f"default/{name}", "-o", str(picture), "--text"],
        env={**os.environ, "KUBECONFIG": str(stack.kubeconfig)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert drawn.returncode == 0, drawn.stderr
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return drawn.stdout
