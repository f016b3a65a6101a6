"""Where a chaos run happens: the cluster, how faults reach it, and its node fleet's control endpoint.

:class:`LocalSite` is what ``make test`` runs: a fresh local cluster whose API server injects the faults.
:class:`RealSite` is an existing cluster (e.g. a real kube-apiserver with etcd, kube-scheduler and
kube-controller-manager) with ``ttj local-cluster --nodes-only --simulate-pods`` attached: the operators
reach it through :class:`~tests.chaos.proxy.FaultyApiProxy` (requests answered 429/5xx/409, connections reset
and cut), and the
"forced re-list" of the local run becomes a real restart of kube-apiserver or of etcd (SIGKILL, then the
control plane's own start script brings back what is not running).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubernetes import client, config

from tests.chaos.proxy import STATUS_FAULTS, FaultyApiProxy

if TYPE_CHECKING:
    from tests.chaos.harness import ChaosPlan

#: On every verb; 409 only on writes, as kube-apiserver (a read or a watch never conflicts).
FAULT_CODES = sorted(STATUS_FAULTS)
WRITE_VERBS = ["create", "update", "patch", "delete", "deletecollection"]


class LocalSite:
    """A fresh local cluster (API server, fleet with simulated pods, scheduler, Deployment controller)."""

    pools = ("cpu-pool", "gpu-pool")
    namespace = "chaos"
    #: what a forced re-list does here (a real site restarts components instead)
    disruption = "relist"

    def __init__(self, plan: ChaosPlan) -> None:
        self.plan = plan
        self.kubeconfig = ""
        self.api: Any = None
        self.control: Any = None
        self.fleet: Any = None
        self.cluster: Any = None

    def __enter__(self) -> LocalSite:
        from ttj_localcluster.cluster import LocalCluster
        from ttj_localcluster.nodes.control import ControlClient
        from ttj_localcluster.nodes.deployments import DeploymentController
        from ttj_localcluster.nodes.fleet import NodeFleet
        from ttj_localcluster.nodes.pools import NodePool, spot_t4_pool
        from ttj_localcluster.nodes.scheduler import Scheduler

        plan = self.plan
        pools = [
            NodePool(
                name="cpu-pool", nodes=plan.jobs * plan.parameter_servers + 1, cpu="4", memory="30Gi", restore_after=1.0
            ),
            spot_t4_pool(name="gpu-pool", nodes=plan.jobs * plan.workers + 4, restore_after=1.0),
        ]
        self.fleet = NodeFleet(pools, run_pods=False, pod_network=False)
        self.cluster = LocalCluster(addons=[self.fleet, Scheduler(seed=plan.seed), DeploymentController()])
        self.cluster.__enter__()
        self.kubeconfig = self.cluster.kubeconfig_path
        self.api = config.new_client_from_config(config_file=self.kubeconfig)
        self.control = ControlClient.from_kubeconfig(self.kubeconfig)
        return self

    def __exit__(self, *exc: object) -> None:
        self.api.close()
        self.cluster.__exit__(*exc)

    @property
    def operator_kubeconfig(self) -> str:
        return self.kubeconfig

    def faults_on(self) -> None:
        from ttj_localcluster.apiserver.faults import FaultRule

        plan = self.plan
        self.cluster.faults.configure(
            seed=plan.seed,
            rules=[
                FaultRule(probability=plan.fault_probability, codes=FAULT_CODES),
                FaultRule(probability=plan.fault_probability / 2, codes=[409], verbs=WRITE_VERBS),
            ],
            latency_seconds=plan.latency_seconds,
            latency_jitter_seconds=plan.latency_jitter_seconds,
            watch_drop_probability=plan.watch_drop_probability,
        )

    def faults_off(self) -> None:
        self.cluster.faults.clear()

    def disrupt(self) -> str | None:
        """The server's watch caches restarted under the watchers (as an apiserver restart does): every watch
        stream ends, and each re-watch from its last resourceVersion gets 410 Gone and must list again."""
        self.cluster.restart_watch_caches()
        return "relist"

    def poll(self) -> None:
        """Nothing runs in the background here."""

    def wait_up(self, timeout: float) -> None:
        """Always up."""

    def restore_pool(self, pool: str) -> None:
        self.fleet.restore_pool(pool)

    def injected(self) -> tuple[int, int]:
        """(requests failed, watch streams dropped) by the injection so far."""
        faults = self.cluster.faults
        return sum(rule.injected for rule in faults.rules), faults.watches_dropped


class RealSite:
    """An existing cluster by kubeconfig, with a nodes-only fleet attached (found through the same kubeconfig).

    ``control_plane``: the directory of a control plane started by a script (``run/NAME.pid``, ``up.sh``), to
    restart kube-apiserver and etcd under the jobs; None: no restarts (only proxy faults)."""

    pools = ("cpu-pool", "gpu-pool")
    disruption = "restart"
    #: what up.sh restarts, in turn
    COMPONENTS = ("kube-apiserver", "etcd")

    def __init__(
        self, plan: ChaosPlan, kubeconfig: str, logs: Path, control_plane: Path | None, up_env: dict[str, str]
    ) -> None:
        self.plan, self.kubeconfig, self.logs = plan, kubeconfig, logs
        self.control_plane, self.up_env = control_plane, up_env
        self.namespace = f"chaos-{plan.seed}-{int(time.time())}"
        self.api: Any = None
        self.control: Any = None
        self.proxy: Any = None
        self.operator_kubeconfig = kubeconfig
        self.restarting: subprocess.Popen[bytes] | None = None
        self.turn = 0
        self.restarts: dict[str, int] = dict.fromkeys(self.COMPONENTS, 0)

    def __enter__(self) -> RealSite:
        from ttj_localcluster.nodes.control import ControlClient

        self.api = config.new_client_from_config(config_file=self.kubeconfig)
        self.control = ControlClient.from_kubeconfig(self.kubeconfig)
        self.proxy = FaultyApiProxy(self.kubeconfig, seed=self.plan.seed)
        self.proxy.start()
        through = self.proxy.kubeconfig_through(self.kubeconfig, self.logs / "kubeconfig-through-proxy")
        self.operator_kubeconfig = str(through)
        return self

    def __exit__(self, *exc: object) -> None:
        self.wait_up(300)
        self.proxy.stop()
        # Left behind if this fails; the namespace is unique per run.
        with contextlib.suppress(Exception):
            client.CoreV1Api(self.api).delete_namespace(self.namespace)
        self.api.close()

    def faults_on(self) -> None:
        """The local site's odds: a share of requests answered 429/500/503/504, half that share of writes 409,
        watch streams cut per chunk; and a third of the share reset before any answer."""
        plan = self.plan
        self.proxy.configure(
            refuse_probability=plan.fault_probability / 3,
            status_probability=plan.fault_probability,
            conflict_probability=plan.fault_probability / 2,
            cut_probability=plan.watch_drop_probability,
        )

    def faults_off(self) -> None:
        self.proxy.configure()

    def disrupt(self) -> str | None:
        """SIGKILL kube-apiserver or etcd (in turn) and run up.sh in the background, which starts it again;
        None while the last restart is still under way (one at a time, as a real control plane's would be)."""
        if self.control_plane is None or self.restarting is not None:
            return None
        name = self.COMPONENTS[self.turn % len(self.COMPONENTS)]
        self.turn += 1
        pid = int((self.control_plane / "run" / f"{name}.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        with open(self.logs / "up.log", "ab") as out:
            self.restarting = subprocess.Popen(
                [str(self.control_plane / "up.sh")], env={**os.environ, **self.up_env}, stdout=out, stderr=out
            )
        self.restarts[name] += 1
        return name

    def poll(self) -> None:
        if self.restarting is not None and self.restarting.poll() is not None:
            if self.restarting.returncode != 0:
                raise RuntimeError(f"up.sh exited {self.restarting.returncode}: see {self.logs / 'up.log'}")
            self.restarting = None

    def wait_up(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.restarting is not None and time.monotonic() < deadline:
            self.poll()
            time.sleep(0.5)

    def restore_pool(self, pool: str) -> None:
        self.control.restore_pool(pool)

    def injected(self) -> tuple[int, int]:
        return self.proxy.refused + self.proxy.answered, self.proxy.cut
