"""The local API server's watch cache, held to kube-apiserver 1.25's (cacher/watch_cache.go): a window per
resource of 100 to 100 Ki events, doubled while full of fresh events, halved when its newest quarter is stale,
and 410 Gone for a version older than it reaches back to."""

from __future__ import annotations

import pytest

from ttj_localcluster.apiserver.errors import ApiError
from ttj_localcluster.apiserver.store import EVENT_FRESH_SECONDS, Store, WatchCache, WatchEvent

KEY = ("", "configmaps")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def event(rv: int) -> WatchEvent:
    return WatchEvent(rv, "ADDED", KEY, {"metadata": {"name": f"c{rv}", "resourceVersion": str(rv)}}, None)


def fill(cache: WatchCache, first_rv: int, count: int) -> None:
    for rv in range(first_rv, first_rv + count):
        cache.add(event(rv))


def test_a_full_window_of_fresh_events_doubles_up_to_its_bound_and_keeps_them_all() -> None:
    clock = Clock()
    cache = WatchCache(9, 4, 16, clock)
    fill(cache, 10, 16)
    assert (cache.capacity, len(cache), cache.oldest_resumable()) == (16, 16, 9)
    cache.add(event(26))  # the bound reached: the oldest goes
    assert (cache.capacity, len(cache), cache.oldest_resumable()) == (16, 16, 10)


def test_a_full_window_whose_newest_quarter_is_stale_halves() -> None:
    clock = Clock()
    cache = WatchCache(9, 4, 16, clock)
    fill(cache, 10, 8)
    assert cache.capacity == 8
    clock.now = EVENT_FRESH_SECONDS + 1
    cache.add(event(18))  # full of stale events: halved to 4, keeping the newest
    assert (cache.capacity, len(cache)) == (4, 4)
    assert [e.rv for e in cache.since(14)] == [15, 16, 17, 18]


def test_a_full_window_at_its_lower_bound_only_drops_its_oldest() -> None:
    clock = Clock()
    cache = WatchCache(9, 4, 16, clock)
    fill(cache, 10, 4)
    clock.now = EVENT_FRESH_SECONDS + 1
    fill(cache, 14, 3)  # stale, but it cannot shrink: the oldest goes each time
    assert (cache.capacity, len(cache)) == (4, 4)


@pytest.mark.parametrize(
    ("since", "events"),
    [(12, [13, 14, 15]), (9, [10, 11, 12, 13, 14, 15]), (15, [])],
    ids=["inside the window", "its start", "its end"],
)
def test_a_watch_resumes_with_the_events_after_its_version(since: int, events: list[int]) -> None:
    cache = WatchCache(9, 100, 100, Clock())
    fill(cache, 10, 6)
    assert [e.rv for e in cache.since(since)] == events


def test_a_version_older_than_the_window_is_gone_in_kubes_words() -> None:
    cache = WatchCache(9, 4, 4, Clock())
    with pytest.raises(ApiError) as before_start:
        cache.since(8)
    fill(cache, 20, 6)  # 20 and 21 dropped: the window reaches back to just before 22
    assert [e.rv for e in cache.since(21)] == [22, 23, 24, 25]
    with pytest.raises(ApiError) as dropped:
        cache.since(20)
    assert [(e.value.code, e.value.reason, e.value.message) for e in (before_start, dropped)] == [
        (410, "Expired", "too old resource version: 8 (9)"),
        (410, "Expired", "too old resource version: 20 (21)"),
    ]


def test_each_resource_has_its_own_window_which_a_restart_starts_again() -> None:
    store = Store(clock=Clock())
    store.items(KEY, "ns")  # listed at version 1
    for i in range(3):
        store.put(KEY, {"metadata": {"name": f"c{i}", "namespace": "ns", "uid": f"u{i}"}}, None)
    store.put(("", "secrets"), {"metadata": {"name": "s", "namespace": "ns", "uid": "s"}}, None)
    assert [e.rv for e in store._caches[KEY].since(1)] == [2, 3, 4]
    assert [e.rv for e in store._caches[("", "secrets")].since(4)] == [5]  # its window starts at its first write
    store.restart_watch_caches()
    with pytest.raises(ApiError):
        store._caches[KEY].since(4)
    assert store._caches[KEY].since(5) == []
