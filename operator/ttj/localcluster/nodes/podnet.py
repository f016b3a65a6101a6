"""Pod network namespaces: every pod gets its own network stack and an address on a cluster bridge.

As a CNI bridge plugin does it: one Linux bridge per cluster (``ttj<hex>``) holding the gateway
``10.X.0.1/16``, and per pod a named network namespace (``ip netns``) with a veth pair, ``eth0`` inside
carrying the pod IP, ``lo`` up and a default route via the gateway. Pods then bind any port on
``0.0.0.0`` without clashing (TensorFlow's gRPC server binds ``0.0.0.0:<port>`` whatever address the
cluster spec names), reach each other by pod IP, and the host reaches them too.

Pods reach the API server through a TCP relay on the gateway address (the API server listens on the
host's loopback, which a pod's own loopback is not), the way pods reach ``kubernetes.default.svc``.

Needs root and ``ip``/``nsenter``; ``PodNetworkNamespaces.available()`` says whether this machine can.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import itertools
import logging
import os
import re
import shutil
import socket
import subprocess
import threading
from pathlib import Path

log = logging.getLogger(__name__)

SUBNET_SECOND_OCTETS = range(200, 251)
LOCK_FILE = Path("/run/ttj-local-podnet.lock")
_serials = itertools.count(1)  # several clusters in one process get different bridges


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip() or result.returncode}")
    return result


class PodNetworkNamespaces:
    """The bridge, the per-pod namespaces, and the API relay of one local cluster."""

    def __init__(self) -> None:
        serial = next(_serials)
        self.bridge = f"ttj{os.getpid():x}x{serial:x}"[:15]
        self._prefix = f"{self.bridge}-"
        self.subnet: ipaddress.IPv4Network | None = None
        self._relays: list[_TcpRelay] = []
        self._lock = threading.Lock()
        self._namespaces: dict[str, str] = {}  # pod uid → netns name

    @staticmethod
    def available() -> bool:
        return os.geteuid() == 0 and all(shutil.which(t) for t in ("ip", "nsenter", "unshare", "mount"))

    @property
    def gateway(self) -> str:
        assert self.subnet is not None
        return str(self.subnet.network_address + 1)

    @property
    def first_pod_ip(self) -> str:
        assert self.subnet is not None
        return str(self.subnet.network_address + 2)

    @property
    def last_pod_ip(self) -> str:
        assert self.subnet is not None
        return str(self.subnet.broadcast_address - 1)

    @staticmethod
    def remove_stale() -> None:
        """Bridges and namespaces left by a local cluster whose process died without cleaning up."""
        owned = re.compile(r"^ttj([0-9a-f]+)x")

        def dead(name: str) -> bool:
            match = owned.match(name)
            if not match:
                return False
            try:
                os.kill(int(match.group(1), 16), 0)
            except ProcessLookupError:
                return True
            except PermissionError:
                return False
            return False

        for line in _ip("netns", "list", check=False).stdout.splitlines():
            name = line.split()[0] if line.split() else ""
            if dead(name):
                _ip("netns", "del", name, check=False)
        for line in _ip("-o", "link", "show", "type", "bridge", check=False).stdout.splitlines():
            parts = line.split(":")
            name = parts[1].strip() if len(parts) > 1 else ""
            if dead(name):
                _ip("link", "del", name, check=False)

    def setup(self) -> None:
        """Create the bridge on a 10.X.0.0/16 no interface of this machine uses."""
        LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
        with LOCK_FILE.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.remove_stale()
            used = _ip("-o", "-4", "addr", "show").stdout
            routes = _ip("-4", "route", "show").stdout
            for octet in SUBNET_SECOND_OCTETS:
                candidate = ipaddress.IPv4Network(f"10.{octet}.0.0/16")
                if f" 10.{octet}." not in used and f"10.{octet}." not in routes:
                    break
            else:
                raise RuntimeError("no free 10.X.0.0/16 for the local cluster's pod network")
            self.subnet = candidate
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.gateway}/16", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
        log.info("pod network %s on bridge %s", self.subnet, self.bridge)

    def netns_path(self, uid: str) -> str:
        return f"/run/netns/{self._namespaces[uid]}"

    def create(self, uid: str, ip: str) -> str:
        """The pod's namespace with eth0 = ip; returns its path (for ``nsenter --net=``)."""
        with self._lock:
            if uid in self._namespaces:
                return self.netns_path(uid)
            name = f"{self._prefix}{uid.replace('-', '')[:12]}"
            self._namespaces[uid] = name
        host_end = f"v{self.bridge[3:]}{uid.replace('-', '')[:14]}"[:15]
        try:
            _ip("netns", "add", name)
            _ip("link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", name)
            _ip("link", "set", host_end, "master", self.bridge, "up")
            _ip("-n", name, "addr", "add", f"{ip}/16", "dev", "eth0")
            _ip("-n", name, "link", "set", "eth0", "up")
            _ip("-n", name, "link", "set", "lo", "up")
            _ip("-n", name, "route", "add", "default", "via", self.gateway)
        except RuntimeError:
            self.delete(uid)
            raise
        return self.netns_path(uid)

    def delete(self, uid: str) -> None:
        with self._lock:
            name = self._namespaces.pop(uid, None)
        if name is not None:
            # Deleting the namespace destroys its veth pair too.
            _ip("netns", "del", name, check=False)

    def relay(self, target_host: str, target_port: int) -> int:
        """Listen on the gateway address and forward to target (the API server); returns the port."""
        relay = _TcpRelay(self.gateway, (target_host, target_port))
        relay.start()
        self._relays.append(relay)
        return relay.port

    def teardown(self) -> None:
        for relay in self._relays:
            relay.stop()
        for uid in list(self._namespaces):
            self.delete(uid)
        if self.subnet is not None:
            _ip("link", "del", self.bridge, check=False)


class _TcpRelay:
    """A plain TCP forwarder (thread per direction), enough for API calls and watches from pods."""

    def __init__(self, host: str, target: tuple[str, int]) -> None:
        self.target = target
        self._server = socket.create_server((host, 0))
        self.port = int(self._server.getsockname()[1])
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, name=f"api-relay-{host}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)
            with contextlib.suppress(OSError):
                source.close()
