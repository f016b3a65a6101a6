"""The pod network's bridge keeps its MAC when the pod holding its lowest-MAC port goes."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from ttj_localcluster.nodes.netns import PodNetworkNamespaces

pytestmark = pytest.mark.skipif(
    not PodNetworkNamespaces.available(), reason="needs root, ip and nsenter for pod network namespaces"
)


def _link(name: str, attribute: str) -> str:
    return Path(f"/sys/class/net/{name}/{attribute}").read_text().strip()


def test_deleting_the_lowest_mac_port_keeps_the_bridge_mac() -> None:
    network = PodNetworkNamespaces()
    network.setup()
    try:
        assert network.subnet is not None
        uids = [str(uuid.uuid4()) for _ in range(4)]
        for offset, uid in enumerate(uids):
            network.create(uid, str(network.subnet.network_address + 2 + offset))
        bridge_mac = _link(network.bridge, "address")
        assert bridge_mac == network.bridge_mac
        assert _link(network.bridge, "addr_assign_type") == "3"  # NET_ADDR_SET: the kernel keeps it
        ports_dir = Path(f"/sys/class/net/{network.bridge}/brif")
        ports = {port.name: _link(port.name, "address") for port in ports_dir.iterdir()}
        assert len(ports) == len(uids)
        lowest_port = min(ports, key=lambda name: bytes.fromhex(ports[name].replace(":", "")))
        owner = next(uid for uid in uids if network.bridge_port(uid) == lowest_port)
        network.delete(owner)
        # the kernel destroys a deleted namespace's devices in the background
        deadline = time.monotonic() + 30
        while (ports_dir / lowest_port).exists():
            assert time.monotonic() < deadline, f"{lowest_port} still on the bridge"
            time.sleep(0.05)
        assert _link(network.bridge, "address") == bridge_mac
    finally:
        network.teardown()
