"""Who becomes chief: the worker least likely to be preempted next."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.unit.planner.builders import T0, node
from ttj.planner.election import Candidate, choose_chief, preemption_risk
from ttj_contract import format_time


def candidate(
    name: str, the_node: dict[str, Any], slot: int, running_for: timedelta = timedelta(minutes=5)
) -> Candidate:
    pod = {"metadata": {"name": name}, "status": {"startTime": format_time(T0 - running_for)}}
    return Candidate(pod, the_node, slot)


H = timedelta(hours=1)


@pytest.mark.parametrize(
    ("case", "candidates", "winner"),
    [
        (
            "on-demand over spot",
            [candidate("a", node("s", "spot", 20 * H), 0), candidate("b", node("o", "on-demand", 1 * H), 1)],
            "b",
        ),
        (
            "older spot node over a young one",
            [candidate("a", node("y", "spot", 1 * H), 0), candidate("b", node("o", "spot", 12 * H), 1)],
            "b",
        ),
        (
            "preemptible near 24 h loses to a younger one",
            [candidate("a", node("p1", "preemptible", 23 * H), 0), candidate("b", node("p2", "preemptible", 9 * H), 1)],
            "b",
        ),
        (
            "preemptible at 12 h beats one at 2 h",
            [candidate("a", node("p1", "preemptible", 2 * H), 0), candidate("b", node("p2", "preemptible", 12 * H), 1)],
            "b",
        ),
        (
            "same node age: the pod running longest",
            [
                candidate("a", node("n", "spot", 10 * H), 0, timedelta(minutes=1)),
                candidate("b", node("n", "spot", 10 * H), 1, H),
            ],
            "b",
        ),
        (
            "full tie: lowest slot",
            [candidate("b", node("n", "spot", 10 * H), 1), candidate("a", node("n", "spot", 10 * H), 0)],
            "a",
        ),
        (
            "unknown node counts as fresh spot-like risk? no: on-demand",
            [candidate("a", node("s", "spot", 1 * H), 0), candidate("b", None, 1)],
            "b",
        ),  # type: ignore[arg-type]
    ],
)
def test_choice(case: str, candidates: list[Candidate], winner: str) -> None:
    chosen = choose_chief(candidates, T0)
    assert chosen is not None
    assert chosen.pod["metadata"]["name"] == winner, case


def test_no_candidates() -> None:
    assert choose_chief([], T0) is None


def test_risk_follows_the_icac19_lifetimes() -> None:
    young, old = preemption_risk(node("a", "spot", 1 * H), T0), preemption_risk(node("b", "spot", 12 * H), T0)
    assert 0 < old < young < 0.1
    assert preemption_risk(node("c", "preemptible", 23 * H), T0) >= 1.0
    assert preemption_risk(node("d", "spot", 23 * H), T0) < 0.1  # spot VMs have no 24 h limit
    assert preemption_risk(node("e", "on-demand", 1 * H), T0) == 0.0


def grouped_candidate(name: str, kind: str, accelerator: str, age: timedelta, slot: int) -> Candidate:
    the_node = node(name, kind, age)
    the_node["metadata"]["labels"]["cloud.google.com/gke-accelerator"] = accelerator
    return candidate(name, the_node, slot)


@pytest.mark.parametrize(
    ("case", "candidates", "winner"),
    [
        (
            "an on-demand group's worker over a faster spot one on an old node",
            [
                grouped_candidate("l4-spot", "spot", "nvidia-l4", 20 * H, 0),
                grouped_candidate("t4-od", "on-demand", "nvidia-tesla-t4", 1 * H, 1),
            ],
            "t4-od",
        ),
        (
            "the slower group's worker on the node expected to live longer, not the faster one",
            [
                grouped_candidate("l4-spot", "spot", "nvidia-l4", 1 * H, 0),
                grouped_candidate("t4-spot", "spot", "nvidia-tesla-t4", 12 * H, 1),
            ],
            "t4-spot",
        ),
        (
            "a spot node over a preemptible one that will be reclaimed within the horizon",
            [
                grouped_candidate("p100-pre", "preemptible", "nvidia-tesla-p100", 23 * H, 0),
                grouped_candidate("t4-spot", "spot", "nvidia-tesla-t4", 1 * H, 1),
            ],
            "t4-spot",
        ),
    ],
)
def test_the_chief_goes_where_it_is_safest_never_where_it_is_fastest(
    case: str, candidates: list[Candidate], winner: str
) -> None:
    for order in (candidates, candidates[::-1]):
        chosen = choose_chief(order, T0)
        assert chosen is not None
        assert chosen.pod["metadata"]["name"] == winner, case
