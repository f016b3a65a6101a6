"""Ports for the servers a test starts itself (TensorFlow servers, an operator's metrics endpoint).

A port found by binding port 0 and closing the socket comes from the kernel's ephemeral range, where every
outgoing connection also takes its local port, and it stays free only until someone else takes it: a test
running in parallel that asked at the same moment, or a client connecting anywhere. TensorFlow's gRPC
servers also bind with SO_REUSEPORT, so two of them on one port both start and the kernel splits the
connections between them: a worker would then talk to another test's parameter server. So each pytest
process (each xdist worker: ``PYTEST_XDIST_WORKER`` is gw0, gw1, ...) hands out ports from a block of its own
below the ephemeral range, in turn (a port comes round again only after the whole block), and checks each
one is free where it will be bound.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
import threading

FIRST_PORT = 20_000
BLOCK = 1_500  # ports per pytest process; 8 workers end at 31,999, below Linux's default ephemeral range


def _block_start() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker.removeprefix("gw")) if worker.removeprefix("gw").isdigit() else 0
    return FIRST_PORT + index * BLOCK


# A random start in the block: two separate runs on one machine (two checkouts) rarely walk in step.
_offsets = itertools.count(random.randrange(BLOCK))
_lock = threading.Lock()


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """The next port of this process's block that nothing holds on ``host`` now."""
    start = _block_start()
    for _ in range(BLOCK):
        with _lock:
            port = start + next(_offsets) % BLOCK
        if _bindable(host, port):
            return port
    raise RuntimeError(f"no free port left in {start}-{start + BLOCK - 1} on {host}")
