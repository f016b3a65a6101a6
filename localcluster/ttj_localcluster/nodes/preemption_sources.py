"""When nodes are preempted without being asked: at lifetimes drawn per node, or at scripted times.

- ``preemption=lifetime``: each new node of the pool lives a lifetime drawn from the ICAC'19
  measurements of its GPU type (seeded per pool, divided by the pool's ``time_scale``).
- ``preemption=scripted``: at each of the pool's ``preempt_at`` seconds after the start, its oldest live node.

Preemptions on demand (Python, the HTTP control, the CLI) go straight to :class:`~.preemption.Preemptions`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import threading
from collections.abc import Callable

from ttj.preemption.lifetimes import LifetimeDistribution, MeasuredLifetime, load_lifetimes
from ttj_contract import Provisioning

from .pools import NodePool
from .registry import NodeRegistry
from .timers import Timers

log = logging.getLogger(__name__)

LIFETIME_CAUSE = "lifetime drawn from the ICAC'19 measurements"
SCRIPTED_CAUSE = "scripted"

#: preempts (node, cause); KeyError when the node is no longer live
Preempt = Callable[[str, str], object]


class LifetimePreemptions:
    """Draws each new node's lifetime (``node_created`` is a :class:`~.lifecycle.NodeLifecycle` listener)."""

    def __init__(self, pools: list[NodePool], timers: Timers, stop: threading.Event, preempt: Preempt) -> None:
        self.timers = timers
        self.stop = stop
        self.preempt = preempt
        self._lock = threading.Lock()
        self._draws: dict[str, tuple[LifetimeDistribution, random.Random]] = {}
        bundled: list[MeasuredLifetime] | None = None
        for pool in pools:
            if pool.preemption != "lifetime":
                continue
            if pool.lifetimes_file:
                measured = load_lifetimes(pool.lifetimes_file)
            else:
                bundled = bundled if bundled is not None else load_lifetimes()
                measured = bundled
            provisioning = Provisioning.SPOT if pool.provisioning == Provisioning.SPOT else Provisioning.PREEMPTIBLE
            distribution = LifetimeDistribution.for_accelerator(
                pool.accelerator, provisioning=provisioning, measured=measured
            )
            self._draws[pool.name] = (distribution, random.Random(pool.seed))

    def node_created(self, pool: NodePool, node: str) -> None:
        draw = self._draws.get(pool.name)
        if draw is None:
            return
        distribution, rng = draw
        with self._lock:  # nodes are created from several threads; the seeded sequence must stay one
            lifetime = distribution.sample(rng)
        if math.isinf(lifetime):
            return
        delay = lifetime / pool.time_scale
        log.info("node %s will be preempted in %.1fs (a drawn lifetime of %.2f h)", node, delay, lifetime / 3600)
        self.timers.later(delay, self._fire, node)

    def _fire(self, node: str) -> None:
        if self.stop.is_set():
            return
        with contextlib.suppress(KeyError):  # preempted or lost meanwhile
            self.preempt(node, LIFETIME_CAUSE)


class ScriptedPreemptions:
    """``start()`` sets the timers of every scripted pool."""

    def __init__(self, registry: NodeRegistry, timers: Timers, stop: threading.Event, preempt: Preempt) -> None:
        self.registry = registry
        self.timers = timers
        self.stop = stop
        self.preempt = preempt

    def start(self) -> None:
        for pool in self.registry.pools():
            for at in pool.preempt_at if pool.preemption == "scripted" else ():
                self.timers.later(at, self._fire, pool.name)

    def _fire(self, pool: str) -> None:
        if self.stop.is_set():
            return
        alive = self.registry.live_nodes(pool)
        if not alive:
            log.warning("scripted preemption in pool %s: no live node", pool)
            return
        self.preempt(alive[0], SCRIPTED_CAUSE)
