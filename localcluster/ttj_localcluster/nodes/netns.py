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

import asyncio
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
        self._relays: list[TcpRelay] = []
        self._lock = threading.Lock()
        self._namespaces: dict[str, str] = {}  # pod uid → netns name
        #: the bridge's (gateway's) MAC: locally administered, unicast
        self.bridge_mac = ":".join(f"{b:02x}" for b in (0x02, *os.urandom(5)))

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
            # A bridge without an address of its own takes the lowest MAC of its ports, so deleting the pod
            # holding that port would change it under every other pod's ARP cache (their traffic to the
            # gateway, the API relay, then goes nowhere until the entries expire). A set address stays.
            _ip("link", "add", self.bridge, "address", self.bridge_mac, "type", "bridge")
            _ip("addr", "add", f"{self.gateway}/16", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
        log.info("pod network %s on bridge %s", self.subnet, self.bridge)

    def netns_path(self, uid: str) -> str:
        return f"/run/netns/{self._namespaces[uid]}"

    def bridge_port(self, uid: str) -> str:
        """The host end of the pod's veth pair, a port of the bridge."""
        return f"v{self.bridge[3:]}{uid.replace('-', '')[:14]}"[:15]

    def create(self, uid: str, ip: str) -> str:
        """The pod's namespace with eth0 = ip; returns its path (for ``nsenter --net=``)."""
        with self._lock:
            if uid in self._namespaces:
                return self.netns_path(uid)
            name = f"{self._prefix}{uid.replace('-', '')[:12]}"
            self._namespaces[uid] = name
        host_end = self.bridge_port(uid)
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
        relay = TcpRelay(self.gateway, (target_host, target_port))
        relay.start()
        self._relays.append(relay)
        return relay.port

    def partition(self, pod_ips: list[str]) -> int:
        """Cuts these pods off the API (their relayed connections are reset, new ones refused); an empty list
        heals the partition. Returns how many connections the partition has refused so far."""
        for relay in self._relays:
            relay.block(pod_ips)
        return sum(relay.refused for relay in self._relays)

    def teardown(self) -> None:
        for relay in self._relays:
            relay.stop()
        for uid in list(self._namespaces):
            self.delete(uid)
        if self.subnet is not None:
            _ip("link", "del", self.bridge, check=False)


class TcpRelay:
    """Forwards TCP connections (pods' API calls and watches) from ``host`` to ``target``.

    One asyncio loop in its own thread serves every connection: accepting never waits on a connection in
    progress (the relay lives in the cluster's process, beside the API server and the kubelets, and gets the
    interpreter only now and then while that process is busy); a deep listen backlog lets the kernel complete
    a burst of connects (every trainer of a job starting at once) while the loop catches up; an error on one
    connection (a reset, a pod whose network namespace vanished) ends that connection only; keepalive closes
    the connections of pods that disappeared without a word, instead of leaking them.
    """

    BACKLOG = 4096
    CONNECT_TIMEOUT_S = 10.0
    CHUNK = 256 * 1024

    def __init__(self, host: str, target: tuple[str, int]) -> None:
        self.target = target
        # bound now, so that the port is known before the loop runs
        self._socket = socket.create_server((host, 0), backlog=self.BACKLOG)
        self.port = int(self._socket.getsockname()[1])
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.AbstractServer | None = None
        self._transports: set[asyncio.WriteTransport] = set()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"api-relay-{host}", daemon=True)
        #: connections relayed so far, and open now
        self.accepted = 0
        self.failed_upstream = 0
        #: peers cut off (a network partition between those pods and the API), and connections refused so
        self.blocked: frozenset[str] = frozenset()
        self.refused = 0
        self._peers: dict[asyncio.WriteTransport, str] = {}

    @property
    def open_connections(self) -> int:
        return len(self._transports) // 2

    def start(self) -> None:
        self._thread.start()
        self._started.wait()

    def block(self, peers: list[str]) -> None:
        """From now on refuse connections from ``peers`` and reset theirs that are open (empty: refuse none)."""
        self.blocked = frozenset(peers)
        if not self._thread.is_alive():
            return

        def cut() -> None:
            for transport, peer in list(self._peers.items()):
                if peer in self.blocked:
                    transport.abort()

        self._loop.call_soon_threadsafe(cut)

    def stop(self) -> None:
        if not self._thread.is_alive():
            self._socket.close()
            return

        async def shut() -> None:
            if self._server is not None:
                self._server.close()
            for transport in list(self._transports):
                transport.abort()
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shut(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._relay, sock=self._socket, backlog=self.BACKLOG, limit=self.CHUNK)
            )
        finally:
            self._started.set()
        try:
            self._loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    @staticmethod
    def _keepalive(writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is None:
            return
        with contextlib.suppress(OSError, AttributeError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 30)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 10)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        peer = str((writer.get_extra_info("peername") or ("",))[0])
        if peer in self.blocked:
            self.refused += 1
            writer.transport.abort()
            return
        self._keepalive(writer)
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(*self.target, limit=self.CHUNK), self.CONNECT_TIMEOUT_S
            )
        except (OSError, TimeoutError) as exc:
            self.failed_upstream += 1
            log.warning("API relay: cannot reach %s:%s: %s", *self.target, exc)
            writer.transport.abort()
            return
        ends = (writer.transport, up_writer.transport)
        self._transports.update(ends)
        self._peers[writer.transport] = peer
        try:
            await asyncio.gather(self._pipe(reader, up_writer, ends), self._pipe(up_reader, writer, ends))
        finally:
            self._peers.pop(writer.transport, None)
            for transport in ends:
                transport.close()
                self._transports.discard(transport)

    @classmethod
    async def _pipe(
        cls, source: asyncio.StreamReader, sink: asyncio.StreamWriter, ends: tuple[asyncio.WriteTransport, ...]
    ) -> None:
        """Copy until end of stream, then half-close the sink (HTTP keeps working both ways); on any error
        tear both connections down, so that the other direction ends too."""
        try:
            while data := await source.read(cls.CHUNK):
                sink.write(data)
                await sink.drain()
            if sink.can_write_eof():
                sink.write_eof()
        except (OSError, ConnectionError, RuntimeError):
            for transport in ends:
                transport.abort()
