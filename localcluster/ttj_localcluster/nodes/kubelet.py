"""The kubelets of the fleet's nodes: the pod sync loop.

An API client like the kubelet: it watches the pods bound to the fleet's nodes and runs them (as local
processes, see :mod:`.containers`, or simulated: Running at once with a pod IP), reports their status,
finishes graceful deletions (SIGTERM, SIGKILL after the grace period, then DELETE with
gracePeriodSeconds=0), and fails the pods of a node that shuts down. One informer and one work queue
serve all the nodes; what each node may do follows its :class:`~.registry.NodeState`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path

from ttj import kubeapi
from ttj.kubeapi import JSON, KubeClient, KubeError
from ttj_contract import LocalSimulation

from .containers import ContainerRunner
from .kube import Informer, WorkQueue, obj_key, retrying, wait_synced
from .pod_networking import PodNetworking
from .podstate import (
    SHUTDOWN_MESSAGE,
    LocalPod,
    disruption_condition,
    new_local_pod,
    pod_status,
    shutdown_failure,
    sigterm_state,
    status_summary,
)
from .predicates import pod_is_terminal
from .registry import NodeRegistry, NodeState
from .scheduler import replace_condition
from .timers import Timers

log = logging.getLogger(__name__)

#: how long ``stop()`` gives each pod's processes before SIGKILL, at most
STOP_GRACE_S = 5.0


class Kubelet:
    """``run_pods``: containers run as processes; else pods are Running at once and run nothing."""

    def __init__(
        self,
        client: KubeClient,
        registry: NodeRegistry,
        networking: PodNetworking,
        timers: Timers,
        stop: threading.Event,
        *,
        run_pods: bool,
        state_dir: Path,
        pod_kubeconfig: str,
        program_path: Sequence[str] = (),
    ) -> None:
        self.client = client
        self.registry = registry
        self.networking = networking
        self.stop_event = stop
        self.run_pods = run_pods
        self._lock = threading.Lock()
        self._local: dict[str, LocalPod] = {}
        self.pods = Informer(client, "/api/v1/pods", "kubelet-pods", stop)
        self.services = Informer(client, "/api/v1/services", "kubelet-services", stop) if run_pods else None
        self.queue = WorkQueue("kubelet", self._sync_pod, stop)
        self.containers = ContainerRunner(
            client,
            networking,
            timers,
            stop,
            state_dir=state_dir,
            pod_kubeconfig=pod_kubeconfig,
            current_pod=self.pods.get,
            local_pod=self.local_pod,
            report=self.report,
            node_environment=self.simulation_environment,
            program_path=program_path,
        )

    def simulation_environment(self, node: str) -> dict[str, str]:
        """What the local cluster tells a container of its node's simulated GPU (never set on GKE)."""
        pool = self.registry.pool(self.registry.pool_of(node))
        return {LocalSimulation.SPEED: f"{pool.speed:g}", LocalSimulation.STEP_SECONDS: f"{pool.step_seconds:g}"}

    def start(self) -> None:
        """Returns once the informers have listed what there is."""
        self.pods.add_handler(self._on_pod)
        informers = [self.pods]
        if self.services is not None:
            self.services.add_handler(self.networking.on_service)
            informers.append(self.services)
        self.queue.start()
        for informer in informers:
            informer.start()
        wait_synced(informers)

    def stop_pods(self) -> None:
        """Every pod's processes: SIGTERM, then SIGKILL after their grace period (5 s at most)."""
        with self._lock:
            local = list(self._local.values())
        threads = [
            threading.Thread(target=self.containers.stop, args=(p, min(STOP_GRACE_S, p.grace_seconds)), daemon=True)
            for p in local
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(15)

    def join(self, timeout: float) -> None:
        for part in (self.pods, self.services, self.queue):
            if part is not None:
                part.join(timeout)

    def local_pod(self, key: str) -> LocalPod | None:
        with self._lock:
            return self._local.get(key)

    # what the API asks of the node ---------------------------------------------------------------
    def _on_pod(self, kind: str, pod: JSON, _old: JSON | None) -> None:
        node = (pod.get("spec") or {}).get("nodeName")
        key = obj_key(pod)
        if self.registry.state_of(node) is not None or self.local_pod(key) is not None:
            self.queue.add(key)

    def _sync_pod(self, key: str) -> float | None:
        pod = self.pods.get(key)
        local = self.local_pod(key)
        if pod is None:
            if local is not None:
                threading.Thread(target=self._forget, args=(local, 0.0), daemon=True).start()
            return None
        meta = pod.get("metadata") or {}
        if local is not None and local.uid != meta.get("uid"):
            # Same name, new pod: the old one is gone.
            threading.Thread(target=self._forget, args=(local, 0.0), daemon=True).start()
            local = None
        state = self.registry.state_of((pod.get("spec") or {}).get("nodeName"))
        if state is NodeState.UNREACHABLE:
            return None  # its kubelet is silent
        if meta.get("deletionTimestamp"):
            grace = float(meta.get("deletionGracePeriodSeconds") or 0)
            if local is None:
                self.client.delete(kubeapi.path("Pod", meta["namespace"], meta["name"]), grace_seconds=0)
            elif not local.terminating:
                with local.lock:
                    local.terminating = True
                threading.Thread(target=self._delete_gracefully, args=(local, grace), daemon=True).start()
            return None
        if state is NodeState.GONE and not pod_is_terminal(pod):
            threading.Thread(target=self.terminate_for_shutdown, args=(pod, 0.0), daemon=True).start()
            return None
        if local is None and not pod_is_terminal(pod) and state is not None and state.live:
            self._start_pod(pod)
        elif local is not None:
            self.networking.admit(local, pod)
            if status_summary(pod.get("status") or {}) != status_summary(pod_status(local)):
                self.report(local)  # a status write was lost
        return None

    def _start_pod(self, pod: JSON) -> None:
        uid = str(pod["metadata"].get("uid") or pod["metadata"]["name"])
        local = new_local_pod(pod, self.networking.allocate_ip(uid))
        with self._lock:
            self._local[local.key] = local
        if self.run_pods:
            self.containers.run_pod(local, pod)
        else:
            with local.lock:
                local.phase = "Running"
                for container in local.containers.values():
                    container.state = {"running": {"startedAt": local.started_at}}
                    container.ready = True
                    container.container_id = f"ttj-local://simulated-{local.uid[:8]}-{container.name}"
        self.report(local)

    def _stop_containers(self, local: LocalPod, grace: float) -> None:
        """SIGTERM, SIGKILL after ``grace`` seconds; simulated containers take their pool's ``stop_seconds``."""
        self.containers.stop(local, grace)
        if not self.run_pods and grace > 0:
            try:
                seconds = self.registry.pool(self.registry.pool_of(local.node)).stop_seconds
            except KeyError:  # a node of another fleet's
                seconds = 0.0
            self.stop_event.wait(min(seconds, grace))

    def _delete_gracefully(self, local: LocalPod, grace: float) -> None:
        """A deleted pod: SIGTERM, SIGKILL after the grace period, then remove the object for good."""
        self._stop_containers(local, grace)
        self.networking.forget(local)
        client = self.client
        options = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": local.uid},
        }
        path = kubeapi.path("Pod", local.namespace, local.name)
        try:
            retrying(lambda: client.request("DELETE", path, body=options))
        except Exception as exc:
            if not isinstance(exc, KubeError) or exc.status not in (404, 409):
                log.warning("could not finish deleting pod %s: %s", local.key, exc)
        self._forget(local, 0.0)

    def _forget(self, local: LocalPod, grace: float) -> None:
        self.containers.stop(local, grace)
        self.networking.forget(local)
        with self._lock:
            if self._local.get(local.key) is local:
                del self._local[local.key]
        self.networking.release_ip(local.uid)

    # node events -----------------------------------------------------------------------------------
    def pods_on_node(self, node: str) -> list[JSON]:
        """The pods bound to the node that have not finished, as last seen."""
        return [
            p for p in self.pods.items() if (p.get("spec") or {}).get("nodeName") == node and not pod_is_terminal(p)
        ]

    def drop_node(self, node: str) -> None:
        """The node is lost: its pods' processes die with it and nothing of them is reported any more."""
        with self._lock:
            lost = [p for p in self._local.values() if p.node == node]
        for local in lost:
            with local.lock:
                local.terminating = True
            self._forget(local, 0.0)

    def terminate_for_shutdown(self, pod: JSON, grace: float) -> None:
        """GKE's graceful node shutdown of one pod: DisruptionTarget, SIGTERM, SIGKILL after ``grace`` (or the
        pod's own shorter grace period), then Failed with reason Terminated."""
        local = self.local_pod(obj_key(pod))
        if local is None:
            # Not started here: fail it directly.
            client = self.client
            path = kubeapi.path("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"], "status")
            patch = shutdown_failure(pod)
            retrying(lambda: client.merge_patch(path, patch))
            return
        with local.lock:
            local.extra_conditions = replace_condition(local.extra_conditions, disruption_condition())
            local.terminating = True
        self.report(local)
        self._stop_containers(local, min(grace, local.grace_seconds))
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
                    container.state = {"terminated": self.containers.terminated_state(local, run)}
                elif "terminated" not in container.state:
                    container.state = sigterm_state(local)
        self.report(local)
        self.networking.forget(local)
        self._finish_deletion_requested_meanwhile(local)

    def _finish_deletion_requested_meanwhile(self, local: LocalPod) -> None:
        """A pod deleted while its node shut it down (its sync left it to the shutdown): now that it is terminal,
        remove it, as the kubelet's status manager removes a terminal pod that has a deletionTimestamp. One
        deleted after this, once its node is gone, is the pod garbage collector's."""
        client = self.client
        path = kubeapi.path("Pod", local.namespace, local.name)
        try:
            current = retrying(lambda: client.get(path))
        except Exception as exc:
            log.warning("could not read pod %s after its shutdown: %s", local.key, exc)
            return
        meta = (current or {}).get("metadata") or {}
        if meta.get("uid") == local.uid and meta.get("deletionTimestamp"):
            self._delete_gracefully(local, 0.0)

    # status ----------------------------------------------------------------------------------------
    def report(self, local: LocalPod) -> None:
        """Write the pod's status; when that fails, its next sync writes it again (as the status manager does)."""
        client = self.client
        path = kubeapi.path("Pod", local.namespace, local.name, "status")
        try:
            retrying(lambda: client.merge_patch(path, {"status": pod_status(local)}), attempts=3)
        except Exception as exc:
            log.debug("status of %s not written: %s", local.key, exc)
            if not self.stop_event.is_set():
                self.queue.add_after(local.key, 1.0)

    # logs ------------------------------------------------------------------------------------------
    def log_file(self, namespace: str, name: str, container: str | None, previous: bool) -> Path | None:
        local = self.local_pod(f"{namespace}/{name}")
        if local is None or local.sandbox is None:
            return None
        chosen = container or next(iter(local.containers), "")
        path = local.sandbox.directory / f"{chosen}.log"
        return path.with_name(f"{chosen}.log.previous") if previous else path

    def log_is_live(self, namespace: str, name: str, container: str | None) -> bool:
        local = self.local_pod(f"{namespace}/{name}")
        if local is None or local.sandbox is None or self.stop_event.is_set():
            return False
        run = local.sandbox.runs.get(container or next(iter(local.containers), ""))
        return run is not None and run.exit_code is None
