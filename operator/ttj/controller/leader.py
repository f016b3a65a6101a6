"""Leader election among operator replicas on a ``coordination.k8s.io/v1`` Lease, as client-go does it.

Only the leader runs kopf (watches, daemons, writes); the others wait. The leader renews every
``retry_period``; a replica that has seen the Lease record unchanged for ``lease_duration`` (by its own
clock: holders' clocks are never compared) takes it over with a resourceVersion precondition, so two
candidates never both win. A leader that could not renew for ``renew_deadline`` (< ``lease_duration``)
stops acting at once, before anyone else may take over; its writes go through :class:`Fenced`, which
refuses them as soon as the last renewal is older than the deadline, even if the event loop was too
busy to notice. kopf's own peering only pauses operators on a best-effort basis; this is the guarantee
controller-runtime gives.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from ttj import kubeapi
from ttj.kubeapi import KubeError
from ttj_contract import format_micro_time

log = logging.getLogger("ttj.leader")

DEFAULT_LEASE_NAME = "ttj-operator-leader"
_SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def default_identity() -> str:
    """The pod's name (downward API ``POD_NAME``, else the hostname) and a random suffix, as client-go."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def default_namespace() -> str:
    """The operator's own namespace: ``POD_NAMESPACE``, else the service account's, else ``default``."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        with open(_SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as file:
            return file.read().strip() or "default"
    except OSError:
        return "default"


@dataclass(frozen=True)
class ElectionTiming:
    """client-go's defaults scaled to the failover goal: a standby acts within one lease duration."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("need 0 < retry period < renew deadline < lease duration")


@dataclass
class LeaderElector:
    """One candidate. :meth:`try_acquire_or_renew` is one round (blocking: run it in a thread)."""

    api: Any  # a KubeApi: request(method, path, *, body=None, content_type=...)
    namespace: str
    identity: str
    name: str = DEFAULT_LEASE_NAME
    timing: ElectionTiming = field(default_factory=ElectionTiming)
    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], datetime] = lambda: datetime.now(UTC)
    #: When this replica last renewed (monotonic); None while it is not the leader.
    renewed_at: float | None = None
    #: The Lease record as last seen (spec and resourceVersion), and when it was first seen so.
    _seen: tuple[Any, ...] | None = None
    _seen_at: float = 0.0

    @property
    def path(self) -> str:
        return kubeapi.path("Lease", self.namespace, self.name)

    def is_leader(self) -> bool:
        """Leader, and renewed within the deadline: safe to act."""
        return self.renewed_at is not None and self.monotonic() - self.renewed_at < self.timing.renew_deadline

    def try_acquire_or_renew(self) -> bool:
        """One round: True if this replica holds the Lease now."""
        started = self.monotonic()
        try:
            lease = self.api.request("GET", self.path)
        except KubeError as exc:
            if exc.status != 404:
                log.info("leader election: cannot read the Lease: %s", exc.message)
                return False
            return self._create(started)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), spec.get("leaseTransitions"), lease["metadata"]["resourceVersion"])
        if record != self._seen:
            self._seen, self._seen_at = record, started
        if holder != self.identity:
            self.renewed_at = None
            duration = float(spec.get("leaseDurationSeconds") or self.timing.lease_duration)
            if holder and started - self._seen_at < duration:
                return False  # held, and renewed within its duration as far as we have seen
        now = format_micro_time(self.wall())
        new_spec: dict[str, Any] = {"holderIdentity": self.identity, "renewTime": now}
        if holder != self.identity:
            new_spec |= {
                "acquireTime": now,
                "leaseDurationSeconds": round(self.timing.lease_duration),
                "leaseTransitions": int(spec.get("leaseTransitions") or 0) + 1,
            }
        patch = {"metadata": {"resourceVersion": lease["metadata"]["resourceVersion"]}, "spec": new_spec}
        try:
            self.api.request("PATCH", self.path, body=patch, content_type=kubeapi.MERGE_PATCH)
        except KubeError as exc:
            log.info("leader election: %s the Lease failed: %s", "renewing" if holder else "taking", exc.message)
            return False
        if holder != self.identity:
            log.info("leader election: %s leads now (previous holder %r)", self.identity, holder)
        self.renewed_at = started
        return True

    def _create(self, started: float) -> bool:
        now = format_micro_time(self.wall())
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": round(self.timing.lease_duration),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        try:
            self.api.request("POST", kubeapi.path("Lease", self.namespace), body=body)
        except KubeError as exc:
            log.info("leader election: creating the Lease failed: %s", exc.message)
            return False
        log.info("leader election: %s leads now (new Lease)", self.identity)
        self.renewed_at = started
        return True

    def release(self) -> None:
        """On a clean stop: give the Lease up so a standby need not wait for it to expire."""
        if self.renewed_at is None:
            return
        self.renewed_at = None
        try:
            lease = self.api.request("GET", self.path)
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            patch = {
                "metadata": {"resourceVersion": lease["metadata"]["resourceVersion"]},
                "spec": {
                    "holderIdentity": None,
                    "leaseDurationSeconds": 1,
                    "renewTime": format_micro_time(self.wall()),
                },
            }
            self.api.request("PATCH", self.path, body=patch, content_type=kubeapi.MERGE_PATCH)
            log.info("leader election: %s released the Lease", self.identity)
        except KubeError as exc:
            log.info("leader election: releasing the Lease failed: %s", exc.message)


