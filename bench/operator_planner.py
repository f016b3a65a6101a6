"""Planner latency at scale: 500 jobs of 8 workers on one operator.

Measures, per job, the planner pass that turns "worker preempted" into "replacement pod created"
and the one that turns "chief lost" into "new chief labelled", plus a steady-state pass, with the
observed state of all jobs held in memory at once (as the operator's kopf indexes hold it).
Prints percentiles and the memory of that state. Run: .venv/bin/python bench/operator_planner.py
"""

from __future__ import annotations

import argparse
import gc
import resource
import statistics
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from typing import Any

from ttj.planner import CreateChild, LabelPod, plan
from ttj.planner.world import World
from ttj_contract import (
    ACCELERATOR_LABEL,
    API_VERSION,
    KIND,
    LABEL_JOB,
    LABEL_PS_INDEX,
    LABEL_ROLE,
    SPOT_LABEL,
    Role,
    format_time,
)

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def make_job(i: int, workers: int) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": f"job-{i}", "namespace": "bench", "uid": f"uid-{i}", "generation": 1},
        "spec": {
            "trainSteps": 64000,
            "checkpoint": {"uri": "gs://bench/ckpt"},
            "workers": {"replicas": workers, "minReplicas": 1},
        },
    }


def node(name: str, age_hours: float) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": format_time(T0 - timedelta(hours=age_hours)),
            "labels": {SPOT_LABEL: "true", ACCELERATOR_LABEL: "nvidia-tesla-t4"},
        },
        "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": format_time(T0)}]},
    }


def steady_world(i: int, workers: int) -> World:
    world = World(make_job(i, workers))
    world.reconcile(T0)
    for slot, pod in enumerate(
        p for p in world.observed.pods if p["metadata"]["labels"].get(LABEL_ROLE) == Role.WORKER
    ):
        name = f"n-{i}-{slot}"
        world.observed.nodes[name] = node(name, 1 + slot * 2)
        pod["spec"]["nodeName"] = name
        pod["status"] = {
            "phase": "Running",
            "startTime": format_time(T0),
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": format_time(T0)}],
        }
    world.observed.pods.append(
        {
            "metadata": {
                "name": f"job-{i}-ps-0-x",
                "labels": {LABEL_JOB: f"job-{i}", LABEL_ROLE: Role.PS.value, LABEL_PS_INDEX: "0"},
            },
            "spec": {"nodeName": "cpu"},
            "status": {"phase": "Running"},
        }
    )
    world.reconcile(T0)
    world.reconcile(T0)
    return world


def lose(world: World, pod_name: str, now: datetime) -> None:
    pod = world.pod(pod_name)
    assert pod is not None
    pod["status"] = {
        "phase": "Failed",
        "reason": "Terminated",
        "containerStatuses": [
            {"name": "trainer", "state": {"terminated": {"exitCode": 143, "finishedAt": format_time(now)}}}
        ],
    }


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()

    tracemalloc.start()
    worlds = [steady_world(i, args.workers) for i in range(args.jobs)]
    gc.collect()
    state_bytes, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    now = T0 + timedelta(seconds=5)
    steady, preempt, chief = [], [], []
    for world in worlds:
        start = time.perf_counter()
        plan(world.job, world.observed, now)
        steady.append(time.perf_counter() - start)
    for world in worlds:
        holder = world.job["status"]["chief"]["pod"]
        victim = next(
            p["metadata"]["name"]
            for p in world.observed.pods
            if p["metadata"]["labels"].get(LABEL_ROLE) == Role.WORKER and p["metadata"]["name"] != holder
        )
        lose(world, victim, now)
        start = time.perf_counter()
        result = plan(world.job, world.observed, now)
        preempt.append(time.perf_counter() - start)
        assert [a for a in result.of_type(CreateChild) if a.kind == "Pod"], "no replacement"
    for world in worlds:
        world.reconcile(now)
        lose(world, world.job["status"]["chief"]["pod"], now)
        start = time.perf_counter()
        result = plan(world.job, world.observed, now)
        chief.append(time.perf_counter() - start)
        assert result.of_type(LabelPod), "no new chief"
    total_pass = sum(steady)
    print(f"jobs={args.jobs} workers/job={args.workers} pods={args.jobs * (args.workers + 1)}")
    for label, samples in (
        ("steady pass", steady),
        ("preemption -> replacement created", preempt),
        ("chief lost -> new chief labelled", chief),
    ):
        print(
            f"{label:36s} p50 {1e3 * statistics.median(samples):.3f} ms  p99 {1e3 * pct(samples, 0.99):.3f} ms  "
            f"max {1e3 * max(samples):.3f} ms"
        )
    print(
        f"one steady pass over all jobs: {1e3 * total_pass:.1f} ms "
        f"(p99 preemption pass / p50 steady pass = {pct(preempt, 0.99) / statistics.median(steady):.2f}x)"
    )
    print(
        f"observed state of all jobs (planner input, as indexed): {state_bytes / 2**20:.1f} MiB; "
        f"process max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
    )


if __name__ == "__main__":
    main()
