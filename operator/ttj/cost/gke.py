"""GKE node pools through the Cloud client (``google-cloud-container``): to validate jobs and price nodes.

Configured by settings, not code: ``TTJ_GKE_PROJECT``, ``TTJ_GKE_LOCATION`` (a region or zone) and
``TTJ_GKE_CLUSTER`` turn it on; ``TTJ_GKE_ENDPOINT`` points the client at another API endpoint (a
private endpoint, or a test server); ``TTJ_GKE_RAISE_AUTOSCALING=true`` lets the operator raise a
matching pool's autoscaling maximum so it can hold ``maxReplicas`` workers (off by default: it changes
the cluster and can raise the bill). Credentials are the pod's (Workload Identity) via
``google.auth.default()``; the operator's Google service account needs ``container.clusters.get`` and,
to raise maxima, ``container.clusters.update`` (roles/container.clusterViewer / container.developer).

Without these settings the operator matches jobs against the labels of the Nodes it sees
(:func:`ttj.cost.pools.pools_from_nodes`). The client is synchronous: call it from a thread
(``asyncio.to_thread``) in async code. :class:`GkeNodePools` caches the list for ``cache_seconds``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ttj.cost.model import NodeShape
from ttj.cost.pools import NodePool, implicit_labels
from ttj_contract import Provisioning

PROJECT_ENV = "TTJ_GKE_PROJECT"
LOCATION_ENV = "TTJ_GKE_LOCATION"
CLUSTER_ENV = "TTJ_GKE_CLUSTER"
ENDPOINT_ENV = "TTJ_GKE_ENDPOINT"
RAISE_AUTOSCALING_ENV = "TTJ_GKE_RAISE_AUTOSCALING"


class GkeSettingsError(ValueError):
    """GKE settings that are incomplete or malformed."""


class GkeError(RuntimeError):
    """A GKE API call that failed; the message says which call, on what, and why."""


@dataclass(frozen=True)
class GkeSettings:
    """Where the cluster is, and what the operator may do to its node pools."""

    project: str
    location: str
    cluster: str
    endpoint: str | None = None
    raise_autoscaling: bool = False

    @property
    def cluster_path(self) -> str:
        return f"projects/{self.project}/locations/{self.location}/clusters/{self.cluster}"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> GkeSettings | None:
        """The settings in the environment; ``None`` when none is set, an error when only some are."""
        env = os.environ if environ is None else environ
        values = {name: (env.get(name) or "").strip() for name in (PROJECT_ENV, LOCATION_ENV, CLUSTER_ENV)}
        if not any(values.values()):
            return None
        missing = [name for name, value in values.items() if not value]
        if missing:
            raise GkeSettingsError(
                f"GKE node pools need {PROJECT_ENV}, {LOCATION_ENV} and {CLUSTER_ENV}; missing: {', '.join(missing)}"
            )
        raise_flag = (env.get(RAISE_AUTOSCALING_ENV) or "false").strip().lower()
        if raise_flag not in {"true", "false", "1", "0", "yes", "no"}:
            raise GkeSettingsError(f"{RAISE_AUTOSCALING_ENV} must be true or false, got {raise_flag!r}")
        return cls(
            project=values[PROJECT_ENV],
            location=values[LOCATION_ENV],
            cluster=values[CLUSTER_ENV],
            endpoint=(env.get(ENDPOINT_ENV) or "").strip() or None,
            raise_autoscaling=raise_flag in {"true", "1", "yes"},
        )


def node_pool_from_api(pool: Any) -> NodePool:
    """A :class:`NodePool` from a ``google.cloud.container_v1.NodePool`` message."""
    config = pool.config
    accelerators = list(config.accelerators)
    accelerator_type = accelerators[0].accelerator_type if accelerators else None
    accelerator_count = int(accelerators[0].accelerator_count) if accelerators else 0
    if config.spot:
        provisioning = Provisioning.SPOT
    elif config.preemptible:
        provisioning = Provisioning.PREEMPTIBLE
    else:
        provisioning = Provisioning.ON_DEMAND
    shape = NodeShape(
        machine_type=config.machine_type or None,
        accelerator_type=accelerator_type or None,
        accelerator_count=accelerator_count if accelerator_type else 0,
        provisioning=provisioning,
    )
    zones = max(1, len(pool.locations))
    autoscaling = pool.autoscaling
    min_nodes: int | None = None
    max_nodes: int | None = None
    if autoscaling.enabled:
        # total_* bound the whole pool; the older min/max_node_count bound each zone.
        if autoscaling.total_max_node_count:
            min_nodes, max_nodes = int(autoscaling.total_min_node_count), int(autoscaling.total_max_node_count)
        else:
            min_nodes, max_nodes = int(autoscaling.min_node_count) * zones, int(autoscaling.max_node_count) * zones
    labels = {**implicit_labels(pool.name, shape), **dict(config.labels)}
    return NodePool(
        name=pool.name,
        shape=shape,
        labels=labels,
        node_count=int(pool.initial_node_count) * zones,
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        zone_count=zones,
        total_bounds=bool(autoscaling.enabled and autoscaling.total_max_node_count),
    )


def make_client(settings: GkeSettings, credentials: Any | None = None) -> Any:
    """A ``ClusterManagerClient`` over REST for ``settings`` (default credentials unless given)."""
    from google.cloud import container_v1

    options = {"api_endpoint": settings.endpoint} if settings.endpoint else None
    return container_v1.ClusterManagerClient(credentials=credentials, transport="rest", client_options=options)


class GkeNodePools:
    """Reads (and optionally resizes) the node pools of one GKE cluster."""

    def __init__(
        self,
        settings: GkeSettings,
        *,
        client: Any | None = None,
        client_factory: Callable[[GkeSettings], Any] = make_client,
        cache_seconds: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._client = client
        self._client_factory = client_factory
        self._cache_seconds = cache_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._cached: tuple[float, list[NodePool]] | None = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._client_factory(self.settings)
        return self._client

    def list(self, *, refresh: bool = False) -> list[NodePool]:
        """The cluster's node pools (cached for ``cache_seconds``)."""
        with self._lock:
            now = self._clock()
            if not refresh and self._cached is not None and now - self._cached[0] < self._cache_seconds:
                return list(self._cached[1])
        try:
            response = self.client.list_node_pools(parent=self.settings.cluster_path)
        except Exception as exc:
            raise GkeError(f"listing the node pools of {self.settings.cluster_path} failed: {exc}") from exc
        pools = [node_pool_from_api(pool) for pool in response.node_pools]
        with self._lock:
            self._cached = (self._clock(), pools)
        return list(pools)

    def raise_autoscaling_max(self, pool: NodePool, max_nodes: int) -> str | None:
        """Raises ``pool``'s autoscaling maximum to ``max_nodes`` (whole pool) if that is more than now.

        Returns the GKE operation's name, or ``None`` when nothing was changed (not allowed by the
        settings, no autoscaling, or already large enough).
        """
        if not self.settings.raise_autoscaling or not pool.autoscaling:
            return None
        if pool.max_nodes is not None and pool.max_nodes >= max_nodes:
            return None
        from google.cloud import container_v1

        if pool.total_bounds:
            bounds = container_v1.NodePoolAutoscaling(
                enabled=True, total_min_node_count=pool.min_nodes or 0, total_max_node_count=max_nodes
            )
        else:  # per-zone bounds: round up so the pool can hold max_nodes in all
            bounds = container_v1.NodePoolAutoscaling(
                enabled=True,
                min_node_count=(pool.min_nodes or 0) // pool.zone_count,
                max_node_count=-(-max_nodes // pool.zone_count),
            )
        request = container_v1.SetNodePoolAutoscalingRequest(
            name=f"{self.settings.cluster_path}/nodePools/{pool.name}", autoscaling=bounds
        )
        try:
            operation = self.client.set_node_pool_autoscaling(request=request)
        except Exception as exc:
            raise GkeError(
                f"raising the autoscaling maximum of node pool {pool.name} of {self.settings.cluster_path} "
                f"to {max_nodes} failed: {exc}"
            ) from exc
        with self._lock:
            self._cached = None  # the bounds changed
        return str(operation.name)
