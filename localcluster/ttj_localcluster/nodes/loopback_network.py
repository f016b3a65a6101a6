"""Pod networking for pods that run as local processes: pod IPs on the loopback, and DNS by hosts files.

Every pod gets its own address in 127.0.0.0/8 (from 127.1.0.2 on). Linux routes the whole block to the
loopback device, so a process can bind its pod IP and every other process can reach it there, with
no set-up and no privileges.

Names are resolved the way cluster DNS would answer them, through a hosts file per pod that the
runtime bind-mounts over ``/etc/hosts`` inside the pod's own mount namespace. The files are rewritten
IN PLACE (same inode: a bind mount pins the inode, so a rename would go unseen) whenever pods or
Services change. Records, as Kubernetes DNS gives them:

- ``<svc>.<ns>.svc.cluster.local`` (and ``<svc>.<ns>.svc``, ``<svc>.<ns>``, and ``<svc>`` within the
  namespace, standing in for the resolv.conf search path) → the IPs of the pods the Service selects
  (headless or not: there is no kube-proxy, so a ClusterIP Service also resolves to pod IPs);
- ``<hostname>.<subdomain>.<ns>.svc.cluster.local`` for a pod with ``hostname`` and ``subdomain`` when a
  Service named ``<subdomain>`` in its namespace selects it;
- the pod's own hostname → its IP.
"""

from __future__ import annotations

import ipaddress
import random
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CLUSTER_DOMAIN = "cluster.local"
FIRST_POD_IP = ipaddress.IPv4Address("127.1.0.2")
LAST_POD_IP = ipaddress.IPv4Address("127.254.255.254")


#: Bound (not listening) on a /16's first address while a cluster hands out that /16's addresses.
CLAIM_PORT = 32_767


def _claim_block() -> tuple[str, socket.socket]:
    """Host network: a random /16 of 127/8 that no other cluster on this machine holds, with the socket
    that holds it. Random, so that the next run (while the last one's sockets sit in TIME_WAIT) starts
    elsewhere; claimed, so that clusters running side by side (parallel tests) never share an address."""
    blocks = list(range(200))
    random.shuffle(blocks)
    for block in blocks:
        first = FIRST_POD_IP + block * 65536
        claim = socket.socket()
        try:
            claim.bind((str(first - 1), CLAIM_PORT))
        except OSError:
            claim.close()
            continue
        return str(first), claim
    raise RuntimeError("every /16 of 127/8 for pod IPs is held by another local cluster on this machine")


@dataclass
class PodRecord:
    namespace: str
    name: str
    ip: str
    labels: dict[str, str]
    hostname: str
    subdomain: str | None
    ready: bool = True
    terminating: bool = False


@dataclass
class ServiceRecord:
    namespace: str
    name: str
    selector: dict[str, str]
    publish_not_ready: bool = False


@dataclass
class _HostsFile:
    path: Path
    namespace: str
    pod_key: str


def pod_hostname(pod: Mapping[str, Any]) -> str:
    """spec.hostname, else the pod name, cut to a DNS label (63 characters) as the kubelet does."""
    spec = pod.get("spec") or {}
    name = str(spec.get("hostname") or (pod.get("metadata") or {}).get("name") or "pod")
    return name[:63].rstrip("-.")


