"""``ttj timeline``'s reading of a job from what the cluster keeps, on a job the planner took through a
worker's and the chief's preemption; its text, its picture and the command."""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pytest

from tests.timeline.events import as_kept
from tests.unit.planner.builders import T0, job, node, renew, run_pod, run_ps, start, terminate
from tests.unit.planner.test_groups import MOVE_BACK_GROUPS, gpu_node, passes, pod_writes, unschedulable
from ttj.cost.prices import load_price_table
from ttj.planner import PlannerConfig
from ttj.planner.world import World
from ttj.timeline.cluster import from_cluster
from ttj.timeline.draw import Z_CHIEF, Z_MARKER, draw, figure
from ttj.timeline.text import render
from ttj_contract import format_time

S = timedelta(seconds=1)
PRICED = PlannerConfig(prices=load_price_table())


class Run:
    """The planner's passes, and its Events as the API server would keep them (with a time)."""

    def __init__(self) -> None:
        self.world = World(job())
        self.events: list[dict[str, Any]] = []
        self.chief = self.worker = ""

    def settle(self, now: datetime) -> None:
        """Passes at ``now``; a running chief renews its Lease first, as the trainer would."""
        for _ in range(5):
            lease = self.world.observed.lease
            holder = self.world.pod(((lease or {}).get("spec") or {}).get("holderIdentity") or "")
            if holder is not None and holder["status"].get("phase") == "Running":
                renew(self.world, now)
            self.world.reconcile(now, PRICED)
            self.events += as_kept(self.world.events[len(self.events) :], now)

    def ready(self, pod_name: str, node_name: str, running: datetime, ready: datetime) -> None:
        run_pod(self.world, pod_name, node_name, running)
        pod = self.world.pod(pod_name)
        assert pod is not None
        pod["status"]["conditions"].append(
            {"type": "Ready", "status": "True", "lastTransitionTime": format_time(ready)}
        )


@pytest.fixture
def run() -> Run:
    """Three workers; a worker preempted at 100 s (back at 160 s), the chief at 200 s (back at 240 s);
    step 400 at 5 s, 900 at 290 s."""
    r = Run()
    nodes = [node(f"gpu-{i}", age=timedelta(hours=2 + 5 * i)) for i in range(3)]
    for n in nodes:
        n["metadata"]["labels"]["node.kubernetes.io/instance-type"] = "n1-standard-8"
    start(r.world, nodes)
    r.settle(T0)
    renew(r.world, T0 + 5 * S, {"globalStep": 400, "checkpointStep": 300, "checkpointTime": format_time(T0 + 4 * S)})
    r.settle(T0 + 50 * S)
    r.chief = r.world.job["status"]["chief"]["pod"]
    r.worker = min(f"mnist-worker-{slot}-1" for slot in range(3) if f"mnist-worker-{slot}-1" != r.chief)
    terminate(r.world, r.worker, 143, pod_reason="Terminated", now=T0 + 100 * S)
    r.settle(T0 + 101 * S)
    r.ready(r.worker[:-1] + "2", "gpu-0", T0 + 130 * S, T0 + 160 * S)
    r.settle(T0 + 161 * S)
    terminate(r.world, r.chief, 143, pod_reason="Terminated", now=T0 + 200 * S)
    r.settle(T0 + 201 * S)
    r.ready(r.chief[:-1] + "2", "gpu-2", T0 + 230 * S, T0 + 240 * S)
    r.settle(T0 + 241 * S)
    renew(
        r.world, T0 + 290 * S, {"globalStep": 900, "checkpointStep": 800, "checkpointTime": format_time(T0 + 280 * S)}
    )
    r.settle(T0 + 300 * S)
    return r


def timeline_of(run: Run) -> Any:
    world = run.world
    return from_cluster(world.job, run.events, world.observed.pods, world.observed.lease, T0 + 300 * S)


