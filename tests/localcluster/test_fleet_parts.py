"""The fleet's parts that need no cluster: node states, restart back-off, API retries, preemption sources."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from ttj.kubeapi import KubeError
from ttj_contract import ACCELERATOR_LABEL, NODE_POOL_LABEL, SPOT_LABEL, parse_time
from ttj_localcluster.nodes.kube import retrying
from ttj_localcluster.nodes.pools import NodePool, node_object, now_rfc3339
from ttj_localcluster.nodes.preemption_sources import SCRIPTED_CAUSE, ScriptedPreemptions
from ttj_localcluster.nodes.registry import NodeRegistry, NodeState, StockOut
from ttj_localcluster.nodes.restarts import backoff_seconds, backoff_state, restarts
from ttj_localcluster.nodes.timers import Timers

POOLS = [NodePool(name="cpu", nodes=2), NodePool(name="gpu", nodes=1, provisioning="spot", accelerator="a", gpus=1)]


def test_a_node_goes_from_registering_to_gone_and_its_name_stays_taken() -> None:
    registry = NodeRegistry(POOLS)
    node = registry.reserve("cpu")
    assert registry.state_of(node) is NodeState.REGISTERING
    assert registry.live_nodes("cpu") == [node]
    registry.mark_ready(node)
    assert registry.state_of(node) is NodeState.READY
    assert registry.begin_shutdown(node) is True
    assert registry.begin_shutdown(node) is False  # already shutting down: not twice
    assert registry.state_of(node) is NodeState.SHUTTING_DOWN
    assert registry.live_nodes() == []
    assert registry.missing("cpu") == 2
    registry.mark_gone(node)
    assert registry.state_of(node) is NodeState.GONE
    assert registry.describe()["cpu"] == {
        "nodes": [],
        "size": 2,
        "provisioning": "on-demand",
        "accelerator": None,
        "preemption": "none",
        "preempted": 1,
        "migrated": 0,
        "computeClass": None,
        "zone": "us-central1-a",
        "speed": 1.0,
        "stockedOut": False,
        "trace": None,
    }
    with pytest.raises(KeyError, match="no live node"):
        registry.begin_shutdown(node)
    assert registry.state_of("someone-elses-node") is None
    assert registry.state_of(None) is None


def test_a_drained_node_stays_live_until_gone_and_counts_as_migrated() -> None:
    registry = NodeRegistry(POOLS)
    node = registry.reserve("gpu")
    with pytest.raises(KeyError, match="no live node"):
        registry.begin_drain(node)  # still registering: nothing to drain yet
    registry.mark_ready(node)
    assert registry.begin_drain(node) is True
    assert registry.begin_drain(node) is False  # already draining: not twice
    assert registry.state_of(node) is NodeState.DRAINING
    assert registry.live_nodes("gpu") == [node]  # Ready and heartbeating while its pods are evicted
    registry.mark_gone(node, preempted=False)
    assert (registry.describe()["gpu"]["migrated"], registry.describe()["gpu"]["preempted"]) == (1, 0)
    assert registry.missing("gpu") == 1


def test_no_node_of_a_stocked_out_pool_is_created() -> None:
    registry = NodeRegistry([*POOLS, NodePool(name="out", nodes=1, stocked_out=True)])
    assert [registry.stocked_out(p) for p in ("cpu", "gpu", "out")] == [False, False, True]
    with pytest.raises(StockOut, match="pool out is stocked out: GCE out of resources in zone us-central1-a"):
        registry.reserve("out")
    assert registry.set_stocked_out("gpu", True) is True
    assert registry.set_stocked_out("gpu", True) is False
    with pytest.raises(StockOut):
        registry.reserve("gpu")
    assert registry.set_stocked_out("gpu", False) is True
    node = registry.reserve("gpu")
    assert registry.live_nodes("gpu") == [node]


def test_a_lost_node_is_neither_live_nor_preemptible() -> None:
    registry = NodeRegistry(POOLS)
    first, second = registry.reserve("cpu"), registry.reserve("cpu")
    assert registry.live_nodes("cpu") == [first, second]  # oldest first
    registry.mark_unreachable(first)
    assert registry.state_of(first) is NodeState.UNREACHABLE
    assert registry.live_nodes("cpu") == [second]
    with pytest.raises(KeyError):
        registry.begin_shutdown(first)
    with pytest.raises(KeyError):
        registry.mark_unreachable(first)
    with pytest.raises(KeyError, match="no pool named 'tpu'"):
        registry.pool("tpu")


def test_restart_backoff_doubles_up_to_its_cap() -> None:
    assert [backoff_seconds(n) for n in range(1, 8)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert backoff_state("main", 4.0) == {
        "waiting": {"reason": "CrashLoopBackOff", "message": "back-off 4s restarting failed container=main"}
    }
    assert restarts("Always", 0)
    assert restarts("OnFailure", 1)
    assert not restarts("OnFailure", 0)
    assert not restarts("Never", 1)


def failing(errors: list[Exception]) -> tuple[Callable[[], str], list[int]]:
    calls: list[int] = []

    def action() -> str:
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return "done"

    return action, calls


def test_retrying_retries_transient_failures_only() -> None:
    action, calls = failing([KubeError(503, "{}"), ConnectionResetError()])
    assert retrying(action, delay=0.001) == "done"
    assert len(calls) == 3
    action, calls = failing([KubeError(422, '{"message": "invalid"}')])
    with pytest.raises(KubeError, match="invalid"):
        retrying(action, delay=0.001)
    assert len(calls) == 1
    action, calls = failing([KubeError(500, "{}") for _ in range(5)])
    with pytest.raises(KubeError) as raised:
        retrying(action, attempts=3, delay=0.001)
    assert raised.value.status == 500  # the last failure itself, not a wrapper
    assert len(calls) == 3


def test_scripted_preemptions_take_the_oldest_live_node() -> None:
    registry = NodeRegistry([NodePool(name="s", nodes=3, preemption="scripted", preempt_at=(0.0,))])
    lost, oldest_live, _newest = registry.reserve("s"), registry.reserve("s"), registry.reserve("s")
    registry.mark_unreachable(lost)
    stop = threading.Event()
    asked: list[tuple[str, str]] = []
    fired = threading.Event()

    def preempt(node: str, cause: str) -> None:
        asked.append((node, cause))
        fired.set()

    ScriptedPreemptions(registry, Timers(stop), stop, preempt).start()
    assert fired.wait(10)
    assert asked == [(oldest_live, SCRIPTED_CAUSE)]


def test_nodes_carry_the_contract_labels_and_times() -> None:
    pool = POOLS[1]
    node: dict[str, Any] = node_object(pool, "n", "127.0.0.1")
    labels = node["metadata"]["labels"]
    assert labels[SPOT_LABEL] == "true"
    assert labels[ACCELERATOR_LABEL] == "a"
    assert labels[NODE_POOL_LABEL] == "gpu"
    assert parse_time(now_rfc3339()) is not None
    assert now_rfc3339().endswith("Z")
