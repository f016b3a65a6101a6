"""Which node fleet owns a cluster's simulated nodes, and the fleet's leaving: one fleet per cluster.

The ConfigMap ``kube-system/ttj-local-control`` names the fleet that serves the cluster's preemption control:
``url`` (its control server), ``fleet`` (its id, also the ``ttj.local/fleet`` label of every Node it
registered) and ``owner`` (process and host, for people). A fleet that starts while the ConfigMap names
another fleet whose control server still answers as that fleet stops with :class:`FleetConflict`; when that
server does not answer (the fleet died without cleaning up) the new fleet takes the ConfigMap over and deletes
the dead fleet's Nodes, as GKE deletes the Nodes of VMs that no longer exist. A fleet that stops deletes its
Nodes (and their Leases), as a node pool scaled to zero does, and the ConfigMap if it still names it.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import urllib.request
from dataclasses import dataclass

from ttj.kubeapi import JSON, KubeClient, KubeError

from .heartbeats import LEASES

log = logging.getLogger(__name__)

CONTROL_NAMESPACE = "kube-system"
CONTROL_CONFIGMAP = "ttj-local-control"
CONTROL_PATH = f"/api/v1/namespaces/{CONTROL_NAMESPACE}/configmaps/{CONTROL_CONFIGMAP}"
#: the label of every Node a fleet registered: the fleet's id
FLEET_LABEL = "ttj.local/fleet"
#: how long the liveness check of another fleet's control server waits for its answer
PROBE_TIMEOUT_S = 3.0
#: how often a fleet re-reads the ConfigMap when another fleet wrote it between its read and its write
CLAIM_ATTEMPTS = 5


class FleetConflict(RuntimeError):
    """The cluster's control ConfigMap belongs to another fleet that is still running."""


@dataclass(frozen=True)
class FleetIdentity:
    """``id``: label-safe and unique per fleet; ``owner``: which process on which host, for people."""

    id: str
    owner: str

    @classmethod
    def new(cls) -> FleetIdentity:
        return cls(secrets.token_hex(6), f"pid {os.getpid()} on {socket.gethostname()}")


@dataclass(frozen=True)
class PreviousOwner:
    """The fleet whose ConfigMap a new fleet took over, its control server no longer answering."""

    fleet: str | None
    owner: str
    url: str


def control_answers(url: str, fleet: str | None, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the control server at ``url`` answers as fleet ``fleet`` (as any fleet, when None): another
    process that took over its port does not count."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/status", timeout=timeout) as response:
            answer = json.loads(response.read())
    except (OSError, ValueError):
        return False
    return isinstance(answer, dict) and (fleet is None or answer.get("fleet") == fleet)


def _configmap(identity: FleetIdentity, url: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONTROL_CONFIGMAP, "namespace": CONTROL_NAMESPACE},
        "data": {"url": url, "fleet": identity.id, "owner": identity.owner},
    }


def claim_control(client: KubeClient, identity: FleetIdentity, url: str) -> PreviousOwner | None:
    """Publish ``url`` in the control ConfigMap for this fleet; the fleet it took over from, if any.

    Raises :class:`FleetConflict` when the ConfigMap names another fleet whose control server answers.
    """
    client.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CONTROL_NAMESPACE}}
    )
    wanted = _configmap(identity, url)
    for _ in range(CLAIM_ATTEMPTS):
        if client.create(CONTROL_PATH.rsplit("/", 1)[0], wanted) is not None:
            return None
        current = client.get(CONTROL_PATH)
        if current is None:
            continue  # deleted meanwhile: create it
        data = current.get("data") or {}
        previous = PreviousOwner(
            data.get("fleet") or None, data.get("owner") or "an unknown fleet", data.get("url", "")
        )
        if previous.url and previous.url != url and control_answers(previous.url, previous.fleet):
            raise FleetConflict(
                f"{CONTROL_NAMESPACE}/{CONTROL_CONFIGMAP} belongs to another node fleet ({previous.owner}) whose "
                f"control server {previous.url} answers: stop that fleet first (one fleet per cluster)"
            )
        replacement = {**wanted, "metadata": {**current["metadata"]}}
        try:  # guarded by the resourceVersion read: of two fleets taking over at once, one wins
            client.request("PUT", CONTROL_PATH, body=replacement)
        except KubeError as exc:
            if exc.status in (404, 409):
                continue
            raise
        return previous if previous.url else None
    raise FleetConflict(f"{CONTROL_NAMESPACE}/{CONTROL_CONFIGMAP} keeps changing: is another node fleet starting?")


def release_control(client: KubeClient, identity: FleetIdentity) -> bool:
    """Delete the control ConfigMap if it still names this fleet; whether it did."""
    current = client.get(CONTROL_PATH)
    if current is None or (current.get("data") or {}).get("fleet") != identity.id:
        return False
    meta = current["metadata"]
    options = {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "preconditions": {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]},
    }
    try:
        client.request("DELETE", CONTROL_PATH, body=options)
    except KubeError as exc:
        if exc.status in (404, 409):  # gone, or taken over since it was read
            return False
        raise
    return True


def delete_fleet_nodes(client: KubeClient, fleet: str) -> list[str]:
    """Delete the Nodes labelled as ``fleet``'s, and their Leases; their names."""
    listing = client.request("GET", "/api/v1/nodes", query=[("labelSelector", f"{FLEET_LABEL}={fleet}")])
    names = sorted(str(node["metadata"]["name"]) for node in listing.get("items") or [])
    for name in names:
        client.delete(f"/api/v1/nodes/{name}")
        client.delete(f"{LEASES}/{name}")
    return names
