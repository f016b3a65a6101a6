"""The local scheduler's bind rate with thousands of pods in the cluster.

Shaped like bench/operator_scale.py's cluster: a spot pool of 8-GPU T4 nodes (tainted, as GKE taints them) with
room for 1.25 times the pods, pods as its workers are (one GPU, the toleration, a nodeSelector on the pool),
simulated (the fleet's kubelets report every bound pod Running). The cluster gets ``--pods`` Pending pods
first; then the scheduler starts, and this process watches the pods and records when each one is bound.
Every decision is taken with all the pods in the scheduler's cache, so the rate is the rate "at N pods".

Run: .venv/bin/python bench/localcluster_scheduler.py --pods 5000 [--nodes N] [--binds 5000]
(``--binds`` stops the measurement after that many binds, for a slow scheduler.)
"""

from __future__ import annotations

import argparse
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--nodes", type=int, default=0, help="nodes in the pool (default: room for all pods)")
    parser.add_argument("--binds", type=int, default=0, help="stop after this many binds (default: all pods)")
    parser.add_argument("--deadline", type=float, default=900.0, help="seconds to wait for the binds at most")
    args = parser.parse_args()
    wanted = args.binds or args.pods
    nodes = args.nodes or math.ceil(args.pods / 8 * 1.25) + 2

    from ttj.kubeapi import KubeClient
    from ttj_localcluster.cluster import LocalCluster
    from ttj_localcluster.nodes.fleet import NodeFleet
    from ttj_localcluster.nodes.pools import spot_t4_pool
    from ttj_localcluster.nodes.scheduler import Scheduler

    pool = spot_t4_pool(name="gpu-pool", nodes=nodes, gpus=8, cpu="96", memory="360Gi", machine_type="n1-standard-96")
    fleet = NodeFleet([pool], run_pods=False, pod_network=False)
    namespace = "bench"
    with LocalCluster(addons=[fleet]) as cluster:
        api = KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        api.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
        started = time.monotonic()

        def create(i: int) -> None:
            resources = {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"nvidia.com/gpu": "1"}}
            spec = {
                "containers": [{"name": "trainer", "image": "i", "resources": resources}],
                "nodeSelector": {"cloud.google.com/gke-nodepool": "gpu-pool"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            }
            api.create(f"/api/v1/namespaces/{namespace}/pods", {"metadata": {"name": f"p-{i:05d}"}, "spec": spec})

        with ThreadPoolExecutor(8) as pool_of_threads:
            list(pool_of_threads.map(create, range(args.pods)))
        print(f"{args.pods} pods created in {time.monotonic() - started:.1f}s on {nodes} nodes")

        bound_at: list[float] = []
        done = threading.Event()
        listing = api.request("GET", f"/api/v1/namespaces/{namespace}/pods?limit=1")
        version = str(listing["metadata"]["resourceVersion"])

        def watch() -> None:
            seen: set[str] = set()
            nonlocal version

            def saw(pod: dict[str, Any]) -> None:
                name = str((pod.get("metadata") or {}).get("name"))
                if (pod.get("spec") or {}).get("nodeName") and name not in seen:
                    seen.add(name)
                    bound_at.append(time.monotonic())
                    if len(seen) >= wanted:
                        done.set()

            while not done.is_set():
                for event in api.watch_events(f"/api/v1/namespaces/{namespace}/pods", version, timeout_seconds=30):
                    if event.get("type") == "ERROR":  # 410 Gone: list again and watch from there, as a reflector
                        relisted = api.request("GET", f"/api/v1/namespaces/{namespace}/pods")
                        for pod in relisted.get("items") or []:
                            saw(pod)
                        version = str(relisted["metadata"]["resourceVersion"])
                        break
                    obj = event.get("object") or {}
                    version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                    saw(obj)
                    if done.is_set():
                        return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        scheduler = Scheduler(seed=1)
        begin, cpu_begin = time.monotonic(), time.process_time()
        cluster.start_addons([scheduler])
        synced = time.monotonic()
        done.wait(args.deadline)
        cpu = time.process_time() - cpu_begin
        binds = len(bound_at)
        if not binds:
            print("no pod was bound")
            return
        elapsed = bound_at[-1] - begin
        print(f"scheduler started (informers synced) in {synced - begin:.1f}s")
        print(f"{binds} binds in {elapsed:.1f}s from the scheduler's start: {binds / elapsed:.1f} binds/s")
        # the API server, the kubelets and the scheduler share this process: its CPU time per bind is the
        # figure a busy machine (other processes on the cores) does not change
        print(f"CPU of this process meanwhile: {cpu:.1f}s, {binds / cpu:.1f} binds per CPU-second")
        if binds >= 20:
            tenth = binds // 10
            rates = []
            for part in range(10):
                chunk = bound_at[part * tenth : (part + 1) * tenth]
                rates.append(f"{(len(chunk) - 1) / max(chunk[-1] - chunk[0], 1e-9):.0f}")
            print(f"binds/s in each tenth of the binds: {' '.join(rates)}")
        api.close()


if __name__ == "__main__":
    main()
