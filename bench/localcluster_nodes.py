"""Local cluster nodes: how fast pods get scheduled and started, and how long a preemption takes.

    .venv/bin/python bench/localcluster_nodes.py [--pods 300] [--process-pods 8]

1. Simulated pods (no processes): a Deployment of N pods on 20 nodes; per pod, the time from the
   Deployment's creation until the pod is seen Running (client-side, through a watch).
2. Pods as processes (own network namespaces when root): M pods running `python -c` sleepers; the same
   latency, then a node preemption with its pods (SIGTERM honoured at once) until the Node is gone.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any

from ttj.kubeapi import KubeClient
from ttj_localcluster.cluster import LocalCluster
from ttj_localcluster.nodes.deployments import DeploymentController
from ttj_localcluster.nodes.fleet import NodeFleet
from ttj_localcluster.nodes.kube import Informer
from ttj_localcluster.nodes.pools import NodePool
from ttj_localcluster.nodes.scheduler import Scheduler


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def run_deployment(replicas: int, run_pods: bool, nodes: int) -> tuple[list[float], float | None]:
    pool = NodePool(name="cpu", nodes=nodes, cpu="64", memory="256Gi", grace=5.0, restore_after=None)
    fleet = NodeFleet([pool], run_pods=run_pods)
    with LocalCluster(addons=[fleet, Scheduler(seed=1), DeploymentController()]) as cluster:
        kube = KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        stop = threading.Event()
        running: dict[str, float] = {}
        done = threading.Event()
        pods = Informer(kube, "/api/v1/namespaces/default/pods", "bench", stop)

        def seen(_kind: str, pod: dict[str, Any], _old: dict[str, Any] | None) -> None:
            if pod.get("status", {}).get("phase") == "Running":
                running.setdefault(pod["metadata"]["name"], time.monotonic())
                if len(running) >= replicas:
                    done.set()

        pods.add_handler(seen)
        pods.start()
        pods.synced.wait(10)
        container = {"name": "c", "image": "x", "command": ["python", "-c", "import time; time.sleep(3600)"]}
        container["resources"] = {"requests": {"cpu": "100m"}}
        body = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "bench"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "bench"}},
                "template": {"metadata": {"labels": {"app": "bench"}}, "spec": {"containers": [container]}},
            },
        }
        started = time.monotonic()
        kube.request("POST", "/apis/apps/v1/namespaces/default/deployments", body=body)
        if not done.wait(300):
            raise SystemExit(f"only {len(running)}/{replicas} pods running after 300 s")
        latencies = [t - started for t in running.values()]
        preemption = None
        if run_pods:
            node = fleet.nodes_of("cpu")[0]
            begin = time.monotonic()
            fleet.preempt_node(node, wait=True)
            preemption = time.monotonic() - begin
        stop.set()
        kube.close()
    return latencies, preemption


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pods", type=int, default=300)
    parser.add_argument("--process-pods", type=int, default=8)
    args = parser.parse_args()
    simulated, _ = run_deployment(args.pods, run_pods=False, nodes=20)
    print(f"simulated pods: {args.pods} on 20 nodes, all Running after {max(simulated):.2f} s")
    print(
        f"  time to Running p50 {percentile(simulated, 0.5):.2f} s, p90 {percentile(simulated, 0.9):.2f} s,"
        f" p99 {percentile(simulated, 0.99):.2f} s; {args.pods / max(simulated):.0f} pods/s"
    )
    real, preemption = run_deployment(args.process_pods, run_pods=True, nodes=2)
    print(f"process pods: {args.process_pods} on 2 nodes, all Running after {max(real):.2f} s")
    print(
        f"  time to Running p50 {percentile(real, 0.5):.2f} s, p90 {percentile(real, 0.9):.2f} s,"
        f" mean {statistics.mean(real):.2f} s"
    )
    print(f"  preempting a node with its pods (SIGTERM → Failed → Node deleted): {preemption:.2f} s")


if __name__ == "__main__":
    main()
