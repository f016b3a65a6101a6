"""The whole product on one machine: `ttj local-cluster` and `ttj operator` as processes, the CRD installed.

The demo and the end-to-end suite both stand on it. With ``KUBECONFIG`` set it starts nothing and
uses that cluster, where the operator is expected to be installed (``kubectl apply -k manifests/base``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ttj.api import crd as crd_module
from ttj_contract import GROUP, PLURAL, VERSION, job_selector

GPU_POOL = "gpu-pool"
CPU_POOL = "cpu-pool"


class Stack:
    """A cluster to run jobs on, and a way to preempt its nodes."""

    def __init__(
        self,
        workdir: Path,
        *,
        gpu_nodes: int = 3,
        operator_args: tuple[str, ...] = (),
        authorization_mode: str = "AlwaysAllow",
        operator_identity: Callable[[str], str] | None = None,
        program_path: Sequence[Path] = (),
        gpu_pools: Sequence[str] = (),
    ) -> None:
        """``authorization_mode`` is the local cluster's; ``operator_identity(admin_kubeconfig)`` returns the
        kubeconfig the operator runs with (default: the admin's); ``program_path``: directories of programs'
        code for the local cluster's pods (``ttj local-cluster --program-path``); ``gpu_pools``: the local
        cluster's GPU pools as ``--pool`` values, instead of one spot T4 pool of ``gpu_nodes`` nodes."""
        self.workdir = workdir
        self.gpu_nodes = gpu_nodes
        self.operator_args = operator_args
        self.authorization_mode = authorization_mode
        self.operator_identity = operator_identity
        self.program_path = tuple(program_path)
        self.gpu_pools = tuple(gpu_pools)
        self.external = os.environ.get("KUBECONFIG")
        self.kubeconfig = Path(self.external) if self.external else workdir / "kubeconfig"
        self.processes: list[subprocess.Popen[bytes]] = []
        self._client: Any = None

    @property
    def local(self) -> bool:
        """True on the embedded local cluster, where nodes can be preempted on demand."""
        return not self.external

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> Stack:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.local:
            self._start_local_cluster()
        self._install_crd()
        if self.local:
            operator_kubeconfig = (
                self.operator_identity(str(self.kubeconfig)) if self.operator_identity else str(self.kubeconfig)
            )
            self._spawn(
                "operator",
                "operator",
                "--all-namespaces",
                "--metrics-port",
                "0",
                "--liveness",
                "none",
                "--lease-duration",
                "15",
                "--node-grace",
                "10",
                *self.operator_args,
                kubeconfig=operator_kubeconfig,
            )
        return self

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        self.processes.clear()

    def __enter__(self) -> Stack:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def check_alive(self) -> None:
        """Fail loudly when the cluster or the operator died, instead of waiting for a timeout."""
        for process in self.processes:
            if process.poll() is not None:
                name = Path(str(process.args[-1] if isinstance(process.args, list) else process.args)).name
                raise RuntimeError(
                    f"a stack process exited with code {process.returncode} ({name}); logs in {self.workdir}"
                )

    def _spawn(self, log_name: str, *argv: str, kubeconfig: str | None = None) -> subprocess.Popen[bytes]:
        log = open(self.workdir / f"{log_name}.log", "wb")  # noqa: SIM115 - lives as long as the process
        env = {**os.environ, "KUBECONFIG": kubeconfig or str(self.kubeconfig), "PYTHONUNBUFFERED": "1"}
        process = subprocess.Popen(
            [sys.executable, "-m", "ttj", *argv], stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        self.processes.append(process)
        return process

    def _start_local_cluster(self) -> None:
        gpu_pools = self.gpu_pools or (
            f"name={GPU_POOL},nodes={self.gpu_nodes},provisioning=spot,accelerator=nvidia-tesla-t4,gpus=1,"
            "cpu=8,memory=30Gi,machine-type=n1-standard-8,restore-after=never",
        )
        cluster = self._spawn(
            "local-cluster",
            "local-cluster",
            "--kubeconfig",
            str(self.kubeconfig),
            "--state-dir",
            str(self.workdir / "state"),
            "--pool",
            f"name={CPU_POOL},nodes=2,cpu=4,memory=15Gi,machine-type=n1-standard-4",
            *(option for pool in gpu_pools for option in ("--pool", pool)),
            "--authorization-mode",
            self.authorization_mode,
            *(option for directory in self.program_path for option in ("--program-path", str(directory))),
        )
        deadline = time.monotonic() + 60
        while not self.kubeconfig.exists():
            if cluster.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the local cluster did not start; see {self.workdir / 'local-cluster.log'}")
            time.sleep(0.1)

    def _install_crd(self) -> None:
        client = self.client()
        with contextlib.suppress(client.ApiException):
            client.ApiextensionsV1Api().create_custom_resource_definition(crd_module.crd())
        deadline = time.monotonic() + 30
        while True:
            try:
                client.CustomObjectsApi().list_cluster_custom_object(GROUP, VERSION, PLURAL)
                return
            except client.ApiException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    # -- the API ---------------------------------------------------------------------------------

    def client(self) -> Any:
        """The official client module, configured for this cluster."""
        if self._client is None:
            from kubernetes import client, config

            config.load_kube_config(config_file=str(self.kubeconfig))  # type: ignore[no-untyped-call]
            self._client = client
        return self._client

    def create_job(self, manifest: dict[str, Any]) -> None:
        namespace = manifest["metadata"].get("namespace", "default")
        self.client().CustomObjectsApi().create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, manifest)

    def job(self, namespace: str, name: str) -> dict[str, Any]:
        custom = self.client().CustomObjectsApi()
        job: dict[str, Any] = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        return job

    def pods(self, namespace: str, name: str) -> list[dict[str, Any]]:
        client = self.client()
        listed = client.CoreV1Api().list_namespaced_pod(namespace, label_selector=job_selector(name))
        serialise = client.ApiClient().sanitize_for_serialization
        return [serialise(pod) for pod in listed.items]

    # -- preemption ------------------------------------------------------------------------------

    def preempt_pod_node(self, namespace: str, pod: str) -> None:
        """Take back the node a pod runs on, as GKE takes back a spot VM."""
        if self.local:
            from ttj_localcluster.nodes.control import ControlClient

            ControlClient.from_kubeconfig(str(self.kubeconfig)).preempt_pod(namespace, pod)
            return
        # On a real cluster the closest we can do from the API: the node disappears, then its pod.
        client = self.client()
        core = client.CoreV1Api()
        node = core.read_namespaced_pod(pod, namespace).spec.node_name
        core.delete_node(node)
        core.delete_namespaced_pod(pod, namespace, grace_period_seconds=15)

    def cut_api_access(self, pod_ips: list[str]) -> None:
        """Local cluster only: a network partition between these pods and the API server (their connections
        are reset and refused) until :meth:`restore_api_access`."""
        from ttj_localcluster.nodes.control import ControlClient

        ControlClient.from_kubeconfig(str(self.kubeconfig)).partition_api(pod_ips)

    def restore_api_access(self) -> int:
        """Heals the partition; returns how many connections it refused (so a test knows it did bite)."""
        from ttj_localcluster.nodes.control import ControlClient

        return int(ControlClient.from_kubeconfig(str(self.kubeconfig)).partition_api([]).get("refused") or 0)

    def restore_gpu_pool(self) -> None:
        """Bring preempted spot capacity back (a no-op on a real cluster: its autoscaler does it)."""
        if self.local:
            from ttj_localcluster.nodes.control import ControlClient

            ControlClient.from_kubeconfig(str(self.kubeconfig)).restore_pool(GPU_POOL)
