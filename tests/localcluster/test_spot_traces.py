"""Node pools whose stock follows a spot availability trace (the format of ttj.preemption.traces).

The file format and its reading as stock changes are pure; on a running cluster a pool runs out (its node
preempted with the usual notice) and comes back as its trace says. Everything is awaited, nothing is timed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ttj.kubeapi import KubeClient
from ttj.preemption.traces import SpotTrace, StockChange, load_trace, parse_trace
from ttj_localcluster.cluster import LocalCluster
from ttj_localcluster.nodes import cli as nodes_cli
from ttj_localcluster.nodes.control import ControlClient
from ttj_localcluster.nodes.fleet import NodeFleet
from ttj_localcluster.nodes.pools import NodePool, load_pools_file, parse_pool_option
from ttj_localcluster.nodes.scheduler import Scheduler
from ttj_localcluster.nodes.trace_stock import TimedStockChange, timed_changes

from .conftest import NodesCluster, local_cluster_options, wait_for

POOL = "cloud.google.com/gke-nodepool"


def write_trace(path: Path, gap: float, data: list[Any]) -> Path:
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap}, "data": data}), encoding="utf-8")
    return path


# -- the format -------------------------------------------------------------------------------------


def test_a_trace_reads_as_stock_changes_from_where_the_replay_starts() -> None:
    trace = SpotTrace("t", 10.0, (1, 1, 0, 0, 2, 1, 0))
    assert (trace.seconds, round(trace.availability, 3)) == (70.0, 0.571)
    assert [trace.in_stock_at(s) for s in (0, 19.9, 20, 45, 60, 1000)] == [True, True, False, True, False, False]
    assert trace.changes() == [StockChange(20.0, False), StockChange(40.0, True), StockChange(60.0, False)]
    # from inside the first outage: out at once (in_stock_at), back 15 s later, out again 35 s later
    assert trace.in_stock_at(25.0) is False
    assert trace.changes(25.0) == [StockChange(15.0, True), StockChange(35.0, False)]
    assert trace.changes(1000.0) == []


def test_a_trace_file_is_loaded_or_refused_with_its_name(tmp_path: Path) -> None:
    loaded = load_trace(write_trace(tmp_path / "us-east-1a_v100_1.json", 195, [0, 1, 1]))
    assert (loaded.name, loaded.gap_seconds, loaded.counts) == ("us-east-1a_v100_1", 195.0, (0, 1, 1))
    refused = [
        ({"data": [1]}, "metadata"),
        ({"metadata": {"gap_seconds": 0}, "data": [1]}, "gap_seconds > 0"),
        ({"metadata": {"gap_seconds": 5}, "data": []}, "at least one count"),
        ({"metadata": {"gap_seconds": 5}, "data": [1, -1]}, "all >= 0"),
        ({"metadata": {"gap_seconds": 5}, "data": [1, "0"]}, "list of integers"),
        ([1, 0], "not a mapping"),
    ]
    for document, words in refused:
        with pytest.raises(ValueError, match=f"bad: not a spot trace .*{words}"):
            parse_trace(document, "bad")
    (tmp_path / "broken.json").write_text("{", encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken\.json: cannot read a spot trace"):
        load_trace(tmp_path / "broken.json")


def test_the_published_traces_load() -> None:
    # beside the repository, as issue 38 names them (../shared/data/spot-traces)
    root = Path(__file__).resolve().parents[3] / "shared/data/spot-traces/availability/1-node/aws-02-15-2023"
    path = root / "us-east-1a_v100_1.json"
    if not path.exists():
        pytest.skip("the published traces are not on this machine")
    trace = load_trace(path)
    assert trace.gap_seconds == 195.0
    assert set(trace.counts) == {0, 1}
    assert trace.changes()  # it has outages and restocks


# -- pool options -----------------------------------------------------------------------------------


def test_a_pool_follows_a_trace_at_its_time_scale(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "spot.json", 195, [1, 1, 0, 1])
    pool = parse_pool_option(f"name=t4,provisioning=spot,trace={path},trace-start=100,time-scale=390")
    assert (pool.trace, pool.trace_start, pool.time_scale) == (str(path), 100.0, 390.0)
    # out at trace second 390 (0.75 s after starting at 100), back at 585 (1.25 s)
    assert timed_changes(pool, load_trace(path)) == [
        TimedStockChange(290 / 390, False, 390.0),
        TimedStockChange(485 / 390, True, 585.0),
    ]


def test_a_trace_in_a_pools_file_is_found_beside_it(tmp_path: Path) -> None:
    write_trace(tmp_path / "spot.json", 60, [0, 1])
    (tmp_path / "pools.yaml").write_text("pools:\n- {name: t4, provisioning: spot, trace: spot.json}\n")
    [pool] = load_pools_file(tmp_path / "pools.yaml")
    assert pool.trace == str(tmp_path / "spot.json")


def test_bad_trace_options_are_refused(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "spot.json", 60, [1, 0])
    for option, words in [
        (f"name=t4,trace={tmp_path / 'missing.json'}", "cannot read a spot trace"),
        (f"name=t4,trace={path},stocked-out=true", "a trace decides the stock"),
        (f"name=t4,trace={path},stock-out-window=5:10", "a trace decides the stock"),
        (f"name=t4,trace={path},trace-start=-1", "trace-start must be >= 0"),
    ]:
        with pytest.raises(ValueError, match=words):
            parse_pool_option(option)


# -- on a running cluster ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def traced_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodesCluster]:
    traces = tmp_path_factory.mktemp("traces")
    # in stock, out from trace second 60, back at 120 (0.5 s and 1 s at 120 trace seconds per second)
    blinking = write_trace(traces / "blinking.json", 60, [1, 0, 1])
    # out for the first hour, then in stock: "late" starts in the outage, "resumed" after it
    hour_out = write_trace(traces / "hour-out.json", 3600, [0, 1])
    pools = [
        NodePool(name="cpu", nodes=1),
        NodePool(name="blinking", provisioning="spot", grace=1.0, trace=str(blinking), time_scale=120.0),
        NodePool(name="late", provisioning="spot", trace=str(hour_out)),
        NodePool(name="resumed", provisioning="spot", trace=str(hour_out), trace_start=3600.0),
    ]
    fleet = NodeFleet(pools, run_pods=False, state_dir=tmp_path_factory.mktemp("traced"), pod_network=False)
    with LocalCluster(addons=[fleet, Scheduler(seed=1)]) as cluster:
        kube = KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        yield NodesCluster(cluster, fleet, kube)
        kube.close()


def node_pools(c: NodesCluster) -> list[str]:
    return sorted(n["metadata"]["labels"][POOL] for n in (c.kube.get("/api/v1/nodes") or {})["items"])


def test_a_traced_pool_runs_out_with_its_nodes_preempted_and_comes_back(traced_cluster: NodesCluster) -> None:
    c = traced_cluster
    [record] = wait_for(
        lambda: [r for r in c.fleet.preemptions if r.pool == "blinking"], timeout=60, what="the trace's stock-out"
    )
    assert record.cause == "stock-out of pool blinking (trace blinking at 60s)"
    wait_for(record.done.is_set, timeout=60, what="the preempted node gone")
    # the trace's last sample (in stock) holds: the pool is back at its size with a new node
    [node] = wait_for(lambda: c.fleet.nodes_of("blinking"), timeout=60, what="the restock")
    assert node != record.node
    assert c.fleet.registry.stocked_out("blinking") is False
    assert wait_for(lambda: c.kube.get(f"/api/v1/nodes/{node}"), timeout=60, what="the new Node")


def test_a_pool_starts_as_its_trace_says(traced_cluster: NodesCluster) -> None:
    c = traced_cluster
    wait_for(lambda: "resumed" in node_pools(c), timeout=60, what="the resumed pool's node")
    status = ControlClient.from_kubeconfig(c.kubeconfig).status()["pools"]
    assert (status["late"]["stockedOut"], status["late"]["nodes"]) == (True, [])
    assert status["late"]["trace"].endswith("hour-out.json")
    assert status["resumed"]["stockedOut"] is False
    with pytest.raises(ValueError, match="pool late is stocked out"):
        c.fleet.restore_pool("late")


def test_a_trace_is_replayed_over_from_now_on_demand(traced_cluster: NodesCluster) -> None:
    c = traced_cluster
    [before] = wait_for(lambda: c.fleet.nodes_of("resumed"), timeout=60, what="the resumed pool's node")
    answer = ControlClient.from_kubeconfig(c.kubeconfig).replay_trace("resumed", 0)
    # the trace's first hour is out: out now, back in an hour
    assert (answer["fromSeconds"], answer["stockedOut"], answer["changes"]) == (
        0.0,
        True,
        [{"afterSeconds": 3600.0, "inStock": True}],
    )
    [record] = [r for r in c.fleet.preemptions if r.node == before]
    assert record.cause == "stock-out of pool resumed (trace hour-out at 0s)"
    assert c.fleet.registry.stocked_out("resumed") is True
    # from the pool's own trace-start (in stock for good): back at once, through the command's option
    args = local_cluster_options("--kubeconfig", c.kubeconfig, "--replay-trace", "resumed")
    assert nodes_cli.run_command(args) == 0
    [after] = wait_for(lambda: c.fleet.nodes_of("resumed"), timeout=60, what="the restock")
    assert after != before
    assert c.fleet.registry.stocked_out("resumed") is False
    with pytest.raises(ValueError, match="pool cpu follows no trace"):
        c.fleet.replay_trace("cpu")
