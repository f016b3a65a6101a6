"""The kubelet's container side: a pod's sandbox and containers as processes, their exits and restarts.

:mod:`.runtime` starts and signals processes; this decides what to run (the pod's environment, with
ConfigMap and Secret values read from the API), what an exit means (restartPolicy, CrashLoopBackOff),
and keeps the pod's :class:`~.podstate.LocalPod` up to date for the status the kubelet reports.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from ttj.kubeapi import JSON, KubeClient

from .loopback_network import pod_hostname
from .pod_credentials import PodCredentials
from .pod_networking import PodNetworking
from .podstate import LocalPod, settle_phase, terminated_state
from .pools import NODE_INTERNAL_IP
from .restarts import backoff_seconds, backoff_state, restarts
from .runtime import ContainerRun, PodSandbox, ProcessRuntime, base_environment, pod_environment
from .timers import Timers

log = logging.getLogger(__name__)

#: reads one key of a ConfigMap or Secret, or all of them as KEY=VALUE lines for ``key == "*"``
ConfigLookup = Callable[[str, str, str, bool], str | None]


def config_lookup(client: KubeClient, namespace: str) -> ConfigLookup:
    """``lookup(kind, name, key, optional)`` for :func:`.runtime.pod_environment`, through the API."""

    def lookup(kind: str, name: str, key: str, optional: bool) -> str | None:
        resource = "configmaps" if kind == "configmap" else "secrets"
        obj = client.get(f"/api/v1/namespaces/{namespace}/{resource}/{name}")
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


class ContainerRunner:
    """Runs pods' containers; ``current_pod(key)`` is the pod as last seen, ``local_pod(key)`` what the kubelet
    runs under that key, ``report(local)`` writes its status."""

    def __init__(
        self,
        client: KubeClient,
        networking: PodNetworking,
        timers: Timers,
        stop: threading.Event,
        *,
        state_dir: Path,
        pod_kubeconfig: str,
        current_pod: Callable[[str], JSON | None],
        local_pod: Callable[[str], LocalPod | None],
        report: Callable[[LocalPod], None],
        node_environment: Callable[[str], dict[str, str]] = lambda _node: {},
        program_path: Sequence[str] = (),
    ) -> None:
        self.client = client
        self.program_path = tuple(program_path)
        self.node_environment = node_environment
        self.networking = networking
        self.timers = timers
        self.stop_event = stop
        self.current_pod = current_pod
        self.local_pod = local_pod
        self.report = report
        # Each pod gets its own kubeconfig, with its service account's token (pod_credentials.py).
        self.runtime = ProcessRuntime(state_dir, kubeconfig=None, on_exit=self._on_exit)
        self.credentials = PodCredentials(client, pod_kubeconfig)

    def run_pod(self, local: LocalPod, pod: JSON) -> None:
        """The pod's sandbox (hostname, hosts file, network namespace) and its containers."""
        self.networking.admit(local, pod)
        local.sandbox = self.runtime.sandbox(
            local.namespace,
            local.name,
            local.uid,
            ip=local.ip,
            hostname=pod_hostname(pod),
            hosts_file=self.networking.hosts_file(local),
        )
        try:
            local.sandbox.netns = self.networking.create_namespace(local)
        except RuntimeError as exc:
            log.warning("pod %s: no network namespace: %s", local.key, exc)
            for state in local.containers.values():
                state.state = {"waiting": {"reason": "CreatePodSandboxError", "message": str(exc)}}
            return
        for container in local.spec.get("containers") or []:
            self._start(local, pod, container)

    def _start(self, local: LocalPod, pod: JSON, container: JSON) -> None:
        assert local.sandbox is not None
        name = str(container.get("name"))
        state = local.containers[name]
        try:
            kubeconfig = self.credentials.kubeconfig_for(pod, local.sandbox.directory)
            env = pod_environment(
                _downward_view(local, pod),
                container,
                {
                    **base_environment(local.sandbox.hostname, kubeconfig, self.program_path),
                    **self.node_environment(local.node),
                },
                config_lookup(self.client, local.namespace),
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

    def terminated_state(self, local: LocalPod, run: ContainerRun) -> JSON:
        return terminated_state(local, run, self.runtime.fallback_message)

    def _on_exit(self, sandbox: PodSandbox, run: ContainerRun) -> None:
        local = self.local_pod(f"{sandbox.namespace}/{sandbox.name}")
        if local is None or local.uid != sandbox.uid:
            return
        terminated = self.terminated_state(local, run)
        backoff = 0.0
        with local.lock:
            state = local.containers[run.name]
            state.ready = False
            restart = not local.terminating and restarts(local.restart_policy, run.exit_code)
            if restart:
                state.last_state = {"terminated": terminated}
                state.restart_count += 1
                backoff = backoff_seconds(state.restart_count)
                state.state = backoff_state(run.name, backoff)
            else:
                state.state = {"terminated": terminated}
                if not local.terminating:
                    settle_phase(local)
        if not local.terminating:
            self.report(local)
        if restart:
            self.timers.later(backoff, self._restart, local, run.name)
        elif local.phase in ("Succeeded", "Failed"):
            self.networking.forget(local)

    def _restart(self, local: LocalPod, name: str) -> None:
        pod = self.current_pod(local.key)
        if pod is None or local.terminating or self.stop_event.is_set():
            return
        container = local.container_spec(name)
        if container is not None:
            self._start(local, pod, container)
            self.report(local)

    def stop(self, local: LocalPod, grace: float) -> None:
        """SIGTERM, SIGKILL after ``grace`` seconds, and whatever the containers left behind."""
        if local.sandbox is not None:
            self.runtime.stop(local.sandbox, grace)
            self.runtime.kill_group_leftovers(local.sandbox)


def _downward_view(local: LocalPod, pod: JSON) -> JSON:
    """The pod as the downward API sees it once running (with its IP and node)."""
    status = {**(pod.get("status") or {}), "podIP": local.ip, "podIPs": [{"ip": local.ip}], "hostIP": NODE_INTERNAL_IP}
    return {**pod, "status": status}
