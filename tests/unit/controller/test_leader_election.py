"""Leader election on a Lease, against the local API server's rules (in process, the test's clocks)."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import pytest

from tests.unit.controller.in_process_api import NAMESPACE, InProcessApi
from tests.unit.planner.builders import T0
from ttj.controller.leader import ElectionTiming, Fenced, LeaderElector, NotLeader, run_as_leader

TIMING = ElectionTiming(lease_duration=15, renew_deadline=10, retry_period=2)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def candidate(api: InProcessApi, identity: str, clock: Clock) -> LeaderElector:
    return LeaderElector(
        api, namespace=NAMESPACE, identity=identity, timing=TIMING, monotonic=clock, wall=lambda: api.now
    )


def lease(api: InProcessApi) -> dict[str, Any]:
    return api.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/ttj-operator-leader")


def test_one_leads_the_other_waits_a_full_lease_duration_of_silence_then_takes_over() -> None:
    api, clock = InProcessApi(T0), Clock()
    first, second = candidate(api, "a", clock), candidate(api, "b", clock)
    assert first.try_acquire_or_renew() is True
    assert second.try_acquire_or_renew() is False
    for _ in range(10):  # a renewing leader is never taken over
        clock.now += 2
        api.now += timedelta(seconds=2)
        assert first.try_acquire_or_renew() is True
        assert second.try_acquire_or_renew() is False
    assert lease(api)["spec"]["holderIdentity"] == "a"

    # "a" dies. "b" measures the silence by its own clock, from when it first saw the last record.
    clock.now += 14
    assert second.try_acquire_or_renew() is False
    clock.now += 2
    assert second.try_acquire_or_renew() is True
    spec = lease(api)["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)
    assert not first.try_acquire_or_renew(), "a revived old leader finds it held and stands by"
    assert not first.is_leader()


def test_a_leader_that_cannot_renew_stops_acting_before_anyone_may_take_over() -> None:
    api, clock = InProcessApi(T0), Clock()
    leader, standby = candidate(api, "a", clock), candidate(api, "b", clock)
    assert leader.try_acquire_or_renew()
    assert standby.try_acquire_or_renew() is False
    fenced = Fenced(api, leader)
    clock.now += TIMING.renew_deadline - 0.5
    assert leader.is_leader()
    clock.now += 1  # the renewals failed (partition): past the deadline
    assert not leader.is_leader()
    with pytest.raises(NotLeader):
        fenced.request("POST", f"/api/v1/namespaces/{NAMESPACE}/configmaps", body={"metadata": {"name": "x"}})
    assert standby.try_acquire_or_renew() is False, "the deadline passes before the lease duration does"
    clock.now += TIMING.lease_duration - TIMING.renew_deadline
    assert standby.try_acquire_or_renew() is True


def test_two_standbys_racing_for_an_expired_lease_never_both_win() -> None:
    api, clock = InProcessApi(T0), Clock()
    old = candidate(api, "old", clock)
    assert old.try_acquire_or_renew()
    b, c = candidate(api, "b", clock), candidate(api, "c", clock)
    assert not b.try_acquire_or_renew()
    assert not c.try_acquire_or_renew()
    clock.now += TIMING.lease_duration + 1

    # Both read the same record; the resourceVersion precondition lets only the first write through.
    real = api.request
    reads: list[dict[str, Any]] = []

    def stale_get(method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        if method == "GET" and reads:
            return reads[0]
        answer = real(method, path, **kwargs)
        if method == "GET":
            reads.append(answer)
        return answer

    api.request = stale_get  # type: ignore[method-assign]
    wins = [b.try_acquire_or_renew(), c.try_acquire_or_renew()]
    api.request = real  # type: ignore[method-assign]
    assert wins == [True, False]
    assert lease(api)["spec"]["holderIdentity"] == "b"


def test_a_released_lease_is_taken_at_once() -> None:
    api, clock = InProcessApi(T0), Clock()
    leader, standby = candidate(api, "a", clock), candidate(api, "b", clock)
    assert leader.try_acquire_or_renew()
    assert not standby.try_acquire_or_renew()
    leader.release()
    assert standby.try_acquire_or_renew()
    assert lease(api)["spec"]["leaseTransitions"] == 1


def test_losing_the_lease_while_operating_calls_on_lost_and_a_clean_end_releases() -> None:
    api = InProcessApi(T0)
    fast = ElectionTiming(lease_duration=0.3, renew_deadline=0.2, retry_period=0.02)
    leader = LeaderElector(api, namespace=NAMESPACE, identity="a", timing=fast, wall=lambda: api.now)
    lost: list[str] = []

    async def operate_until_stolen() -> None:
        api.request(
            "PATCH",
            f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/ttj-operator-leader",
            body={"spec": {"holderIdentity": "thief"}},
            content_type="application/merge-patch+json",
        )
        await asyncio.sleep(30)

    asyncio.run(asyncio.wait_for(run_as_leader(leader, operate_until_stolen, lambda: lost.append("lost")), timeout=20))
    assert lost == ["lost"]

    clean = LeaderElector(api, namespace=NAMESPACE, identity="c", timing=fast, wall=lambda: api.now)
    api.request(
        "PATCH",
        f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/ttj-operator-leader",
        body={"spec": {"holderIdentity": None}},
        content_type="application/merge-patch+json",
    )

    async def operate_briefly() -> None:
        await asyncio.sleep(0.05)

    asyncio.run(asyncio.wait_for(run_as_leader(clean, operate_briefly, lambda: lost.append("c lost")), timeout=20))
    assert lost == ["lost"]
    assert not lease(api)["spec"].get("holderIdentity"), "released on a clean end"


def test_a_leader_whose_operator_failed_stops_renewing_at_once() -> None:
    """kopf, after a root task failed, may take indefinitely to return: the leader must not keep renewing
    for an operator that does nothing, or the standby would wait forever."""
    api = InProcessApi(T0)
    fast = ElectionTiming(lease_duration=0.3, renew_deadline=0.2, retry_period=0.02)
    leader = LeaderElector(api, namespace=NAMESPACE, identity="a", timing=fast, wall=lambda: api.now)
    health = {"ok": True}
    lost: list[str] = []

    async def operate_then_hang() -> None:
        await asyncio.sleep(0.1)
        health["ok"] = False  # kopf logged a failed watcher, and now hangs in its shutdown
        await asyncio.sleep(30)

    asyncio.run(
        asyncio.wait_for(
            run_as_leader(leader, operate_then_hang, lambda: lost.append("lost"), healthy=lambda: health["ok"]),
            timeout=20,
        )
    )
    assert lost == ["lost"]


def test_kopf_failure_sees_a_dead_watcher_through_kopfs_own_guard_and_ignores_request_retries() -> None:
    """kopf never restarts the watcher of a resource kind once it failed (an ERROR event other than 410 ends
    it), and logs that on its orchestration logger, not on the runner's: a leader that missed it would renew
    for an operator blind to that kind. Driven through kopf's own guard and logger names, so that a kopf
    that moves them fails here."""
    from kopf._cogs.aiokits import aiotasks
    from kopf._cogs.clients.watching import WatchingError

    from ttj.controller.cli import KopfFailure

    failure = KopfFailure().attach()
    try:
        # A request kopf retries is logged at ERROR too, by the client's logger: no failure.
        logging.getLogger("kopf._cogs.clients.watching").error("Request attempt #1/9 failed; will retry")
        assert failure.none()

        async def watch_that_ends_in_an_error_event() -> None:
            raise WatchingError("Error in the watch-stream: {'code': 504, 'message': 'Too large resource version'}")

        orchestration = logging.getLogger("kopf._core.reactor.orchestration")
        guarded = aiotasks.guard(watch_that_ends_in_an_error_event(), "watcher for pods@ns", logger=orchestration)
        with pytest.raises(WatchingError):
            asyncio.run(guarded)
        assert not failure.none()
    finally:
        failure.detach()