class NotLeader(Exception):
    """A write refused because this replica may no longer be the leader."""


@dataclass
class Fenced:
    """A KubeApi that sends a request only while ``elector`` is a fresh leader."""

    api: Any
    elector: LeaderElector

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        if method != "GET" and not self.elector.is_leader():
            raise NotLeader(f"{self.elector.identity} is not the leader: {method} {path} not sent")
        answer: dict[str, Any] = self.api.request(method, path, **kwargs)
        return answer


async def run_as_leader(
    elector: LeaderElector,
    operate: Callable[[], Awaitable[None]],
    on_lost: Callable[[], None],
    *,
    standby_health: str | None = None,
    healthy: Callable[[], bool] = lambda: True,
) -> None:
    """Wait to lead (answering ``standby_health``, a liveness URL, meanwhile), then run ``operate`` while
    renewing. Losing the Lease calls ``on_lost``, which must end the process: kopf's threads may hold
    writes in flight that only the process's end stops for sure. So does ``healthy()`` turning False: a
    leader must never renew for an operator that stopped working (the standby would wait forever). A
    clean end of ``operate`` releases the Lease."""
    timing = elector.timing
    health = await _serve_health(standby_health) if standby_health else None
    try:
        while not await _round(elector):
            await asyncio.sleep(timing.retry_period)
    finally:
        if health is not None:
            await health.cleanup()
    operating = asyncio.ensure_future(operate())
    try:
        while True:
            await asyncio.wait([operating], timeout=timing.retry_period)
            if operating.done():
                break
            if not healthy():
                log.error("leader election: %s: the operator failed; stopping at once", elector.identity)
                on_lost()
                return
            await _round(elector)
            if not elector.is_leader():
                log.error("leader election: %s lost the Lease; stopping at once", elector.identity)
                on_lost()
                return
        operating.result()
    finally:
        if not operating.done():
            operating.cancel()
        await asyncio.to_thread(elector.release)


async def _round(elector: LeaderElector) -> bool:
    """One round in a thread, given up (not cancelled: a thread cannot be) after the renew deadline."""
    try:
        return await asyncio.wait_for(
            asyncio.shield(asyncio.to_thread(elector.try_acquire_or_renew)), timeout=elector.timing.renew_deadline
        )
    except TimeoutError:
        return False


async def _serve_health(url: str) -> web.AppRunner:
    """A standby's /healthz: alive, just not leading (kopf serves it once this replica leads)."""
    parts = urlsplit(url)

    async def healthz(_request: web.Request) -> web.Response:
        return web.json_response({"leading": False})

    app = web.Application()
    app.router.add_get(parts.path or "/", healthz)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, parts.hostname or "0.0.0.0", parts.port or 80, reuse_address=True).start()
    return runner
