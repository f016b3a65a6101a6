"""`ttj local-cluster` start-up: how long until its kubeconfig exists and until its default nodes are Ready.

    .venv/bin/python bench/localcluster_startup.py [--starts 10] [-- extra ttj local-cluster options]

Each start runs the real command (`python -m ttj local-cluster --kubeconfig PATH`, a fresh interpreter) and
measures, from the moment the process is spawned:
  kubeconfig  the file exists (it is written once the API answers),
  api         a GET /version through it answers,
  nodes       every node of the default pools is registered and Ready (/api/v1/nodes polled every 5 ms),
then SIGTERM and the time the command takes to stop. Prints percentiles over all starts.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

POLL_S = 0.005


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def server_of(kubeconfig: Path) -> str:
    for line in kubeconfig.read_text(encoding="utf-8").splitlines():
        if line.strip().startswith("server:"):
            value = line.split(":", 1)[1].strip()
            return str(json.loads(value)) if value.startswith('"') else value
    raise RuntimeError(f"no server in {kubeconfig}")


def ready_nodes(url: str) -> int:
    with urllib.request.urlopen(f"{url}/api/v1/nodes", timeout=5) as response:
        nodes = json.load(response)["items"]
    return sum(
        1
        for node in nodes
        if any(c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", []))
    )


def one_start(extra: list[str], expected_nodes: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="ttj-bench-") as workdir:
        kubeconfig = Path(workdir) / "kubeconfig"
        command = [sys.executable, "-m", "ttj", "local-cluster", "--kubeconfig", str(kubeconfig), *extra]
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        times: dict[str, float] = {}
        try:
            while not kubeconfig.exists():
                if process.poll() is not None:
                    raise RuntimeError(
                        f"ttj local-cluster exited: {process.stderr.read().decode() if process.stderr else ''}"
                    )
                time.sleep(POLL_S)
            times["kubeconfig"] = time.perf_counter() - started
            url = server_of(kubeconfig)
            with urllib.request.urlopen(f"{url}/version", timeout=5):
                times["api"] = time.perf_counter() - started
            deadline = time.monotonic() + 60
            while ready_nodes(url) < expected_nodes:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"fewer than {expected_nodes} Ready nodes after 60 s")
                time.sleep(POLL_S)
            times["nodes"] = time.perf_counter() - started
        finally:
            stopping = time.perf_counter()
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
            times["stop"] = time.perf_counter() - stopping
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--nodes", type=int, default=None, help="nodes to wait for [those of the default pools]")
    parser.add_argument("extra", nargs="*", help="options passed to ttj local-cluster (after --)")
    args = parser.parse_args()
    if args.nodes is None:
        from ttj_localcluster.nodes.pools import default_pools

        args.nodes = sum(pool.nodes for pool in default_pools())
    runs = [one_start(args.extra, args.nodes) for _ in range(args.starts)]
    print(f"ttj local-cluster {' '.join(args.extra)}: {args.starts} starts, {args.nodes} nodes, {os.cpu_count()} CPUs")
    print(f"{'seconds from spawn':<22}{'p50':>8}{'p90':>8}{'min':>8}{'max':>8}{'mean':>8}")
    for key in ("kubeconfig", "api", "nodes", "stop"):
        values = [run[key] for run in runs]
        print(
            f"{key:<22}{percentile(values, 0.5):8.3f}{percentile(values, 0.9):8.3f}{min(values):8.3f}"
            f"{max(values):8.3f}{statistics.fmean(values):8.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