def test_the_pods_the_chiefs_and_the_losses_are_rebuilt(run: Run) -> None:
    world = run.world
    assert world.pod(run.worker) is None, "lost pods are deleted: only the status remembers them"
    timeline = timeline_of(run)
    worker_lane, chief_lane = f"worker {run.worker.split('-')[2]}", f"worker {run.chief.split('-')[2]}"
    lost = timeline.pods[run.worker]
    assert (lost.lane, lost.running, lost.ended, lost.outcome) == (worker_lane, 0.0, 100.0, "preempted")
    chief = timeline.pods[run.chief]
    assert (chief.lane, chief.ended, chief.outcome) == (chief_lane, 200.0, "preempted")
    replacement = timeline.pods[run.worker[:-1] + "2"]
    assert (replacement.running, replacement.outcome) == (130.0, "running")
    assert [(when, what) for when, what in timeline.preemptions] == [
        (100.0, f"worker {run.worker}"),
        (200.0, f"chief {run.chief}"),
    ]
    new_chief = world.job["status"]["chief"]["pod"]
    assert [(epoch, pod) for _, epoch, pod in timeline.chiefs] == [(1, run.chief), (2, new_chief)]
    assert timeline.chiefs[1][0] == 201.0
    assert timeline.gaps == [(100.0, 160.0, worker_lane), (200.0, 240.0, chief_lane)]
    assert timeline.steps[0] == (0.0, 0)
    assert (100.0, 400) in timeline.steps
    assert timeline.steps[-1] == (300.0, 900)
    assert timeline.checkpoints == [(280.0, 800)]
    usd = [value for _, value in timeline.cost]
    assert usd == sorted(usd)
    assert usd[-1] == world.job["status"]["cost"]["usd"]
    assert timeline.end == 300.0


def test_replacements_removed_since_are_drawn_from_the_loss_records(run: Run) -> None:
    """At the job's end the operator removes its running pods (cleanPodPolicy): the loss records still say
    when each replacement took its slot over, so the lane is not left empty after the slot-empty hatch."""
    world = run.world
    replacements = {run.worker[:-1] + "2", run.chief[:-1] + "2"}
    left = [p for p in world.observed.pods if p["metadata"]["name"] not in replacements]
    timeline = from_cluster(world.job, run.events, left, world.observed.lease, T0 + 300 * S)
    worker_back = timeline.pods[run.worker[:-1] + "2"]
    chief_back = timeline.pods[run.chief[:-1] + "2"]
    assert (worker_back.lane, worker_back.running, worker_back.ended) == (
        f"worker {run.worker.split('-')[2]}",
        160.0,
        300.0,
    )
    assert (chief_back.lane, chief_back.running, chief_back.ended) == (
        f"worker {run.chief.split('-')[2]}",
        240.0,
        300.0,
    )
    assert worker_back.outcome == chief_back.outcome == "deleted"
    assert 100.0 <= worker_back.created <= 160.0


def test_the_text_says_what_each_loss_cost(run: Run) -> None:
    text = render(timeline_of(run), "ns/mnist (Running)")
    assert text.startswith("ns/mnist (Running)\n")
    assert "what each loss cost:" in text
    assert f"worker {run.worker} (slot {run.worker.split('-')[2]}) lost at" in text
    assert f"chief {run.chief} (slot {run.chief.split('-')[2]}) lost at" in text
    assert "slot empty 60 s" in text
    assert "saved $" in text
    assert "PreemptionCost" in text  # the Events the cluster keeps are listed
    assert run.chief in text.split("pods (seconds since the job was applied):")[1]


