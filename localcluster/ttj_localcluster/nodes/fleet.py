"""Simulated GKE node pools: the VMs (Node objects, heartbeats), their kubelets, and preemption.

An API client like a kubelet: it registers Nodes, renews their Leases in ``kube-node-lease``, watches
the pods bound to its nodes and runs them (as local processes, see runtime.py, or simulated: Running at
once with a pod IP), reports pod status, and finishes graceful deletions (SIGTERM, SIGKILL after the
grace period, then DELETE with gracePeriodSeconds=0).

Preemption follows GKE's graceful node shutdown on spot/preemptible VMs: the node gets the
``cloud.google.com/impending-node-termination`` taint and turns NotReady, every pod on it gets a
``DisruptionTarget`` condition and SIGTERM, has ``grace`` seconds (15 by default), is SIGKILLed after
that, and is left ``Failed`` with reason ``Terminated`` and message "Pod was terminated in response to
imminent node shutdown."; then the Node is deleted. The pool replaces the VM after ``restore_after``
seconds under a new name. Preemptions come on demand (Python, HTTP control, CLI), at scripted times, or
at lifetimes drawn from the ICAC'19 measurements (seeded, time-scaled).
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ttj.kubeapi import JSON, KubeClient, KubeError
from ttj.preemption.lifetimes import LifetimeDistribution, load_lifetimes

from .kube import Informer, WorkQueue, obj_key, pod_path, retrying, wait_synced
from .network import PodNetwork, PodRecord, ServiceRecord, pod_hostname
from .podnet import PodNetworkNamespaces
from .pools import IMPENDING_TERMINATION_TAINT, NodePool, new_node_name, node_object, now_rfc3339, ready_condition
from .runtime import ContainerRun, PodSandbox, ProcessRuntime, pod_environment
from .scheduler import replace_condition
from .scheduling import pod_is_terminal

log = logging.getLogger(__name__)

SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
NODE_LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_S = 40
LEASE_RENEW_S = 10.0
NODE_INTERNAL_IP = "127.0.0.1"
#: restart back-off for restartPolicy Always/OnFailure: 1 s doubling to 30 s (Kubernetes: 10 s to 5 min)
RESTART_BACKOFF_S = (1.0, 30.0)


@dataclass
class ContainerState:
    name: str
    image: str
    restart_count: int = 0
    state: JSON = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: JSON = field(default_factory=dict)
    ready: bool = False
    container_id: str = ""


@dataclass
class LocalPod:
    """What a kubelet knows of one pod it runs."""

    namespace: str
    name: str
    uid: str
    node: str
    ip: str
    started_at: str
    restart_policy: str
    containers: dict[str, ContainerState]
    spec: JSON
    sandbox: PodSandbox | None = None
    phase: str = "Pending"
    reason: str | None = None
    message: str | None = None
    extra_conditions: list[JSON] = field(default_factory=list)
    reported_conditions: list[JSON] = field(default_factory=list)
    terminating: bool = False
    final: bool = False
    lock: threading.RLock = field(default_factory=threading.RLock)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class PoolRuntime:
    pool: NodePool
    rng: random.Random
    lifetimes: LifetimeDistribution | None
    nodes: list[str] = field(default_factory=list)
    created: int = 0
    preempted: int = 0


UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"


@dataclass
class PreemptionRecord:
    node: str
    pool: str
    cause: str
    started_at: float
    pods: list[str] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)


class NodeFleet:
    """The addon ``ttj_localcluster.nodes.fleet.NodeFleet``: node pools, kubelets, pod runtime and preemptions."""

    name = "node-fleet"

    def __init__(
        self,
        pools: Sequence[NodePool],
        *,
        run_pods: bool = True,
        state_dir: str | Path | None = None,
        lease_renew_s: float = LEASE_RENEW_S,
        pod_network: bool = True,
    ) -> None:
        self.pools = {p.name: p for p in pools}
        self.run_pods = run_pods
        self._own_state_dir = state_dir is None
        self.state_dir = Path(state_dir) if state_dir else Path(tempfile.mkdtemp(prefix="ttj-local-"))
        self.lease_renew_s = lease_renew_s
        self._stop = threading.Event()
        self._lock = threading.RLock()
        self._pools: dict[str, PoolRuntime] = {}
        self._node_pool: dict[str, str] = {}  # live node → pool
        self._shutting_down: set[str] = set()
        self._gone_nodes: set[str] = set()
        self._unreachable: set[str] = set()  # lose_node(): kubelet silent, node object left to others
        self._local: dict[str, LocalPod] = {}
        self._timers: list[threading.Timer] = []
        self.preemptions: list[PreemptionRecord] = []
        self.client: KubeClient | None = None
        self.kubeconfig: str | None = None
        self.network = PodNetwork(self.state_dir)
        #: per-pod network namespaces (podnet.py) when asked for and possible, else the host's network
        self.want_pod_network = pod_network
        self.podnet: PodNetworkNamespaces | None = None
        self.runtime: ProcessRuntime | None = None
        self.pods: Informer | None = None
        self.services: Informer | None = None
        self.queue: WorkQueue | None = None
        self._started_at = time.monotonic()
        self.control: Any = None

    # lifecycle ---------------------------------------------------------------------------------
    def start(self, kubeconfig_path: str) -> None:
        self.kubeconfig = kubeconfig_path
        self.client = KubeClient.from_kubeconfig(kubeconfig_path)
        pod_kubeconfig = kubeconfig_path
        if self.run_pods and self.want_pod_network:
            if PodNetworkNamespaces.available():
                pod_kubeconfig = self._setup_pod_network(kubeconfig_path)
            else:
                log.warning(
                    "pods share the host's network (127.x pod IPs): pod network namespaces need root and "
                    "ip/nsenter/unshare/mount; TensorFlow parameter-server training will not work"
                )
        self.runtime = ProcessRuntime(self.state_dir, kubeconfig=pod_kubeconfig, on_exit=self._on_container_exit)
        self._ensure_namespace(NODE_LEASE_NAMESPACE)
        self._started_at = time.monotonic()
        from .control import ControlServer

        # The kubelet endpoint of every node (logs) and the preemption control; nodes name its port.
        self.control = ControlServer(self)
        self.control.start(kubeconfig_path)
        measured = None
        for pool in self.pools.values():
            distribution = None
            if pool.preemption == "lifetime":
                measured = measured or load_lifetimes(pool.lifetimes_file)
                distribution = LifetimeDistribution.for_accelerator(
                    pool.accelerator,
                    provisioning="spot" if pool.provisioning == "spot" else "preemptible",
                    measured=load_lifetimes(pool.lifetimes_file) if pool.lifetimes_file else measured,
                )
            self._pools[pool.name] = PoolRuntime(pool, random.Random(pool.seed), distribution)
        for pool in self.pools.values():
            for _ in range(pool.nodes):
                self._create_node(pool.name)
            for at in pool.preempt_at if pool.preemption == "scripted" else ():
                self._later(at, self._scripted_preemption, pool.name)
        self.queue = WorkQueue("kubelet", self._sync_pod, self._stop)
        self.pods = Informer(self.client, "/api/v1/pods", "kubelet-pods", self._stop)
        self.pods.add_handler(self._on_pod)
        informers = [self.pods]
        if self.run_pods:
            self.services = Informer(self.client, "/api/v1/services", "kubelet-services", self._stop)
            self.services.add_handler(self._on_service)
            informers.append(self.services)
        self.queue.start()
        for informer in informers:
            informer.start()
        wait_synced(informers)
        threading.Thread(target=self._heartbeat_loop, name="node-heartbeats", daemon=True).start()

    def _setup_pod_network(self, kubeconfig_path: str) -> str:
        """Bridge + namespaces; returns the kubeconfig pods use (the API through the gateway relay)."""
        import yaml

        podnet = PodNetworkNamespaces()
        try:
            podnet.setup()
            config = yaml.safe_load(Path(kubeconfig_path).read_text(encoding="utf-8"))
            server = urlsplit(str(config["clusters"][0]["cluster"]["server"]))
            port = podnet.relay(
                server.hostname or "127.0.0.1", server.port or (443 if server.scheme == "https" else 80)
            )
            for cluster in config["clusters"]:
                cluster["cluster"]["server"] = f"{server.scheme}://{podnet.gateway}:{port}"
            path = self.state_dir / "pod-kubeconfig"
            path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        except (RuntimeError, OSError, KeyError, IndexError, TypeError) as exc:
            log.warning("pods share the host's network (127.x pod IPs): no pod network namespaces: %s", exc)
            podnet.teardown()
            return kubeconfig_path
        self.podnet = podnet
        self.network = PodNetwork(self.state_dir, first_ip=podnet.first_pod_ip, last_ip=podnet.last_pod_ip)
        return str(path)

    def stop(self) -> None:
        """Stops every pod process (SIGTERM, then SIGKILL after 5 s) and the fleet's threads."""
        self._stop.set()
        if self.control is not None:
            self.control.stop()
        for timer in self._timers:
            timer.cancel()
        with self._lock:
            local = list(self._local.values())
        threads = [
            threading.Thread(target=self._stop_processes, args=(p, min(5.0, self._grace_of(p))), daemon=True)
            for p in local
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(15)
        if self.client is not None:
            self.client.close()  # ends the watches
        for part in (self.pods, self.services, self.queue):
            if part is not None:
                part.join(2)
        if self.podnet is not None:
            self.podnet.teardown()

    # nodes -------------------------------------------------------------------------------------
    def _ensure_namespace(self, name: str) -> None:
        assert self.client is not None
        self.client.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def _create_node(self, pool_name: str) -> str:
        assert self.client is not None
        with self._lock:
            runtime = self._pools[pool_name]
            name = new_node_name(runtime.pool)
            while name in self._node_pool or name in self._gone_nodes:
                name = new_node_name(runtime.pool)
            runtime.nodes.append(name)
            runtime.created += 1
            self._node_pool[name] = pool_name
        node = node_object(runtime.pool, name, NODE_INTERNAL_IP)
        status = node.pop("status")
        status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": self.control.port if self.control else 0}}
        client = self.client
        retrying(lambda: client.create("/api/v1/nodes", node))
        retrying(lambda: client.merge_patch(f"/api/v1/nodes/{name}/status", {"status": status}))
        self._renew_lease(name)
        if runtime.lifetimes is not None:
            lifetime = runtime.lifetimes.sample(runtime.rng)
            if not math.isinf(lifetime):
                delay = lifetime / runtime.pool.time_scale
                log.info(
                    "node %s will be preempted in %.1fs (a drawn lifetime of %.2f h)", name, delay, lifetime / 3600
                )
                self._later(delay, self._timed_preemption, name)
        return name

    def _later(self, delay: float, function: Any, *args: Any) -> None:
        def guarded() -> None:
            try:
                function(*args)
            except Exception:
                if not self._stop.is_set():
                    log.exception("local cluster: %s%r failed", getattr(function, "__name__", function), args)

        timer = threading.Timer(max(0.0, delay), guarded)
        timer.daemon = True
        with self._lock:
            self._timers.append(timer)
        timer.start()

    def _renew_lease(self, node: str) -> None:
        assert self.client is not None
        now = now_rfc3339().replace("Z", ".000000Z")
        path = f"/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASE_NAMESPACE}/leases"
        if self.client.merge_patch(f"{path}/{node}", {"spec": {"renewTime": now}}) is not None:
            return
        node_obj = self.client.get(f"/api/v1/nodes/{node}")
        owner = []
        if node_obj is not None:
            owner = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_obj["metadata"]["uid"]}]
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": node, "namespace": NODE_LEASE_NAMESPACE, "ownerReferences": owner},
            "spec": {"holderIdentity": node, "leaseDurationSeconds": LEASE_DURATION_S, "renewTime": now},
        }
        self.client.create(path, lease)

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.lease_renew_s):
            with self._lock:
                nodes = [n for n in self._node_pool if n not in self._shutting_down]
            for node in nodes:
                try:
                    self._renew_lease(node)
                except Exception as exc:
                    log.debug("lease renewal for %s failed: %s", node, exc)

    def nodes_of(self, pool: str) -> list[str]:
        with self._lock:
            return [n for n in self._pools[pool].nodes if n not in self._shutting_down]

    def node_names(self) -> list[str]:
        with self._lock:
            return sorted(n for n in self._node_pool if n not in self._shutting_down)

    # preemption: the injection API ----------------------------------------------------------------
    def preempt_node(self, node: str, *, cause: str = "injected", wait: bool = False) -> PreemptionRecord:
        """Preempt one node as GKE does; returns at once (``wait=True``: when the node is gone)."""
        with self._lock:
            if node not in self._node_pool:
                raise KeyError(f"no live node named {node!r}; nodes: {', '.join(sorted(self._node_pool)) or 'none'}")
            if node in self._shutting_down:
                existing = next(r for r in self.preemptions if r.node == node)
                record = existing
            else:
                self._shutting_down.add(node)
                record = PreemptionRecord(node, self._node_pool[node], cause, time.monotonic())
                self.preemptions.append(record)
                threading.Thread(
                    target=self._shutdown_node, args=(record,), name=f"preempt-{node}", daemon=True
                ).start()
        if wait:
            record.done.wait(120)
        return record

    def preempt_pod(self, namespace: str, name: str, *, wait: bool = False) -> PreemptionRecord:
        """Preempt the node that runs this pod."""
        assert self.client is not None
        pod = self.client.get(pod_path(namespace, name))
        node = ((pod or {}).get("spec") or {}).get("nodeName")
        if not node:
            raise KeyError(f"pod {namespace}/{name} does not exist or is not on a node yet")
        return self.preempt_node(node, cause=f"injected via pod {namespace}/{name}", wait=wait)

    def lose_node(self, node: str) -> None:
        """The node's VM vanishes without a shutdown (hardware failure, network partition).

        Its kubelet goes silent: no more heartbeats, pod statuses or finished deletions; its processes
        die with it. As the node lifecycle controller does once heartbeats are overdue, the Node turns
        ``Ready=Unknown`` (reason ``NodeStatusUnknown``) with the ``node.kubernetes.io/unreachable``
        taints. Its pods keep the status the API last had until someone force-deletes them; the Node
        stays until deleted (GKE's instance group would recreate the VM; here ``restore_pool`` adds one).
        """
        assert self.client is not None
        with self._lock:
            if node not in self._node_pool or node in self._shutting_down:
                raise KeyError(f"no live node named {node!r}; nodes: {', '.join(self.node_names()) or 'none'}")
            self._shutting_down.add(node)
            self._unreachable.add(node)
            lost = [p for p in self._local.values() if p.node == node]
        for local in lost:
            with local.lock:
                local.terminating = True  # its exit is never reported
            self._forget(local, 0.0)
        client = self.client
        current = retrying(lambda: client.get(f"/api/v1/nodes/{node}")) or {}
        now = now_rfc3339()
        unknown = {
            "type": "Ready",
            "status": "Unknown",
            "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status.",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        conditions = replace_condition(((current.get("status") or {}).get("conditions")) or [], unknown)
        retrying(lambda: client.merge_patch(f"/api/v1/nodes/{node}/status", {"status": {"conditions": conditions}}))
        taints = [t for t in (current.get("spec") or {}).get("taints") or [] if t.get("key") != UNREACHABLE_TAINT]
        taints += [
            {"key": UNREACHABLE_TAINT, "effect": "NoSchedule"},
            {"key": UNREACHABLE_TAINT, "effect": "NoExecute", "timeAdded": now},
        ]
        retrying(lambda: client.merge_patch(f"/api/v1/nodes/{node}", {"spec": {"taints": taints}}))
        log.info("node %s lost: its kubelet stopped", node)

    def restore_pool(self, pool: str, nodes: int | None = None) -> list[str]:
        """Bring a pool back to its size (or add ``nodes`` VMs) now; returns the new node names."""
        if pool not in self._pools:
            raise KeyError(f"no pool named {pool!r}; pools: {', '.join(self._pools)}")
        count = nodes if nodes is not None else max(0, self._pools[pool].pool.nodes - len(self.nodes_of(pool)))
        return [self._create_node(pool) for _ in range(count)]

    def describe(self) -> JSON:
        with self._lock:
            return {
                "pools": {
                    name: {
                        "nodes": [n for n in p.nodes if n not in self._shutting_down],
                        "size": p.pool.nodes,
                        "provisioning": p.pool.provisioning,
                        "accelerator": p.pool.accelerator,
                        "preemption": p.pool.preemption,
                        "preempted": p.preempted,
                    }
                    for name, p in self._pools.items()
                },
                "preemptions": [
                    {"node": r.node, "pool": r.pool, "cause": r.cause, "pods": r.pods, "done": r.done.is_set()}
                    for r in self.preemptions
                ],
                "runPods": self.run_pods,
                "stateDir": str(self.state_dir),
            }

    def _timed_preemption(self, node: str) -> None:
        if self._stop.is_set():
            return
        with contextlib.suppress(KeyError):
            self.preempt_node(node, cause="lifetime drawn from the ICAC'19 measurements")

    def _scripted_preemption(self, pool: str) -> None:
        if self._stop.is_set():
            return
        alive = self.nodes_of(pool)
        if not alive:
            log.warning("scripted preemption in pool %s: no live node", pool)
            return
        self.preempt_node(alive[0], cause="scripted")

    def _shutdown_node(self, record: PreemptionRecord) -> None:
        assert self.client is not None
        node = record.node
        pool = self._pools[record.pool].pool
        log.info("preempting node %s (%s)", node, record.cause)
        try:
            client = self.client
            current = retrying(lambda: client.get(f"/api/v1/nodes/{node}")) or {}
            taints = [
                t
                for t in (current.get("spec") or {}).get("taints") or []
                if t.get("key") != IMPENDING_TERMINATION_TAINT["key"]
            ]
            tainted = {"spec": {"taints": [*taints, dict(IMPENDING_TERMINATION_TAINT)]}}
            retrying(lambda: client.merge_patch(f"/api/v1/nodes/{node}", tainted))
            conditions = ((current.get("status") or {}).get("conditions")) or []
            not_ready = ready_condition(False, "KubeletNotReady", "node is shutting down", now_rfc3339())
            shutting = {"status": {"conditions": replace_condition(conditions, not_ready)}}
            retrying(lambda: client.merge_patch(f"/api/v1/nodes/{node}/status", shutting))
            victims = self._pods_on_node(node)
            record.pods = [obj_key(p) for p in victims]
            threads = [
                threading.Thread(target=self._terminate_for_shutdown, args=(p, pool.grace), daemon=True)
                for p in victims
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(pool.grace + 30)
            # Pods bound while the notice was out fail the same way.
            for pod in self._pods_on_node(node):
                if obj_key(pod) not in record.pods:
                    self._terminate_for_shutdown(pod, 0)
            retrying(lambda: client.delete(f"/api/v1/nodes/{node}"))
            lease = f"/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASE_NAMESPACE}/leases/{node}"
            retrying(lambda: client.delete(lease))
        except Exception:
            log.exception("preemption of node %s failed half-way", node)
        finally:
            with self._lock:
                self._node_pool.pop(node, None)
                self._gone_nodes.add(node)
                runtime = self._pools[record.pool]
                if node in runtime.nodes:
                    runtime.nodes.remove(node)
                runtime.preempted += 1
            record.done.set()
        if pool.restore_after is not None and not self._stop.is_set():
            self._later(pool.restore_after, self._restore_one, record.pool)

    def _restore_one(self, pool: str) -> None:
        if self._stop.is_set():
            return
        if len(self.nodes_of(pool)) < self._pools[pool].pool.nodes:
            self._create_node(pool)

    def _pods_on_node(self, node: str) -> list[JSON]:
        assert self.pods is not None
        return [
            p for p in self.pods.items() if (p.get("spec") or {}).get("nodeName") == node and not pod_is_terminal(p)
        ]

    def _terminate_for_shutdown(self, pod: JSON, grace: float) -> None:
        assert self.client is not None
        meta = pod["metadata"]
        key = obj_key(pod)
        disruption = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "TerminationByKubelet",
            "message": SHUTDOWN_MESSAGE,
            "lastProbeTime": None,
            "lastTransitionTime": now_rfc3339(),
        }
        with self._lock:
            local = self._local.get(key)
        if local is None:
            # Not started here (or simulated and unknown): fail it directly.
            status = dict(pod.get("status") or {})
            conditions = replace_condition(list(status.get("conditions") or []), disruption)
            conditions = replace_condition(conditions, _condition("Ready", False, "PodFailed"))
            patch = {
                "status": {
                    "phase": "Failed",
                    "reason": "Terminated",
                    "message": SHUTDOWN_MESSAGE,
                    "conditions": conditions,
                }
            }
            client = self.client
            retrying(lambda: client.merge_patch(pod_path(meta["namespace"], meta["name"], "status"), patch))
            return
        with local.lock:
            local.extra_conditions = replace_condition(local.extra_conditions, disruption)
            local.terminating = True
        self._patch_status(local)
        pod_grace = float((local.spec.get("terminationGracePeriodSeconds") if local.spec else None) or 30)
        self._stop_processes(local, min(grace, pod_grace))
        with local.lock:
            local.phase = "Failed"
            local.reason = "Terminated"
            local.message = SHUTDOWN_MESSAGE
            local.final = True
            runs = local.sandbox.runs if local.sandbox is not None else {}
            for container in local.containers.values():
                container.ready = False
                run = runs.get(container.name)
                if run is not None and run.exit_code is not None:
                    # from the process itself: its exit handler may not have run yet
                    container.state = {"terminated": self._terminated_state(local, run)}
                elif "terminated" not in container.state:
                    # a simulated container (or one that never started) ends as if it obeyed SIGTERM
                    container.state = {
                        "terminated": {
                            "exitCode": 143,
                            "reason": "Error",
                            "startedAt": local.started_at,
                            "finishedAt": now_rfc3339(),
                        }
                    }
        self._patch_status(local)
        self._forget_network(local)

    # pods ----------------------------------------------------------------------------------------
    def _on_service(self, kind: str, service: JSON, _old: JSON | None) -> None:
        meta = service.get("metadata") or {}
        if kind == "DELETED":
            self.network.remove_service(meta.get("namespace", ""), meta.get("name", ""))
            return
        spec = service.get("spec") or {}
        self.network.set_service(
            ServiceRecord(
                meta.get("namespace", ""),
                meta.get("name", ""),
                dict(spec.get("selector") or {}),
                bool(spec.get("publishNotReadyAddresses")),
            )
        )

    def _on_pod(self, kind: str, pod: JSON, _old: JSON | None) -> None:
        assert self.queue is not None
        node = (pod.get("spec") or {}).get("nodeName")
        key = obj_key(pod)
        with self._lock:
            mine = node in self._node_pool or node in self._gone_nodes or key in self._local
        if mine:
            self.queue.add(key)

    def _sync_pod(self, key: str) -> float | None:
        assert self.pods is not None
        assert self.client is not None
        pod = self.pods.get(key)
        with self._lock:
            local = self._local.get(key)
        if pod is None:
            if local is not None:
                threading.Thread(target=self._forget, args=(local, 0.0), daemon=True).start()
            return None
        meta = pod.get("metadata") or {}
        if local is not None and local.uid != meta.get("uid"):
            # Same name, new pod: the old one is gone.
            threading.Thread(target=self._forget, args=(local, 0.0), daemon=True).start()
            local = None
        node = (pod.get("spec") or {}).get("nodeName")
        with self._lock:
            if node in self._unreachable:
                return None  # its kubelet is silent (lose_node)
        if meta.get("deletionTimestamp"):
            grace = float(meta.get("deletionGracePeriodSeconds") or 0)
            if local is None:
                self.client.delete(pod_path(meta["namespace"], meta["name"]), grace_seconds=0)
            elif not local.terminating:
                with local.lock:
                    local.terminating = True
                threading.Thread(target=self._delete_gracefully, args=(local, grace), daemon=True).start()
            return None
        with self._lock:
            gone = node in self._gone_nodes
            shutting = node in self._shutting_down
        if gone and not pod_is_terminal(pod):
            threading.Thread(target=self._terminate_for_shutdown, args=(pod, 0.0), daemon=True).start()
            return None
        if local is None and not pod_is_terminal(pod) and not shutting:
            self._start_pod(pod)
        elif local is not None:
            if self.run_pods:
                self._update_network(local, pod)
            if self._status_differs(pod, local):
                self._patch_status(local)
        return None

    def _status_differs(self, pod: JSON, local: LocalPod) -> bool:
        """Whether the API holds another status than this kubelet reports (a write was lost)."""
        have = pod.get("status") or {}
        want = self._status(local)

        def summary(status: JSON) -> tuple[Any, ...]:
            containers = tuple(
                (
                    c.get("name"),
                    tuple(sorted((c.get("state") or {}).keys())),
                    c.get("restartCount"),
                    ((c.get("state") or {}).get("terminated") or {}).get("exitCode"),
                )
                for c in status.get("containerStatuses") or []
            )
            return (status.get("phase"), status.get("podIP"), status.get("reason"), containers)

        return summary(have) != summary(want)

    def _grace_of(self, local: LocalPod) -> float:
        return float(local.spec.get("terminationGracePeriodSeconds") or 30)

    def _start_pod(self, pod: JSON) -> None:
        assert self.runtime is not None
        meta = pod["metadata"]
        spec = pod.get("spec") or {}
        uid = str(meta.get("uid") or meta["name"])
        ip = self.network.allocate_ip(uid)
        containers = {
            str(c.get("name")): ContainerState(str(c.get("name")), str(c.get("image") or ""))
            for c in spec.get("containers") or []
        }
        local = LocalPod(
            namespace=meta["namespace"],
            name=meta["name"],
            uid=uid,
            node=spec["nodeName"],
            ip=ip,
            started_at=now_rfc3339(),
            restart_policy=str(spec.get("restartPolicy") or "Always"),
            containers=containers,
            spec=spec,
        )
        with self._lock:
            self._local[local.key] = local
        if not self.run_pods:
            with local.lock:
                local.phase = "Running"
                for container in local.containers.values():
                    container.state = {"running": {"startedAt": local.started_at}}
                    container.ready = True
                    container.container_id = f"ttj-local://simulated-{uid[:8]}-{container.name}"
            self._patch_status(local)
            return
        hostname = pod_hostname(pod)
        self._update_network(local, pod)
        hosts = self.network.hosts_file(local.namespace, local.name)
        local.sandbox = self.runtime.sandbox(
            local.namespace, local.name, uid, ip=ip, hostname=hostname, hosts_file=hosts
        )
        if self.podnet is not None:
            try:
                local.sandbox.netns = self.podnet.create(uid, ip)
            except RuntimeError as exc:
                log.warning("pod %s: no network namespace: %s", local.key, exc)
                for state in local.containers.values():
                    state.state = {"waiting": {"reason": "CreatePodSandboxError", "message": str(exc)}}
                self._patch_status(local)
                return
        for container in spec.get("containers") or []:
            self._start_container(local, pod, container)
        self._patch_status(local)

    def _pod_view(self, local: LocalPod, pod: JSON) -> JSON:
        """The pod as the downward API sees it once running (with its IP and node)."""
        status = {
            **(pod.get("status") or {}),
            "podIP": local.ip,
            "podIPs": [{"ip": local.ip}],
            "hostIP": NODE_INTERNAL_IP,
        }
        return {**pod, "status": status}

    def _lookup(self, namespace: str) -> Any:
        def lookup(kind: str, name: str, key: str, optional: bool) -> str | None:
            assert self.client is not None
            import base64

            resource = "configmaps" if kind == "configmap" else "secrets"
            obj = self.client.get(f"/api/v1/namespaces/{namespace}/{resource}/{name}")
            if obj is None:
                if optional:
                    return None
                raise ValueError(f'{kind} "{name}" not found')
            data: dict[str, str] = dict(obj.get("data") or {})
            if kind == "secret":
                data = {k: base64.b64decode(v).decode(errors="replace") for k, v in data.items()}
            if key == "*":
                return "\n".join(f"{k}={v}" for k, v in data.items())
            if key not in data:
                if optional:
                    return None
                raise ValueError(f"couldn't find key {key} in {kind} {namespace}/{name}")
            return data[key]

        return lookup

    def _start_container(self, local: LocalPod, pod: JSON, container: JSON) -> None:
        assert self.runtime is not None
        assert local.sandbox is not None
        name = str(container.get("name"))
        state = local.containers[name]
        from .runtime import base_environment

        try:
            view = self._pod_view(local, pod)
            env = pod_environment(
                view,
                container,
                base_environment(local.sandbox.hostname, self.runtime.kubeconfig),
                self._lookup(local.namespace),
            )
            run = self.runtime.start(local.sandbox, container, env, container.get("workingDir"))
        except (ValueError, OSError) as exc:
            with local.lock:
                state.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
                state.ready = False
            log.warning("pod %s container %s cannot start: %s", local.key, name, exc)
            return
        with local.lock:
            state.state = {"running": {"startedAt": run.started_at}}
            state.ready = True
            state.container_id = f"ttj-local://{run.pid}"
            local.phase = "Running"

    def _on_container_exit(self, sandbox: PodSandbox, run: ContainerRun) -> None:
        key = f"{sandbox.namespace}/{sandbox.name}"
        with self._lock:
            local = self._local.get(key)
        if local is None or local.uid != sandbox.uid or self.runtime is None:
            return
        terminated = self._terminated_state(local, run)
        with local.lock:
            state = local.containers[run.name]
            state.ready = False
            restart = not local.terminating and (
                local.restart_policy == "Always" or (local.restart_policy == "OnFailure" and run.exit_code != 0)
            )
            if restart:
                state.last_state = {"terminated": terminated}
                state.restart_count += 1
                backoff = min(RESTART_BACKOFF_S[1], RESTART_BACKOFF_S[0] * 2 ** (state.restart_count - 1))
                state.state = {
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": f"back-off {backoff:.0f}s restarting failed container={run.name}",
                    }
                }
            else:
                state.state = {"terminated": terminated}
                if not local.terminating:
                    self._settle_phase(local)
        if not local.terminating:
            self._patch_status(local)
        if restart:
            self._later(backoff, self._restart_container, local, run.name)
        elif local.phase in ("Succeeded", "Failed"):
            self._forget_network(local)

    def _terminated_state(self, local: LocalPod, run: ContainerRun) -> JSON:
        """A container's ``terminated`` state from its finished run (exit code, reason, message)."""
        container_spec: JSON = next((c for c in local.spec.get("containers") or [] if c.get("name") == run.name), {})
        message = run.message
        fallback = container_spec.get("terminationMessagePolicy") == "FallbackToLogsOnError"
        if not message and run.exit_code and fallback and self.runtime is not None:
            message = self.runtime.fallback_message(run)
        terminated: JSON = {
            "exitCode": run.exit_code,
            "reason": run.reason,
            "startedAt": run.started_at,
            "finishedAt": run.finished_at,
            "containerID": f"ttj-local://{run.pid}",
        }
        if message:
            terminated["message"] = message
        return terminated

    def _restart_container(self, local: LocalPod, name: str) -> None:
        assert self.pods is not None
        pod = self.pods.get(local.key)
        if pod is None or local.terminating or self._stop.is_set():
            return
        container = next((c for c in local.spec.get("containers") or [] if c.get("name") == name), None)
        if container is not None:
            self._start_container(local, pod, container)
            self._patch_status(local)

    @staticmethod
    def _settle_phase(local: LocalPod) -> None:
        states = [c.state for c in local.containers.values()]
        if not all("terminated" in s for s in states):
            return
        failed = any(s["terminated"].get("exitCode") for s in states)
        local.phase = "Failed" if failed else "Succeeded"
        local.final = True

    def _stop_processes(self, local: LocalPod, grace: float) -> None:
        if self.runtime is not None and local.sandbox is not None:
            self.runtime.stop(local.sandbox, grace)
            self.runtime.kill_group_leftovers(local.sandbox)

    def _delete_gracefully(self, local: LocalPod, grace: float) -> None:
        """A deleted pod: SIGTERM, SIGKILL after the grace period, then remove the object for good."""
        assert self.client is not None
        self._stop_processes(local, grace)
        self._forget_network(local)
        client = self.client
        options = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": local.uid},
        }
        path = pod_path(local.namespace, local.name)
        try:
            retrying(lambda: client.request("DELETE", path, body=options))
        except Exception as exc:
            if not isinstance(exc, KubeError) or exc.status not in (404, 409):
                log.warning("could not finish deleting pod %s: %s", local.key, exc)
        self._forget(local, 0.0)

    def _forget(self, local: LocalPod, grace: float) -> None:
        self._stop_processes(local, grace)
        self._forget_network(local)
        with self._lock:
            if self._local.get(local.key) is local:
                del self._local[local.key]
        self.network.release_ip(local.uid)

    def _forget_network(self, local: LocalPod) -> None:
        """Out of DNS; and once its processes are gone, its network namespace goes too."""
        if not self.run_pods:
            return
        self.network.remove_pod(local.namespace, local.name)
        sandbox = local.sandbox
        if (
            self.podnet is not None
            and sandbox is not None
            and all(r.exit_code is not None for r in sandbox.runs.values())
        ):
            if self.runtime is not None:
                self.runtime.kill_group_leftovers(sandbox)
            self.podnet.delete(local.uid)

    def _update_network(self, local: LocalPod, pod: JSON) -> None:
        if local.final or local.terminating:
            return
        spec = pod.get("spec") or {}
        self.network.set_pod(
            PodRecord(
                namespace=local.namespace,
                name=local.name,
                ip=local.ip,
                labels=dict((pod.get("metadata") or {}).get("labels") or {}),
                hostname=pod_hostname(pod),
                subdomain=spec.get("subdomain"),
            )
        )

    # status --------------------------------------------------------------------------------------
    def _status(self, local: LocalPod) -> JSON:
        with local.lock:
            ready = local.phase == "Running" and all(c.ready for c in local.containers.values())
            conditions = list(local.reported_conditions)
            for condition in (
                _condition("PodScheduled", True),
                _condition("Initialized", True),
                _condition("ContainersReady", ready, None if ready else "ContainersNotReady"),
                _condition(
                    "Ready", ready, None if ready else ("PodCompleted" if local.final else "ContainersNotReady")
                ),
                *local.extra_conditions,
            ):
                conditions = replace_condition(conditions, condition)
            local.reported_conditions = conditions
            statuses = []
            for container in local.containers.values():
                entry: JSON = {
                    "name": container.name,
                    "image": container.image,
                    "imageID": "",
                    "ready": container.ready,
                    "started": "running" in container.state,
                    "restartCount": container.restart_count,
                    "state": container.state,
                    "lastState": container.last_state,
                }
                if container.container_id:
                    entry["containerID"] = container.container_id
                statuses.append(entry)
            status: JSON = {
                "phase": local.phase,
                "conditions": conditions,
                "hostIP": NODE_INTERNAL_IP,
                "hostIPs": [{"ip": NODE_INTERNAL_IP}],
                "podIP": local.ip,
                "podIPs": [{"ip": local.ip}],
                "startTime": local.started_at,
                "containerStatuses": statuses,
                "qosClass": None,
            }
            status.pop("qosClass")
            if local.reason:
                status["reason"] = local.reason
                status["message"] = local.message or ""
            return status

    def _patch_status(self, local: LocalPod) -> None:
        assert self.client is not None
        client = self.client
        path = pod_path(local.namespace, local.name, "status")
        try:
            retrying(lambda: client.merge_patch(path, {"status": self._status(local)}), attempts=3)
        except Exception as exc:
            # The pod's next sync compares and writes again (the kubelet's status manager does the same).
            log.debug("status of %s not written: %s", local.key, exc)
            if self.queue is not None and not self._stop.is_set():
                self.queue.add_after(local.key, 1.0)

    # logs ----------------------------------------------------------------------------------------
    def log_is_live(self, namespace: str, name: str, container: str | None) -> bool:
        """Whether the container may still write to its log (for ``follow``)."""
        with self._lock:
            local = self._local.get(f"{namespace}/{name}")
        if local is None or local.sandbox is None or self._stop.is_set():
            return False
        run = local.sandbox.runs.get(container or next(iter(local.containers), ""))
        return run is not None and run.exit_code is None

    def wait_stopping(self, seconds: float) -> bool:
        return self._stop.wait(seconds)

    def log_file(self, namespace: str, name: str, container: str | None = None, previous: bool = False) -> Path | None:
        """Where a running pod's container log is (for a pods/log handler); None if unknown here."""
        with self._lock:
            local = self._local.get(f"{namespace}/{name}")
        if local is None or local.sandbox is None:
            return None
        chosen = container or next(iter(local.containers), "")
        path = local.sandbox.directory / f"{chosen}.log"
        return path.with_name(f"{chosen}.log.previous") if previous else path


def _condition(kind: str, ok: bool, reason: str | None = None) -> JSON:
    condition: JSON = {
        "type": kind,
        "status": "True" if ok else "False",
        "lastProbeTime": None,
        "lastTransitionTime": now_rfc3339(),
    }
    if reason:
        condition["reason"] = reason
    return condition