class PodNetwork:
    """Allocates pod IPs and keeps every running pod's hosts file current. Thread-safe."""

    def __init__(
        self,
        state_dir: Path,
        cluster_domain: str = CLUSTER_DOMAIN,
        first_ip: str | None = None,
        last_ip: str = str(LAST_POD_IP),
    ) -> None:
        self._claim: socket.socket | None = None
        if first_ip is None:
            first_ip, self._claim = _claim_block()
        self.state_dir = state_dir
        self.cluster_domain = cluster_domain
        self._lock = threading.Lock()
        self._next = int(ipaddress.IPv4Address(first_ip))
        self._last = int(ipaddress.IPv4Address(last_ip))
        self._by_uid: dict[str, str] = {}
        self._free: list[str] = []
        self._pods: dict[str, PodRecord] = {}  # key: namespace/name
        self._services: dict[str, ServiceRecord] = {}
        self._files: dict[str, _HostsFile] = {}
        self._hosts_dir = state_dir / "hosts"
        self._hosts_dir.mkdir(parents=True, exist_ok=True)

    # -- addresses -------------------------------------------------------------------------------
    def allocate_ip(self, uid: str) -> str:
        with self._lock:
            if uid in self._by_uid:
                return self._by_uid[uid]
            # Fresh addresses first: a pod IP is not handed out again while millions are unused, so a
            # peer that still holds a dead pod's address never reaches a different pod there.
            if self._next > self._last:
                if not self._free:
                    raise RuntimeError("the local cluster ran out of pod IPs")
                ip = self._free.pop(0)
            else:
                ip = str(ipaddress.IPv4Address(self._next))
                self._next += 1
                # Skip .0 and .255 so no address looks like a network or broadcast one.
                while ipaddress.IPv4Address(self._next).packed[-1] in (0, 255):
                    self._next += 1
            self._by_uid[uid] = ip
            return ip

    def release_ip(self, uid: str) -> None:
        with self._lock:
            ip = self._by_uid.pop(uid, None)
            if ip is not None:
                self._free.append(ip)

    # -- records ---------------------------------------------------------------------------------
    def set_pod(self, record: PodRecord) -> None:
        with self._lock:
            key = f"{record.namespace}/{record.name}"
            if self._pods.get(key) == record:
                return
            self._pods[key] = record
        self.rewrite()

    def remove_pod(self, namespace: str, name: str) -> None:
        key = f"{namespace}/{name}"
        with self._lock:
            existed = self._pods.pop(key, None) is not None
            hosts = self._files.pop(key, None)
        if hosts is not None:
            hosts.path.unlink(missing_ok=True)
        if existed:
            self.rewrite()

    def set_service(self, record: ServiceRecord) -> None:
        with self._lock:
            key = f"{record.namespace}/{record.name}"
            if self._services.get(key) == record:
                return
            self._services[key] = record
        self.rewrite()

    def remove_service(self, namespace: str, name: str) -> None:
        with self._lock:
            existed = self._services.pop(f"{namespace}/{name}", None) is not None
        if existed:
            self.rewrite()

    # -- hosts files -----------------------------------------------------------------------------
    def hosts_file(self, namespace: str, name: str) -> Path:
        """The pod's hosts file (created now, kept current until remove_pod)."""
        key = f"{namespace}/{name}"
        with self._lock:
            entry = self._files.get(key)
            if entry is None:
                entry = _HostsFile(self._hosts_dir / f"{namespace}_{name}.hosts", namespace, key)
                entry.path.touch()
                self._files[key] = entry
            content = self._render(entry)
        _write_in_place(entry.path, content)
        return entry.path

    def resolve(self, hostname: str, namespace: str = "default") -> list[str]:
        """What a pod in ``namespace`` would resolve ``hostname`` to (for tests and diagnostics)."""
        with self._lock:
            table = self._table(namespace)
        return sorted({ip for ip, names in table if hostname in names})

    def rewrite(self) -> None:
        with self._lock:
            rendered = [(entry.path, self._render(entry)) for entry in self._files.values()]
        for path, content in rendered:
            _write_in_place(path, content)

    def _selected(self, service: ServiceRecord) -> list[PodRecord]:
        if not service.selector:
            return []  # a Service without selector has hand-made endpoints; not modelled
        return [
            pod
            for pod in self._pods.values()
            if pod.namespace == service.namespace
            and all(pod.labels.get(k) == v for k, v in service.selector.items())
            and (service.publish_not_ready or (pod.ready and not pod.terminating))
        ]

    def _table(self, namespace: str) -> list[tuple[str, list[str]]]:
        domain = self.cluster_domain
        table: list[tuple[str, list[str]]] = []
        for service in sorted(self._services.values(), key=lambda s: (s.namespace, s.name)):
            base = f"{service.name}.{service.namespace}"
            names = [f"{base}.svc.{domain}", f"{base}.svc", base]
            if service.namespace == namespace:
                names.append(service.name)
            for pod in sorted(self._selected(service), key=lambda p: p.name):
                table.append((pod.ip, names))
                if pod.subdomain == service.name:
                    host = f"{pod.hostname}.{base}"
                    host_names = [f"{host}.svc.{domain}", f"{host}.svc", host]
                    if service.namespace == namespace:
                        host_names.append(f"{pod.hostname}.{service.name}")
                    table.append((pod.ip, host_names))
        return table

    def _render(self, entry: _HostsFile) -> str:
        lines = [
            "# Kubernetes-managed hosts file (ttj local cluster; rewritten in place as pods and Services change).",
            "127.0.0.1\tlocalhost",
            "::1\tlocalhost ip6-localhost ip6-loopback",
        ]
        own = self._pods.get(entry.pod_key)
        if own is not None:
            names = [own.hostname]
            if own.subdomain:
                fqdn = f"{own.hostname}.{own.subdomain}.{own.namespace}.svc.{self.cluster_domain}"
                names.insert(0, fqdn)
            lines.append(f"{own.ip}\t{' '.join(names)}")
        lines.extend(f"{ip}\t{' '.join(names)}" for ip, names in self._table(entry.namespace))
        return "\n".join(lines) + "\n"


def _write_in_place(path: Path, content: str) -> None:
    """Overwrite keeping the inode (bind mounts of the file must see the change)."""
    data = content.encode()
    try:
        with path.open("r+b") as handle:
            handle.write(data)
            handle.truncate(len(data))
    except FileNotFoundError:
        return  # the pod went away meanwhile