def test_the_picture_draws_every_marker_above_the_bars(run: Run, tmp_path: Path) -> None:
    timeline = timeline_of(run)
    fig = figure(timeline, "ns/mnist")
    lanes = fig.axes[0]
    markers = [line for line in lanes.get_lines() if line.get_marker() == "X"]
    assert len(markers) == 2, "the worker's and the chief's preemption"
    bars = [patch.get_zorder() for patch in lanes.patches]
    assert max(bars) == Z_CHIEF
    assert all(m.get_zorder() == Z_MARKER > max(bars) for m in markers)
    assert len(fig.axes) >= 3, "lanes, global step, cost"
    plt.close(fig)
    out = draw(timeline, tmp_path / "timeline.png", "ns/mnist")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_command_reads_the_job_events_pods_and_lease(
    run: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ttj import kubeapi
    from ttj.timeline import cli

    world = run.world
    world.job["metadata"]["creationTimestamp"] = format_time(T0)
    answers = {
        kubeapi.path("TransientTrainingJob", "ns", "mnist"): world.job,
        kubeapi.path("Pod", "ns"): {"items": world.observed.pods},
        kubeapi.path("Event", "ns"): {"items": run.events},
        kubeapi.path("Lease", "ns", "mnist-chief"): world.observed.lease,
    }

    class FakeClient:
        def get(self, path: str) -> Any:
            return answers.get(path)

        def request(self, method: str, path: str, query: Any = ()) -> Any:
            assert method == "GET"
            return answers[path]

        def close(self) -> None:
            pass

    monkeypatch.setattr(cli, "_client", lambda _kubeconfig: FakeClient())
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    assert cli.main(parser.parse_args(["ns/mnist"])) == 0
    assert "what each loss cost:" in capsys.readouterr().out
    picture = tmp_path / "t.png"
    assert cli.main(parser.parse_args(["ns/mnist", "-o", str(picture)])) == 0
    assert picture.stat().st_size > 10_000
    assert cli.main(parser.parse_args(["ns/other"])) == 1
    assert "no TransientTrainingJob ns/other" in capsys.readouterr().err


def test_a_job_just_applied_has_a_timeline_too(tmp_path: Path) -> None:
    """No status, no pods, no Lease, no Events yet (and no prices): text and picture still come out."""
    fresh = {"metadata": {"name": "mnist", "namespace": "ns", "creationTimestamp": format_time(T0)}, "spec": {}}
    timeline = from_cluster(fresh, [], [], None, T0 + 3 * S)
    assert (timeline.end, timeline.pods, timeline.chiefs, timeline.cost) == (3.0, {}, [], [])
    text = render(timeline, "ns/mnist (Pending)")
    assert "cost: not accrued" in text
    fig = figure(timeline, "ns/mnist")
    assert len(fig.axes) == 2, "no cost panel without a cost"
    plt.close(fig)
    assert draw(timeline, tmp_path / "fresh.svg", "ns/mnist").read_text().lstrip().startswith("<?xml")


def test_evaluations_and_the_export_come_from_the_events_and_the_status(run: Run) -> None:
    world = run.world
    checkpoint = {"checkpointStep": 1000, "checkpointTime": format_time(T0 + 305 * S)}
    renew(
        world,
        T0 + 310 * S,
        {"globalStep": 1000, **checkpoint, "evaluationStep": 800, "evaluation": {"loss": 0.75, "accuracy": 0.5}},
    )
    run.settle(T0 + 310 * S)
    latest = {"evaluationStep": 1000, "evaluation": {"loss": 0.25, "accuracy": 0.875}, "exportPath": "/ckpt/export"}
    renew(world, T0 + 320 * S, {"globalStep": 1000, **checkpoint, **latest})
    run.settle(T0 + 320 * S)
    pods, lease = world.observed.pods, world.observed.lease

    timeline = from_cluster(world.job, run.events, pods, lease, T0 + 330 * S)
    assert (timeline.evaluations, timeline.export) == (
        [(310.0, 800, {"accuracy": 0.5, "loss": 0.75}), (320.0, 1000, {"accuracy": 0.875, "loss": 0.25})],
        (320.0, "/ckpt/export"),
    )
    text = render(timeline, "ns/mnist (Running)").split("evaluation and the exported model:\n")[1]
    assert text.startswith(
        "    310.0s  evaluated at global step 800: accuracy=0.5, loss=0.75\n"
        "    320.0s  evaluated at global step 1000: accuracy=0.875, loss=0.25\n"
        "    320.0s  the final model is exported to /ckpt/export (model.keras and saved_model/)\n"
    )

    # once the Events expired, the status still has the latest evaluation (where the step reached it) and the export
    expired = from_cluster(world.job, [], pods, lease, T0 + 330 * S)
    assert (expired.evaluations, expired.export) == (
        [(330.0, 1000, {"accuracy": 0.875, "loss": 0.25})],
        (330.0, "/ckpt/export"),
    )
    fig = figure(timeline, "ns/mnist")
    stars = [line for line in fig.axes[1].get_lines() if line.get_marker() == "*"]
    assert [list(line.get_xdata()) for line in stars] == [[310.0, 320.0]]
    plt.close(fig)


def test_a_workers_group_is_read_from_its_label_named_in_the_text_and_drawn() -> None:
    from ttj.timeline.model import Timeline

    world = World(
        job(workers={"replicas": 1, "minReplicas": 1, "groups": [{"name": "l4", "acceleratorType": "nvidia-l4"}]})
    )
    world.reconcile(T0)
    timeline = from_cluster(world.job, [], world.observed.pods, world.observed.lease, T0 + 10 * S)
    sampled = Timeline()
    for pod in world.observed.pods:
        sampled.observe_pod(0.0, pod)
    assert [(s.lane, s.group) for s in timeline.pods.values()] == [("worker 0", "l4")]
    assert [(s.lane, s.group) for s in sampled.pods.values()] == [("worker 0", "l4")]
    assert "mnist-worker-0-1  created" in render(timeline, "ns/mnist")
    assert render(timeline, "ns/mnist").count("  group l4") == 1
    fig = figure(timeline, "ns/mnist")
    assert [text.get_text() for text in fig.axes[0].texts] == ["l4"]
    plt.close(fig)


def test_a_worker_its_compute_class_moved_ends_migrated_not_preempted() -> None:
    from tests.unit.planner import test_compute_class as cc

    world = cc.started()
    holder = world.job["status"]["chief"]["pod"]
    moved = next(name for name in (cc.on(world, "flex-0"), cc.on(world, "flex-1")) if name != holder)
    cc.drain(world, str(world.pod(moved)["spec"]["nodeName"]), T0 + 110 * S)  # type: ignore[index]
    terminate(world, moved, 143, now=T0 + 112 * S)
    kept = list(world.observed.pods)
    events: list[dict[str, Any]] = []
    for now in (T0 + 113 * S, T0 + 114 * S):
        world.reconcile(now, cc.PRICED)
        events += [
            {"type": e.type, "reason": e.reason, "message": e.message, "lastTimestamp": format_time(now)}
            for e in world.events[len(events) :]
        ]
    # while the evicted pod is still held by its finalizer, its bar ends migrated; once gone, no record keeps it
    # (a migration is no loss: status.preemptionCosts has none), only the Event
    for pods, drawn in ((kept, True), (world.observed.pods, False)):
        timeline = from_cluster(world.job, events, pods, world.observed.lease, T0 + 120 * S)
        assert (timeline.pods[moved].outcome if drawn else moved not in timeline.pods) == (
            "migrated" if drawn else True
        )
        assert not [what for _, what in timeline.preemptions if moved in what]
        assert "Migrated" in {reason for _, _, reason, _ in timeline.events}


def test_a_replacement_a_move_back_released_ends_at_the_release(run: Run) -> None:
    """A replacement gone since, which a MovedBack Event names as released, ends there, not at the record's end."""
    world = run.world
    released = run.worker[:-1] + "2"
    left = [p for p in world.observed.pods if p["metadata"]["name"] != released]
    moved_back = {
        "type": "Normal",
        "reason": "MovedBack",
        "message": f"worker slot 0 moved from group t4 back to group l4 (as slot 3: mnist-worker-3-1 runs, "
        f"{released} released)",
        "lastTimestamp": format_time(T0 + 200 * S),
    }
    timeline = from_cluster(world.job, [*run.events, moved_back], left, world.observed.lease, T0 + 300 * S)
    span = timeline.pods[released]
    assert (span.running, span.ended, span.outcome) == (160.0, 200.0, "deleted")


class Fleet:
    """A job preferring l4, then t4 (replicas 2, maxReplicas 3), its passes and its Events with their times."""

    def __init__(self) -> None:
        self.world = World(
            job(
                workers={
                    "replicas": 2,
                    "minReplicas": 1,
                    "maxReplicas": 3,
                    "groups": MOVE_BACK_GROUPS,
                    "fallbackAfterSeconds": 60,
                }
            )
        )
        self.world.observed.nodes["cpu-0"] = node("cpu-0", "on-demand")
        self.events: list[dict[str, Any]] = []

    def passes(self, now: datetime) -> list[tuple[str, str, str]]:
        """An operator pass at ``now`` (the chief reporting first); the pod writes it made."""
        result = passes(self.world, now)
        self.events += [
            {"type": e.type, "reason": e.reason, "message": e.message, "lastTimestamp": format_time(now)}
            for e in result.events
        ]
        return pod_writes(result)

    def timeline(self, now: datetime) -> Any:
        world = self.world
        return from_cluster(world.job, self.events, world.observed.pods, world.observed.lease, now)


@pytest.fixture
def fleet() -> Fleet:
    """l4 has no capacity: both slots fall back to t4 at 60 s. Slot 1's worker is lost at 100 s and replaced
    in t4 (running at 120 s). When l4 is tried again (1861 s) an extra worker in slot 2 moves back to l4 and
    slot 1's t4 worker is released (1902 s); the l4 worker is lost at 1961 s and replaced in slot 1, the
    lowest free slot (running at 1991 s): slot 2 is the spare from then on."""
    f = Fleet()
    world = f.world
    f.passes(T0)
    run_ps(world, "mnist-ps-0-abc")
    unschedulable(world, T0)
    assert f.passes(T0 + 60 * S) == [
        ("DeleteChild", "mnist-worker-0-1", "CapacityFallback"),
        ("DeleteChild", "mnist-worker-1-1", "CapacityFallback"),
        ("CreateChild", "mnist-worker-0-2", "t4"),
        ("CreateChild", "mnist-worker-1-2", "t4"),
    ]
    for slot in (0, 1):
        world.observed.nodes[f"t4-{slot}"] = node(f"t4-{slot}")
        run_pod(world, f"mnist-worker-{slot}-2", f"t4-{slot}", T0 + 70 * S)
    f.passes(T0 + 71 * S)
    terminate(world, "mnist-worker-1-2", 143, pod_reason="Terminated", now=T0 + 100 * S)
    assert f.passes(T0 + 101 * S) == [("CreateChild", "mnist-worker-1-3", "t4")]
    f.passes(T0 + 102 * S)
    world.observed.nodes["t4-2"] = node("t4-2")
    run_pod(world, "mnist-worker-1-3", "t4-2", T0 + 120 * S)
    f.passes(T0 + 121 * S)
    assert f.passes(T0 + 1861 * S) == [("CreateChild", "mnist-worker-2-1", "l4")]
    world.observed.nodes["l4-0"] = gpu_node("l4-0", "nvidia-l4")
    run_pod(world, "mnist-worker-2-1", "l4-0", T0 + 1901 * S)
    assert f.passes(T0 + 1902 * S) == [("DeleteChild", "mnist-worker-1-3", "ScaledDown")]
    f.passes(T0 + 1903 * S)
    terminate(world, "mnist-worker-2-1", 143, pod_reason="Terminated", now=T0 + 1961 * S)
    assert f.passes(T0 + 1962 * S) == [("CreateChild", "mnist-worker-1-4", "l4")]
    f.passes(T0 + 1963 * S)
    world.observed.nodes["l4-1"] = gpu_node("l4-1", "nvidia-l4")
    run_pod(world, "mnist-worker-1-4", "l4-1", T0 + 1991 * S)
    f.passes(T0 + 1992 * S)
    assert sorted(p["metadata"]["name"] for p in world.observed.pods) == [
        "mnist-ps-0-abc",
        "mnist-worker-0-2",
        "mnist-worker-1-4",
    ]
    return f


def test_every_worker_gone_since_is_drawn_with_its_group_from_the_events(fleet: Fleet) -> None:
    """Only two workers are still listed; the others' groups come from the CapacityFallback Event that sent
    their slot to t4 and the MovedBack Event that names the released and the new worker."""
    timeline = fleet.timeline(T0 + 2000 * S)
    workers = sorted((s for s in timeline.pods.values() if s.role == "worker"), key=lambda s: (s.slot, s.created))
    assert [(s.name, s.group, s.running, s.ended, s.outcome) for s in workers] == [
        ("mnist-worker-0-2", "t4", 70.0, None, "running"),
        ("mnist-worker-1-2", "t4", 70.0, 100.0, "preempted"),  # its slot fell back to t4
        ("mnist-worker-1-3", "t4", 120.0, 1902.0, "deleted"),  # released by the move back, from t4
        ("mnist-worker-1-4", "l4", 1991.0, None, "running"),
        ("mnist-worker-2-1", "l4", 1901.0, 1961.0, "preempted"),  # made to move back to l4
    ]
    fig = figure(timeline, "ns/mnist")
    assert sorted(text.get_text() for text in fig.axes[0].texts if text.get_text() in ("l4", "t4")) == [
        "l4",
        "l4",
        "t4",
        "t4",
        "t4",
    ]
    plt.close(fig)


def test_a_lost_workers_lane_is_hatched_until_its_replacement_in_the_spare_slot_runs(fleet: Fleet) -> None:
    """The l4 worker lost at 1961 s is replaced in slot 1 (the lowest free slot): its own slot 2 stands empty
    only until that replacement runs at 1991 s; from then on it is the free spare, not a slot short."""
    lost = next(r for r in fleet.world.job["status"]["preemptionCosts"] if r["pod"] == "mnist-worker-2-1")
    assert (lost["replacement"].startswith("mnist-worker-1-"), lost["slotEmptySeconds"]) == (True, 30.0), lost
    timeline = fleet.timeline(T0 + 2000 * S)
    assert timeline.gaps == [(100.0, 120.0, "worker 1"), (1961.0, 1991.0, "worker 2")]
    fig = figure(timeline, "ns/mnist")
    hatched = [(p.get_x(), p.get_x() + p.get_width()) for p in fig.axes[0].patches if p.get_hatch()]
    assert hatched == [(100.0, 120.0), (1961.0, 1991.0)]
    plt.close(fig)


def listed(name: str, slot: int, created: float, running: float | None = None) -> dict[str, Any]:
    """A worker pod as listed: made at ``created`` seconds, running since ``running``."""
    status: dict[str, Any] = {"phase": "Pending"}
    if running is not None:
        status = {"phase": "Running", "startTime": format_time(T0 + running * S)}
    labels = {"transient.training/role": "worker", "transient.training/slot": str(slot)}
    return {
        "metadata": {"name": name, "labels": labels, "creationTimestamp": format_time(T0 + created * S)},
        "status": status,
    }


LOST_IN_SLOT_2 = {
    "pod": "j-worker-2-1",
    "role": "worker",
    "slot": 2,
    "startedAt": format_time(T0),
    "lostAt": format_time(T0 + 100 * S),
}


@pytest.mark.parametrize(
    ("record", "pods", "gap"),
    [
        # the replacement in slot 1 (free at the loss) is pending: the slot is still short
        ({}, [listed("j-worker-0-1", 0, 0, 0), listed("j-worker-1-2", 1, 101)], (100.0, None, "worker 2")),
        # it runs: slot 2 is the spare from then on
        ({}, [listed("j-worker-0-1", 0, 0, 0), listed("j-worker-1-2", 1, 101, 130)], (100.0, 130.0, "worker 2")),
        # a worker that ran in slot 1 before the loss replaces nothing; slot 0's pod made later does
        (
            {},
            [listed("j-worker-0-2", 0, 110, 140), listed("j-worker-1-1", 1, 0, 0)],
            (100.0, 140.0, "worker 2"),
        ),
        # the record says when slot 2 itself was refilled
        (
            {"replacement": "j-worker-2-2", "recoveredAt": format_time(T0 + 125 * S)},
            [listed("j-worker-0-1", 0, 0, 0), listed("j-worker-1-2", 1, 101, 110), listed("j-worker-2-2", 2, 101, 120)],
            (100.0, 125.0, "worker 2"),
        ),
    ],
)
def test_a_slot_is_empty_from_the_loss_until_a_replacement_runs_there_or_in_a_free_slot(
    record: dict[str, Any], pods: list[dict[str, Any]], gap: tuple[float, float | None, str]
) -> None:
    job_ = {
        "metadata": {"name": "j", "creationTimestamp": format_time(T0)},
        "status": {"preemptionCosts": [LOST_IN_SLOT_2 | record]},
    }
    assert from_cluster(job_, [], pods, None, T0 + 200 * S).gaps == [gap]


def fell_back(slot: int, left: str, chosen: str, at: float) -> dict[str, Any]:
    message = (
        f"worker slot {slot} left group {left} (unschedulable for 60s: Unschedulable: no nodes) for group {chosen}"
    )
    return {
        "type": "Warning",
        "reason": "CapacityFallback",
        "message": message,
        "lastTimestamp": format_time(T0 + at * S),
    }


def lost_at(pod: str, slot: int, started: float, lost: float) -> dict[str, Any]:
    return {
        "pod": pod,
        "role": "worker",
        "slot": slot,
        "startedAt": format_time(T0 + started * S),
        "lostAt": format_time(T0 + lost * S),
    }


@pytest.mark.parametrize(
    ("status", "events", "groups"),
    [
        # nothing keeps the gone worker's group
        ({}, [], {"j-worker-0-3": None}),
        # the cost ledger still has its entry
        ({"cost": {"pods": [{"name": "j-worker-0-3", "group": "od"}]}}, [], {"j-worker-0-3": "od"}),
        # the job has one group
        ({"workerGroups": [{"name": "l4"}]}, [], {"j-worker-0-3": "l4"}),
        # the slot fell back twice before the pod was made: the later fallback's group
        ({}, [fell_back(0, "l4", "t4", 60), fell_back(0, "t4", "od", 120)], {"j-worker-0-3": "od"}),
        # a fallback of another slot says nothing of it
        ({}, [fell_back(1, "l4", "t4", 60)], {"j-worker-0-3": None}),
    ],
)
def test_the_group_of_a_worker_gone_since_comes_from_what_the_record_keeps(
    status: dict[str, Any], events: list[dict[str, Any]], groups: dict[str, str | None]
) -> None:
    job_ = {
        "metadata": {"name": "j", "creationTimestamp": format_time(T0)},
        "status": {"preemptionCosts": [lost_at("j-worker-0-3", 0, 125, 300)], **status},
    }
    timeline = from_cluster(job_, events, [], None, T0 + 400 * S)
    assert {s.name: s.group for s in timeline.pods.values()} == groups


def test_a_later_pod_of_a_slot_that_fell_back_is_not_taken_for_the_one_made_then() -> None:
    """Slot 0's pod made at the fallback was lost and replaced at 300 s; the replacement, gone too, may be in
    any group: only the first pod made after the fallback gets its group."""
    lost = lost_at("j-worker-0-2", 0, 65, 300)
    replaced = lost | {"replacement": "j-worker-0-3", "recoveredAt": format_time(T0 + 320 * S)}
    job_ = {
        "metadata": {"name": "j", "creationTimestamp": format_time(T0)},
        "status": {"preemptionCosts": [replaced, lost_at("j-worker-0-3", 0, 320, 500)]},
    }
    timeline = from_cluster(job_, [fell_back(0, "l4", "t4", 60)], [], None, T0 + 600 * S)
    assert {s.name: s.group for s in timeline.pods.values()} == {"j-worker-0-2": "t4", "j-worker-0-3": None}
