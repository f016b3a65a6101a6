"""Support for the operator's end-to-end tests: the operator as a real process (``ttj operator``), the
local cluster with its real node add-ons (fleet, scheduler, Deployment controller; pods simulated),
and a chief heartbeat standing in for the trainer (simulated pods run no code, so nobody else would
renew the chief's Lease)."""

from __future__ import annotations

import contextlib
import importlib
import itertools
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from tests.ports import free_port

from ttj_contract import GROUP, LABEL_JOB, PLURAL, VERSION, format_micro_time

ROOT = Path(__file__).resolve().parents[2]


def install_crd(api: client.ApiClient) -> None:
    crd = yaml.safe_load((ROOT / "crds" / f"{GROUP}_{PLURAL}.yaml").read_text())
    ext = client.ApiextensionsV1Api(api)
    try:
        ext.create_custom_resource_definition(crd)
    except ApiException as exc:
        if exc.status != 409:
            raise
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            client.CustomObjectsApi(api).list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
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


#: Opt-in: start the operator from this built image's root filesystem (its entrypoint, as its user, with
#: its dependencies; see images/imageroot.py) instead of the test's virtualenv. Needs root, podman and buildah.
OPERATOR_IMAGE_ENV = "TTJ_E2E_OPERATOR_IMAGE"


def load_image_tool(name: str) -> Any:
    """A script under images/ (check.py, imageroot.py): beside the Dockerfiles, not an installed package."""
    sys.path.insert(0, str(ROOT / "images"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "images"))


class OperatorProcess:
    """``ttj operator`` in a subprocess, so a test can kill it at any moment and start it again.

    With ``TTJ_E2E_OPERATOR_IMAGE`` set, each start opens a fresh working container of that image and
    runs the image's entrypoint in it (chroot, as the image's user, the root filesystem as read-only as
    the Deployment makes it); the kubeconfig is copied into its /tmp, the network is the host's, so the
    operator reaches the cluster as it would from a pod."""

    def __init__(self, kubeconfig: str, namespace: str, log_dir: Path, *extra: str) -> None:
        self.kubeconfig, self.namespace, self.log_dir = kubeconfig, namespace, log_dir
        self.process: subprocess.Popen[bytes] | None = None
        self.metrics_port = free_port()
        self.runs = itertools.count()
        self.extra = list(extra)
        self.image = os.environ.get(OPERATOR_IMAGE_ENV, "")
        self.image_root = contextlib.ExitStack()

    def arguments(self) -> list[str]:
        """What follows ``ttj``: short leases and resyncs, so that recoveries happen within a test."""
        return [
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
            *self.extra,
            *(["--verbose"] if os.environ.get("TTJ_E2E_OPERATOR_VERBOSE") else []),
        ]

    def command(self) -> tuple[list[str], dict[str, str]]:
        if not self.image:
            return [sys.executable, "-m", "ttj", *self.arguments()], {**os.environ, "KUBECONFIG": self.kubeconfig}
        root = self.image_root.enter_context(load_image_tool("imageroot").open_image(self.image))
        kubeconfig = root.path / "tmp" / "ttj-e2e.kubeconfig"
        shutil.copyfile(self.kubeconfig, kubeconfig)
        kubeconfig.chmod(0o644)  # readable by the image's user
        # As the Deployment runs it: a read-only root filesystem but for its emptyDir volumes (/tmp).
        writable = load_image_tool("check").operator_pod_runtime().writable
        argv, env = root.command(self.arguments(), {"KUBECONFIG": "/tmp/ttj-e2e.kubeconfig"}, writable)
        return argv, env

    def start(self) -> None:
        argv, env = self.command()
        log = open(self.log_dir / f"operator-{next(self.runs)}.log", "wb")  # noqa: SIM115
        self.process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        """A clean stop (SIGTERM), as a rollout of the Deployment stops a replica."""
        if self.process is not None:
            self.process.terminate()
            self.process.wait(30)
            self.process = None
        self.image_root.close()

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None
        self.image_root.close()

    def metrics(self) -> str:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as answer:
            return str(answer.read().decode())


