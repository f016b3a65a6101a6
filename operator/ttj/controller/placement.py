"""Where can a job run? The cluster's node pools for the planner's placement check (``Observed.placement``).

With ``TTJ_GKE_*`` settings the pools come from the GKE API (:class:`ttj.cost.gke.GkeNodePools`, a
synchronous client: called in a thread, at most once a minute); otherwise, or when that call fails,
from the labels of the Nodes the operator watches (:func:`ttj.cost.pools.pools_from_nodes`). A job
whose workers or parameter servers match no pool gets the ``WorkersUnschedulable`` reason with a
message naming what it asked for and what the cluster has, instead of pods pending forever.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from ttj.api.models import TransientTrainingJobSpec
from ttj.cost.gke import GkeError, GkeNodePools, GkeSettings
from ttj.cost.pools import (
    NodePool,
    ObservedNode,
    PlacementCheck,
    autoscaling_max_needed,
    pools_from_nodes,
    validate_placement,
)
from ttj.planner.groups import groups_of

log = logging.getLogger("ttj.controller")

#: How long a list of pools is used before it is read again.
POOLS_CACHE_SECONDS = 60.0
#: Node-label pools are recomputed at most this often (every pass of every job asks).
NODE_POOLS_CACHE_SECONDS = 2.0


class PlacementSource:
    """Node pools for :func:`validate_placement`, from GKE or from Node labels, cached."""

    def __init__(
        self,
        gke: GkeNodePools | None = None,
        *,
        cache_seconds: float = POOLS_CACHE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.gke = gke
        self.cache_seconds = cache_seconds
        self.clock = clock
        self._gke_pools: tuple[float, list[NodePool] | None] | None = None
        self._node_pools: tuple[float, list[NodePool]] | None = None
        self._lock = asyncio.Lock()
        #: The autoscaling maximum asked of each pool (GKE settings: TTJ_GKE_RAISE_AUTOSCALING).
        self._raised: dict[str, int] = {}

    @classmethod
    def from_env(cls) -> PlacementSource:
        """GKE pools when ``TTJ_GKE_PROJECT/LOCATION/CLUSTER`` are set, else Node labels."""
        settings = GkeSettings.from_env()
        return cls(GkeNodePools(settings, cache_seconds=POOLS_CACHE_SECONDS) if settings else None)

    async def pools(self, nodes: Callable[[], Iterable[dict[str, Any]]]) -> list[NodePool] | None:
        """The cluster's pools; ``None`` when nothing is known (no Node yet and no GKE answer)."""
        if self.gke is not None:
            gke_pools = await self._from_gke()
            if gke_pools is not None:
                return gke_pools
        now = self.clock()
        if self._node_pools is None or now - self._node_pools[0] >= NODE_POOLS_CACHE_SECONDS:
            self._node_pools = (now, pools_from_nodes(ObservedNode.of(n) for n in nodes()))
        # No Node at all (a cluster scaling from zero, a watch not synced yet): no verdict rather than a wrong one.
        return self._node_pools[1] or None

    async def _from_gke(self) -> list[NodePool] | None:
        assert self.gke is not None
        cached = self._gke_pools
        if cached is not None and self.clock() - cached[0] < self.cache_seconds:
            return cached[1]
        async with self._lock:  # one GKE call for all the jobs that ask at once
            cached = self._gke_pools
            if cached is not None and self.clock() - cached[0] < self.cache_seconds:
                return cached[1]
            try:
                pools: list[NodePool] | None = await asyncio.to_thread(self.gke.list, refresh=True)
            except GkeError as exc:
                log.warning("%s; matching jobs against Node labels instead", exc)
                pools = None
            self._gke_pools = (self.clock(), pools)
            return pools

    async def check(self, spec: dict[str, Any], nodes: Callable[[], Iterable[dict[str, Any]]]) -> PlacementCheck | None:
        """The verdict for a job's ``spec`` (raw JSON); ``None`` when the spec is invalid or no pool is known."""
        try:
            parsed = TransientTrainingJobSpec.model_validate(spec or {})
        except ValidationError:
            return None  # the planner reports an invalid spec itself
        pools = await self.pools(nodes)
        if pools is None:
            return None
        # with worker groups, the job can run when one group's workers can: the first such group's verdict (its
        # pools, its capacity), else the most preferred group's, naming what it asked for
        groups = groups_of(parsed)
        checks = [validate_placement(group.spec, pools) for group in groups]
        chosen = next((i for i, check in enumerate(checks) if check.ok), 0)
        return await self._raise_autoscaling(groups[chosen].spec, checks[chosen])

    async def _raise_autoscaling(self, spec: TransientTrainingJobSpec, check: PlacementCheck) -> PlacementCheck:
        """With ``TTJ_GKE_RAISE_AUTOSCALING=true``: when the matching pools cannot hold the job's worker slots,
        raise the first autoscaling one's maximum so that it can, once per pool and maximum (the pool list is
        cached a minute and would show the old maximum meanwhile)."""
        gke = self.gke
        slots = spec.workers.slots
        if gke is None or not gke.settings.raise_autoscaling or not check.ok or (check.worker_capacity or 0) >= slots:
            return check
        for pool in check.worker_pools:
            needed = autoscaling_max_needed(spec, pool)
            if needed is None or self._raised.get(pool.name, 0) >= needed:
                continue
            self._raised[pool.name] = needed
            try:
                operation = await asyncio.to_thread(gke.raise_autoscaling_max, pool, needed)
            except GkeError as exc:
                log.warning("%s", exc)
                failed = f"node pool {pool.name}: its autoscaling maximum could not be raised to {needed} nodes: {exc}"
                return replace(check, raise_failed=failed)
            if operation is None:
                continue
            was = "no maximum" if pool.max_nodes is None else f"{pool.max_nodes} nodes"
            log.info("node pool %s: autoscaling maximum %s -> %d nodes (%s)", pool.name, was, needed, operation)
            raised = (
                f"node pool {pool.name}: autoscaling maximum raised from {was} to {needed} nodes for the job's "
                f"{slots} worker slots (GKE operation {operation})"
            )
            return replace(check, raised=raised)
        return check
