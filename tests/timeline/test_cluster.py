"""``ttj timeline``'s reading of a job from what the cluster keeps, on a job the planner took through a
worker's and the chief's preemption; its text, its picture and the command."""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pytest

from tests.unit.planner.builders import T0, job, node, renew, run_pod, start, terminate
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
            for event in self.world.events[len(self.events) :]:
                self.events.append(
                    {
                        "type": event.type,
                        "reason": event.reason,
                        "message": event.message,
                        "lastTimestamp": format_time(now),
                        "involvedObject": {"kind": "TransientTrainingJob", "name": "mnist"},
                    }
                )

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