def e2e_pools(cpu_nodes: int = 2, gpu_nodes: int = 12, restore_after: float = 1.0) -> list[Any]:
    """An on-demand CPU pool for the parameter servers and a spot T4 pool whose nodes come back
    ``restore_after`` seconds after a loss."""
    from ttj_localcluster.nodes.pools import NodePool, spot_t4_pool

    return [
        NodePool(name="cpu-pool", nodes=cpu_nodes, cpu="8", memory="30Gi"),
        spot_t4_pool(name="gpu-pool", nodes=gpu_nodes, restore_after=restore_after),
    ]


@contextlib.contextmanager
def cluster_with_nodes(pools: Sequence[Any] | None = None) -> Iterator[tuple[str, Any, Any]]:
    """(kubeconfig, control client or None, the local API server's access control or None): KUBECONFIG's cluster
    when set, else a local cluster authorizing by RBAC with the real node add-ons and simulated pods. The
    control client (preemption, node loss) exists only on a ttj local cluster; on another cluster those tests
    skip. The access control lists every 403 the local server answered."""
    from ttj_localcluster.cluster import LocalCluster
    from ttj_localcluster.nodes.control import ControlClient
    from ttj_localcluster.nodes.deployments import DeploymentController
    from ttj_localcluster.nodes.fleet import NodeFleet
    from ttj_localcluster.nodes.podgc import PodGarbageCollector
    from ttj_localcluster.nodes.scheduler import Scheduler

    real = os.environ.get("KUBECONFIG")
    if real:
        try:
            control: Any = ControlClient.from_kubeconfig(real)
        except Exception as exc:  # a real cluster: no injection endpoint
            logging.getLogger(__name__).info("no local-cluster control: %s", exc)
            control = None
        yield real, control, None
        return
    fleet = NodeFleet(list(pools or e2e_pools()), run_pods=False, pod_network=False)
    # kube-controller-manager's pace: PodGC deletes pods of deleted nodes only after its 40 s quarantine,
    # so the operator is tested as it runs on GKE, never helped by a prompt collector.
    addons = [fleet, Scheduler(seed=1), DeploymentController(), PodGarbageCollector()]
    with LocalCluster(addons=addons, authorization_mode="RBAC") as cluster:
        yield cluster.kubeconfig_path, ControlClient.from_kubeconfig(cluster.kubeconfig_path), cluster.server.access


class ChiefHeartbeat:
    """What a chief trainer does with its Lease: renew ``renewTime`` while it runs.

    Simulated pods run no trainer, so this stands in for it: every Lease of a ttj job whose holder is a
    Running, undeleted pod on a Ready node is renewed every ``period`` seconds. A chief that was
    preempted (pod Failed) or whose node was lost (not Ready) falls silent, as a real one would.
    """

    def __init__(self, api: Any, period: float = 1.0) -> None:
        from kubernetes import client as k8s

        self.core = k8s.CoreV1Api(api)
        self.coordination = k8s.CoordinationV1Api(api)
        self.period = period
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="chief-heartbeat", daemon=True)

    def __enter__(self) -> ChiefHeartbeat:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(10)

    def _loop(self) -> None:
        while not self.stop.wait(self.period):
            try:
                self.beat()
            except Exception as exc:  # the API may blip; the next beat tries again
                logging.getLogger(__name__).debug("heartbeat: %s", exc)

    def _alive(self, namespace: str, pod_name: str) -> bool:
        try:
            pod = self.core.read_namespaced_pod(pod_name, namespace)
        except ApiException:
            return False
        if pod.status.phase != "Running" or pod.metadata.deletion_timestamp or not pod.spec.node_name:
            return False
        try:
            node = self.core.read_node(pod.spec.node_name)
        except ApiException:
            return False
        ready = next((c for c in node.status.conditions or [] if c.type == "Ready"), None)
        return ready is not None and ready.status == "True"

    def beat(self) -> None:
        for lease in self.coordination.list_lease_for_all_namespaces(label_selector=LABEL_JOB).items:
            holder = lease.spec.holder_identity
            if not holder or not self._alive(lease.metadata.namespace, holder):
                continue
            renewed = {"spec": {"renewTime": format_micro_time(datetime.now(UTC))}}
            self.coordination.patch_namespaced_lease(lease.metadata.name, lease.metadata.namespace, renewed)
