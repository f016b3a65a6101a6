"""The kubelets' pod networking: pod IPs, cluster DNS through hosts files, and a network namespace per pod.

Namespaces (:mod:`.netns`) when asked for and possible (root, ip, nsenter); otherwise pods share the host's
network with 127.x addresses (:mod:`.loopback_network`). Simulated pods get an IP and nothing else.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from urllib.parse import urlsplit

from ttj.kubeapi import JSON

from .loopback_network import PodNetwork, PodRecord, ServiceRecord, pod_hostname
from .netns import PodNetworkNamespaces
from .podstate import LocalPod
from .runtime import ProcessRuntime

log = logging.getLogger(__name__)

HOST_NETWORK_WARNING = "pods share the host's network (127.x pod IPs)"


def current_cluster(config: JSON) -> JSON:
    """The ``cluster`` entry the kubeconfig's current context names (the first one when it names none)."""
    clusters = {c.get("name"): c["cluster"] for c in config.get("clusters") or []}
    contexts = {c.get("name"): c.get("context") or {} for c in config.get("contexts") or []}
    wanted = contexts.get(config.get("current-context"), {}).get("cluster")
    cluster: JSON = clusters.get(wanted) or config["clusters"][0]["cluster"]
    return cluster


def relayed_kubeconfig(config: JSON, gateway: str, port: int) -> JSON:
    """The kubeconfig pods use: the current cluster's API through the relay on the gateway. Over https the
    server's certificate names the API server, not the gateway, so the original host name is kept for TLS
    verification (``tls-server-name``, as client-go, kubectl and the Python client read it)."""
    relayed = copy.deepcopy(config)
    cluster = current_cluster(relayed)
    server = urlsplit(str(cluster["server"]))
    cluster["server"] = f"{server.scheme}://{gateway}:{port}"
    if server.scheme == "https" and server.hostname and not cluster.get("tls-server-name"):
        cluster["tls-server-name"] = server.hostname
    return relayed


class PodNetworking:
    """``run_pods``: pods are processes (they get DNS and maybe namespaces); ``namespaces``: try per-pod ones."""

    def __init__(self, state_dir: Path, *, run_pods: bool, namespaces: bool) -> None:
        self.state_dir = state_dir
        self.run_pods = run_pods
        self.want_namespaces = namespaces
        self.network = PodNetwork(state_dir)
        self.podnet: PodNetworkNamespaces | None = None

    def setup(self, kubeconfig_path: str) -> str:
        """Bridge and relay when pods get namespaces; returns the kubeconfig pods use."""
        if not (self.run_pods and self.want_namespaces):
            return kubeconfig_path
        if not PodNetworkNamespaces.available():
            log.warning(
                "%s: pod network namespaces need root and ip/nsenter/unshare/mount; TensorFlow "
                "parameter-server training will not work",
                HOST_NETWORK_WARNING,
            )
            return kubeconfig_path
        import yaml

        podnet = PodNetworkNamespaces()
        try:
            podnet.setup()
            config = yaml.safe_load(Path(kubeconfig_path).read_text(encoding="utf-8"))
            server = urlsplit(str(current_cluster(config)["server"]))
            # Inside its namespace a pod reaches the API through the bridge's gateway, relayed to the server.
            port = podnet.relay(
                server.hostname or "127.0.0.1", server.port or (443 if server.scheme == "https" else 80)
            )
            config = relayed_kubeconfig(config, podnet.gateway, port)
            path = self.state_dir / "pod-kubeconfig"
            path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        except (RuntimeError, OSError, KeyError, IndexError, TypeError) as exc:
            log.warning("%s: no pod network namespaces: %s", HOST_NETWORK_WARNING, exc)
            podnet.teardown()
            return kubeconfig_path
        self.podnet = podnet
        self.network = PodNetwork(self.state_dir, first_ip=podnet.first_pod_ip, last_ip=podnet.last_pod_ip)
        return str(path)

    def teardown(self) -> None:
        if self.podnet is not None:
            self.podnet.teardown()

    def on_service(self, kind: str, service: JSON, _old: JSON | None) -> None:
        """Informer handler: Services are names in the pods' hosts files."""
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

    def allocate_ip(self, uid: str) -> str:
        return self.network.allocate_ip(uid)

    def release_ip(self, uid: str) -> None:
        self.network.release_ip(uid)

    def hosts_file(self, local: LocalPod) -> Path:
        return self.network.hosts_file(local.namespace, local.name)

    def create_namespace(self, local: LocalPod) -> str | None:
        """The pod's network namespace (path for nsenter), or None on the host's network; RuntimeError."""
        return self.podnet.create(local.uid, local.ip) if self.podnet is not None else None

    def admit(self, local: LocalPod, pod: JSON) -> None:
        """The pod's names resolve to its IP (again, after a change of its labels or hostname)."""
        if not self.run_pods or local.final or local.terminating:
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

    def forget(self, local: LocalPod) -> None:
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
            ProcessRuntime.kill_group_leftovers(sandbox)
            self.podnet.delete(local.uid)
