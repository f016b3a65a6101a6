"""Benchmark: the local cluster's API server with 500 jobs' worth of pods (~5,000), one client listing and
watching them all; prints list time and watch-event delivery latency percentiles.

    .venv/bin/python bench/localcluster_watch.py [--jobs 500] [--pods-per-job 10] [--updates 2000] [--rate 200]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from kubernetes import client, config


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--pods-per-job", type=int, default=10)
    parser.add_argument("--updates", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=200.0, help="pod updates per second (0 = as fast as possible)")
    args = parser.parse_args()

    # The cluster runs in its own process, as `ttj local-cluster` does for an operator: sharing this process's
    # GIL with the benchmark's client would measure the client, not the server.
    workdir = tempfile.mkdtemp(prefix="ttj-bench-")
    kubeconfig = os.path.join(workdir, "kubeconfig")
    server = subprocess.Popen(
        [sys.executable, "-m", "ttj", "local-cluster", "--kubeconfig", kubeconfig], stdout=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(kubeconfig):
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("the local cluster did not start")
            time.sleep(0.05)
        run(args, kubeconfig)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)


def run(args: argparse.Namespace, kubeconfig: str) -> None:
    api = config.new_client_from_config(kubeconfig)
    core = client.CoreV1Api(api)
    namespaces = [f"bench-{i}" for i in range(10)]
    for ns in namespaces:
        core.create_namespace({"metadata": {"name": ns}})
    started = time.perf_counter()
    names = []
    for job in range(args.jobs):
        ns = namespaces[job % len(namespaces)]
        for index in range(args.pods_per_job):
            name = f"job{job}-worker-{index}"
            core.create_namespaced_pod(
                ns,
                {
                    "metadata": {
                        "name": name,
                        "labels": {"transient.training/job-name": f"job{job}", "transient.training/role": "worker"},
                    },
                    "spec": {
                        "containers": [
                            {
                                "name": "trainer",
                                "image": "ttj-trainer",
                                "env": [{"name": "TTJ_JOB_NAME", "value": f"job{job}"}],
                            }
                        ],
                        "nodeName": f"node-{job % 50}",
                    },
                },
            )
            names.append((ns, name))
    create_seconds = time.perf_counter() - started
    print(f"created {len(names)} pods in {create_seconds:.1f}s ({len(names) / create_seconds:.0f} creates/s)")

    list_times = []
    for _ in range(5):
        t0 = time.perf_counter()
        listed = core.list_pod_for_all_namespaces(label_selector="transient.training/role=worker")
        list_times.append(time.perf_counter() - t0)
    print(
        f"list all {len(listed.items)} pods (official client, deserialised): "
        f"median {statistics.median(list_times) * 1000:.0f} ms, max {max(list_times) * 1000:.0f} ms"
    )
    rv = listed.metadata.resource_version

    sent: dict[str, float] = {}
    latencies: list[float] = []
    done = threading.Event()

    def consume() -> None:
        # raw JSON lines, as kopf reads them (the typed client's model building would dominate)
        stream = core.list_pod_for_all_namespaces(
            watch=True, resource_version=rv, timeout_seconds=300, _preload_content=False
        )
        for line in stream:
            event = json.loads(line)
            key = (event["object"]["metadata"].get("annotations") or {}).get("bench/seq")
            if key in sent:
                latencies.append(time.perf_counter() - sent.pop(key))
                if len(latencies) == args.updates:
                    break
        stream.release_conn()
        done.set()

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    time.sleep(0.5)  # let the watch open before the first update
    interval = 1 / args.rate if args.rate else 0.0
    next_at = time.perf_counter()
    for seq in range(args.updates):
        ns, name = names[seq * 7919 % len(names)]
        key = str(seq)
        if interval:
            delay = next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            next_at += interval
        sent[key] = time.perf_counter()
        core.patch_namespaced_pod(name, ns, {"metadata": {"annotations": {"bench/seq": key}}})
    done.wait(60)
    ms = [x * 1000 for x in latencies]
    print(
        f"watch delivery over {len(ms)} updates at {args.rate or 'max'}/s: p50 {percentile(ms, 0.5):.1f} ms, "
        f"p90 {percentile(ms, 0.9):.1f} ms, p99 {percentile(ms, 0.99):.1f} ms, max {max(ms):.1f} ms"
    )
    print(f"p99 / 100 ms budget = {percentile(ms, 0.99) / 100:.2f}")
    api.close()


if __name__ == "__main__":
    main()
