"""The operator at scale, end to end: ONE real ``ttj operator`` process, N jobs of 8 workers on the local
cluster (real API server, scheduler, Deployment controller and node fleet; pods simulated).

Measures, from the pod watch of this process (both ends of each interval seen the same way):
- preemption seen → replacement pod created: from the first event showing a worker lost (Failed or
  DisruptionTarget) to the ADDED event of the pod that takes its slot;
- chief lost → new chief labelled: from the first event showing the chief lost to the event where
  another worker of the job carries ``transient.training/chief=true``;
- both again from the event where the lost pod stopped (phase Failed, or deleted): a worker being
  stopped (DisruptionTarget) keeps its slot, and a chief stays chief, until its container has stopped
  (its SIGTERM checkpoint), so the first pair includes the node's graceful shutdown and the second is the
  operator's own reaction;
and the operator process's memory (RSS now, and its peak). Nodes of the spot pool (8 T4s each) are
preempted one by one, as GKE does, while every job runs; a preempted worker's container exits at its SIGTERM,
or ``--stop-seconds`` later (a trainer writing its checkpoint: then the chief's stop comes after the pass that
replaced it, as on GKE). The chief's Lease is not renewed (no trainer
runs), so the operator runs with a long ``--chief-startup``.

Also, per phase (the start-up, ``--steady`` seconds with nothing happening, the preemptions): the operator's CPU
seconds and the API server's, told apart (each in its own process; /proc/PID/stat), the operator's API writes
and reads (its own client's and kopf's, counted by the local API server per User-Agent), the jobs' MODIFIED
events, and the same per job-minute; for the start-up, when each job's last pod became ready against when the
job showed Running (what the operator adds to the start-up); the operator's RSS before the first job and at its
peak, and the difference per job.

Run: .venv/bin/python bench/operator_scale.py --jobs 100 [--preemptions 10] [--stop-seconds 0|1] [--deadline 900]
It stops by itself: at ``--deadline`` seconds everything is torn down and what was measured is printed.
``--curve 100,250,500,1000`` runs once per size, each with a fresh cluster and operator and a minute of
``--steady`` phase, the preemptions scaled so that every job sees the rate ``--jobs``/``--preemptions``/
``--interval`` give, and prints the cost per job at each size in one table (CPU s and API writes per job for
the start-up, per job-minute for the steady phase and the preemptions; memory per job).
``--profile DIR`` records the operator with py-spy (``--py-spy``, default: the one on PATH or beside this
Python) through the start-up and the preemptions into DIR/start-up.txt and DIR/preemption.txt (collapsed
stacks, one line per stack and thread, with its sample count; idle threads too, their stacks ending in a
wait), and writes DIR/dump.txt (every thread's stack) at the end. With ``--heap`` too, the operator traces its
allocations and writes what holds its memory to DIR/heap.txt after the start-up and at the end.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ttj_contract import (
    API_VERSION,
    GPU_RESOURCE,
    GROUP,
    KIND,
    LABEL_CHIEF,
    LABEL_JOB,
    LABEL_ROLE,
    LABEL_SLOT,
    PLURAL,
    VERSION,
    Role,
)

ROOT = Path(__file__).resolve().parents[1]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def job_pods_selector() -> str:
    """Every job's pods: workers and parameter servers."""
    return LABEL_JOB


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds a process has used (utime + stime of /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def nodes_for(pods: int, requests: Mapping[str, str], pool: Any, headroom: float = 1.25) -> int:
    """Nodes of ``pool`` (a NodePool) that hold ``pods`` pods of these requests, with ``headroom`` to spare:
    what fits one node by each resource it requests, and by the node's pod limit."""
    from ttj_contract.quantity import parse_quantity

    allocatable = {"cpu": pool.cpu, "memory": pool.memory, GPU_RESOURCE: str(pool.gpus)}
    fits = [
        int(parse_quantity(allocatable[name]) // parse_quantity(q))
        for name, q in requests.items()
        if name in allocatable
    ]
    per_node = min([pool.max_pods, *fits])
    if per_node < 1:
        raise SystemExit(f"pool {pool.name}: one node cannot hold a pod requesting {dict(requests)}")
    return math.ceil(pods / per_node * headroom) + 1


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process in KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields.get("VmRSS", "0 kB").split()[0]), int(fields.get("VmHWM", "0 kB").split()[0])


class PodLog:
    """Watches the jobs' pods and keeps, per pod, when it was added, became ready, was lost, and was labelled
    chief."""

    def __init__(self, api: Any, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.added: dict[str, float] = {}
        self.lost: dict[str, float] = {}
        self.stopped: dict[str, float] = {}
        self.chief_at: dict[str, float] = {}
        self.ready: dict[str, float] = {}
        self.job_of: dict[str, str] = {}
        self.slot: dict[str, tuple[str, str]] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from kubernetes import client, watch

        core = client.CoreV1Api(self.api)
        version = core.list_namespaced_pod(self.namespace, limit=1).metadata.resource_version
        while not self.stop.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(
                    core.list_namespaced_pod,
                    self.namespace,
                    label_selector=job_pods_selector(),
                    resource_version=version,
                    timeout_seconds=30,
                    deserialize=False,  # plain JSON: model objects cost this process CPU the cluster shares
                ):
                    now = time.monotonic()
                    pod = event["object"]
                    version = pod["metadata"]["resourceVersion"]
                    self._record(event["type"], pod, now)
                    if self.stop.is_set():
                        stream.stop()
                        break
            except Exception as exc:  # a watch that ends (410 or a blip) starts again from a fresh list
                print(f"pod watch: {exc}", file=sys.stderr)
                version = core.list_namespaced_pod(self.namespace, limit=1).metadata.resource_version

    def _record(self, kind: str, pod: dict[str, Any], now: float) -> None:
        name = pod["metadata"]["name"]
        labels = pod["metadata"].get("labels") or {}
        status = pod.get("status") or {}
        if labels.get(LABEL_ROLE) == Role.WORKER:
            self.slot.setdefault(name, (labels.get(LABEL_JOB, ""), labels.get(LABEL_SLOT, "")))
        if kind == "ADDED":
            self.added.setdefault(name, now)
        conditions = status.get("conditions") or []
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            self.ready.setdefault(name, now)
        self.job_of.setdefault(name, labels.get(LABEL_JOB, ""))
        disrupted = any(c.get("type") == "DisruptionTarget" and c.get("status") == "True" for c in conditions)
        failed = status.get("phase") == "Failed"
        if (failed or disrupted) and name not in self.lost:
            self.lost[name] = now
        if (failed or kind == "DELETED") and name not in self.stopped:
            self.stopped[name] = now
        if labels.get(LABEL_CHIEF) == "true" and name not in self.chief_at:
            self.chief_at[name] = now


class JobLog:
    """Watches the jobs: counts their MODIFIED events (in this benchmark, the operator's status writes and kopf's
    own annotations: a count that, unlike latencies, hardly depends on how busy the machine is) and keeps when
    each job first showed phase Running."""

    def __init__(self, api: Any, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.modified = 0
        self.phase: dict[str, str] = {}
        self.running_at: dict[str, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def running(self) -> int:
        return sum(phase == "Running" for phase in self.phase.values())

    def _run(self) -> None:
        from kubernetes import client, watch

        custom = client.CustomObjectsApi(self.api)
        listed = custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, limit=1)
        version = listed["metadata"]["resourceVersion"]
        while not self.stop.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(
                    custom.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    self.namespace,
                    PLURAL,
                    resource_version=version,
                    timeout_seconds=30,
                ):
                    now = time.monotonic()
                    job = event["object"]
                    version = job["metadata"]["resourceVersion"]
                    name, phase = job["metadata"]["name"], (job.get("status") or {}).get("phase", "")
                    self.phase[name] = phase
                    if phase == "Running":
                        self.running_at.setdefault(name, now)
                    if event["type"] == "MODIFIED":
                        self.modified += 1
                    if self.stop.is_set():
                        stream.stop()
                        break
            except Exception as exc:  # as the pod watch: start again from a fresh list
                print(f"job watch: {exc}", file=sys.stderr)
                listed = custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, limit=1)
                version = listed["metadata"]["resourceVersion"]


def intervals(pods: PodLog, moments: Mapping[str, float], chiefs_before: set[str]) -> tuple[list[float], list[float]]:
    """From each lost pod's moment to the pod that took its slot, and (for a chief) to the next chief."""
    recovery, handover = [], []
    by_slot: dict[tuple[str, str], list[str]] = {}
    for name, key in pods.slot.items():
        by_slot.setdefault(key, []).append(name)
    for name, lost_at in moments.items():
        key = pods.slot.get(name)
        if key is None or name not in pods.lost:
            continue
        first_seen = pods.lost[name]
        later = [pods.added[n] for n in by_slot.get(key, []) if n != name and pods.added.get(n, 0) > first_seen - 5]
        if later:
            recovery.append(max(0.0, min(later) - lost_at))
        if name in chiefs_before or name in pods.chief_at:
            job = key[0]
            new = [t for n, t in pods.chief_at.items() if n != name and pods.slot.get(n, ("", ""))[0] == job]
            new = [t for t in new if t >= first_seen]
            if new:
                handover.append(max(0.0, min(new) - lost_at))
    return recovery, handover


def summary(values: list[float]) -> str:
    if not values:
        return "no samples"
    p50, p90, p99 = (percentile(values, q) for q in (50, 90, 99))
    return (
        f"n={len(values)} p50={p50 * 1000:.0f} ms p90={p90 * 1000:.0f} ms p99={p99 * 1000:.0f} ms "
        f"max={max(values) * 1000:.0f} ms mean={statistics.mean(values) * 1000:.0f} ms"
    )


def progress(core: Any, namespace: str, phases: dict[str, str]) -> str:
    """Where start-up stands: jobs per phase, and pods per role and state (a slow stage shows as a pile-up)."""
    jobs: dict[str, int] = {}
    for phase in phases.values():
        jobs[phase or "-"] = jobs.get(phase or "-", 0) + 1
    pods: dict[str, int] = {}
    for pod in core.list_namespaced_pod(namespace).items:
        role = (pod.metadata.labels or {}).get(LABEL_ROLE, "other")
        ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
        state = "ready" if ready else (pod.status.phase or "?") if pod.spec.node_name else "unbound"
        pods[f"{role}:{state}"] = pods.get(f"{role}:{state}", 0) + 1
    return f"jobs {dict(sorted(jobs.items()))} pods {dict(sorted(pods.items()))}"


def bench_pools(jobs: int, workers: int, stop_seconds: float = 0.0) -> list[Any]:
    """The node pools, sized from the requests the operator gives pods whose spec names none (one PS per job,
    one GPU per worker); a preempted worker's container exits ``stop_seconds`` after its SIGTERM."""
    from ttj.planner.children import DEFAULT_PS_REQUESTS, DEFAULT_WORKER_REQUESTS
    from ttj_localcluster.nodes.pools import NodePool, spot_t4_pool

    cpu_pool = NodePool(name="cpu-pool", cpu="16", memory="60Gi")
    gpu_pool = spot_t4_pool(
        name="gpu-pool",
        gpus=8,
        cpu="96",
        memory="360Gi",
        machine_type="n1-standard-96",
        stop_seconds=stop_seconds,
        restore_after=None,
    )
    worker_requests = {**DEFAULT_WORKER_REQUESTS, GPU_RESOURCE: "1"}
    return [
        replace(cpu_pool, nodes=max(2, nodes_for(jobs, DEFAULT_PS_REQUESTS, cpu_pool))),
        replace(gpu_pool, nodes=nodes_for(jobs * workers, worker_requests, gpu_pool)),
    ]


def cluster_part(part: str, pools: list[Any]) -> list[Any]:
    """The add-ons of one part of the local cluster: ``control`` (scheduler, Deployment controller) or
    ``nodes`` (the node fleet: kubelets, pods simulated)."""
    from ttj_localcluster.nodes.deployments import DeploymentController
    from ttj_localcluster.nodes.fleet import NodeFleet
    from ttj_localcluster.nodes.scheduler import Scheduler

    if part == "control":
        return [Scheduler(seed=1), DeploymentController()]
    return [NodeFleet(pools, run_pods=False, pod_network=False)]


def serve_part(part: str, kubeconfig: str, pools: list[Any]) -> int:
    """One part of the local cluster in this process (``--serve``): ``api`` serves the API and writes the
    kubeconfig; the others attach to it. Prints "ready" once started, and stops when its stdin closes (the
    benchmark ended, however it ended)."""
    from ttj_localcluster.cluster import LocalCluster

    cluster = LocalCluster(kubeconfig_path=kubeconfig) if part == "api" else None
    addons = [] if cluster is not None else cluster_part(part, pools)
    if cluster is not None:
        cluster.start()
    for addon in addons:
        addon.start(kubeconfig)
    print("ready", flush=True)
    try:
        sys.stdin.read()
    finally:
        for addon in reversed(addons):
            addon.stop()
        if cluster is not None:
            cluster.stop()
    return 0


class SeparateCluster:
    """The local cluster as three processes (API server; scheduler and Deployment controller; node fleet),
    so that neither the operator's round trips nor its CPU share a GIL with the kubelets of a hundred nodes.
    Preemptions go through the fleet's control server."""

    def __init__(self, jobs: int, workers: int, stop_seconds: float, directory: Path) -> None:
        self.kubeconfig_path = str(directory / "kubeconfig")
        self.processes: list[subprocess.Popen[str]] = []
        sizing = ["--jobs", str(jobs), "--workers", str(workers), "--stop-seconds", str(stop_seconds)]
        sizing += ["--kubeconfig", self.kubeconfig_path]
        try:
            for part in ("api", "control", "nodes"):
                with open(directory / f"{part}.log", "w") as log:
                    child = subprocess.Popen(
                        [sys.executable, __file__, "--serve", part, *sizing],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=log,
                        text=True,
                    )
                self.processes.append(child)
                if child.stdout is None or child.stdout.readline().strip() != "ready":
                    raise SystemExit(f"the cluster's {part} process did not start: see {directory / f'{part}.log'}")
        except BaseException:
            self.stop()
            raise
        from ttj_localcluster.nodes.control import ControlClient

        self.control = ControlClient.from_kubeconfig(self.kubeconfig_path)

    def nodes_of(self, pool: str) -> list[str]:
        return list(self.control.status()["pools"][pool]["nodes"])

    def api_pid(self) -> int | None:
        return self.processes[0].pid

    def preempt_node(self, node: str) -> None:
        self.control.preempt_node(node)

    def stop(self) -> None:
        for child in reversed(self.processes):
            if child.stdin is not None:
                child.stdin.close()
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                child.kill()


class InlineCluster:
    """The local cluster in this process, API server, scheduler, controllers and kubelets in one (as before)."""

    def __init__(self, pools: list[Any]) -> None:
        from ttj_localcluster.cluster import LocalCluster

        self.fleet, *others = [*cluster_part("nodes", pools), *cluster_part("control", pools)]
        self.cluster = LocalCluster(addons=[self.fleet, *others]).start()
        self.kubeconfig_path = self.cluster.kubeconfig_path

    def nodes_of(self, pool: str) -> list[str]:
        return list(self.fleet.nodes_of(pool))

    def api_pid(self) -> int | None:
        """None: the API server shares this process, its CPU is not told apart."""
        return None

    def preempt_node(self, node: str) -> None:
        self.fleet.preempt_node(node)

    def stop(self) -> None:
        self.cluster.stop()


def create_jobs(custom: Any, namespace: str, jobs: int, workers: int) -> None:
    for i in range(jobs):
        custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "metadata": {"name": f"job-{i}"},
                "spec": {
                    "trainSteps": 64000,
                    "checkpoint": {"uri": "/tmp/bench"},
                    "workers": {"replicas": workers, "minReplicas": 1},
                },
            },
        )


def start_operator(
    kubeconfig: str, namespace: str, log_path: Path, verbose: bool, heap: Path | None = None
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "KUBECONFIG": kubeconfig} | ({"TTJ_HEAP_SUMMARY": str(heap)} if heap is not None else {})
    command = [sys.executable, "-m", "ttj", "operator", "-n", namespace, "--metrics-port", "0"]
    command += ["--liveness", "none", "--chief-startup", "36000", "--node-grace", "5", "--no-placement-check"]
    command += ["--verbose"] if verbose else []
    with open(log_path, "wb") as log:
        return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)


@dataclass(frozen=True)
class Meter:
    """What the operator and the API server had used at one moment: CPU seconds of each process, the operator's
    requests (its own client's and kopf's, counted by the local API server per User-Agent), and the jobs'
    MODIFIED events."""

    at: float
    operator_cpu: float
    api_cpu: float | None
    writes: int
    reads: int
    job_events: int
    #: the operator's requests by "METHOD resource"
    by_resource: Mapping[str, int]


#: The operator's clients as the local API server counts them (their User-Agents' product names).
OPERATOR_CLIENTS = ("ttj-operator", "kopf")


@dataclass(frozen=True)
class Phase:
    name: str
    before: Meter
    after: Meter
    jobs: int

    @property
    def seconds(self) -> float:
        return self.after.at - self.before.at

    def line(self) -> str:
        seconds = self.seconds
        # the start-up per job (it takes what it takes), the other phases per job-minute
        units, per = (self.jobs, "job") if self.name == "start-up" else (self.jobs * seconds / 60, "job-minute")
        operator_cpu = self.after.operator_cpu - self.before.operator_cpu
        writes = self.after.writes - self.before.writes
        reads = self.after.reads - self.before.reads
        events = self.after.job_events - self.before.job_events
        api = (
            f"{self.after.api_cpu - self.before.api_cpu:.1f} s"
            if self.after.api_cpu is not None and self.before.api_cpu is not None
            else "n/a (inline cluster)"
        )
        return (
            f"phase {self.name}: {seconds:.1f} s; operator CPU {operator_cpu:.1f} s, API server CPU {api}; "
            f"operator API writes {writes}, reads {reads}; job MODIFIED events {events}; per {per}: "
            f"operator CPU {operator_cpu / units:.3f} s, API writes {writes / units:.2f}\n"
            f"  its requests: {self.requests()}"
        )

    def requests(self) -> str:
        made = {k: n - self.before.by_resource.get(k, 0) for k, n in self.after.by_resource.items()}
        return ", ".join(f"{k} {n}" for k, n in sorted(made.items(), key=lambda kv: -kv[1]) if n)


@dataclass
class Run:
    """One benchmark run against a started cluster and operator."""

    args: argparse.Namespace
    cluster: SeparateCluster | InlineCluster
    operator: subprocess.Popen[bytes]
    api: Any
    core: Any
    custom: Any
    namespace: str
    deadline: float
    pods: PodLog
    jobs: JobLog
    peak_rss: int = 0
    idle_rss: int = 0

    def sample_rss(self) -> None:
        self.peak_rss = max(self.peak_rss, rss_kib(self.operator.pid)[0])

    def meter(self) -> Meter:
        from ttj.kubeapi import KubeClient

        answer = KubeClient(self.api).request("GET", "/ttj-local/requests")
        counts, by_resource = answer["requests"], answer["byResource"]
        ours = [methods for client, methods in counts.items() if client in OPERATOR_CLIENTS]
        requests: dict[str, int] = {}
        for client in OPERATOR_CLIENTS:
            for what, n in by_resource.get(client, {}).items():
                requests[f"{client} {what}"] = n
        writes = sum(n for methods in ours for method, n in methods.items() if method not in ("GET", "HEAD"))
        reads = sum(n for methods in ours for method, n in methods.items() if method in ("GET", "HEAD"))
        api_pid = self.cluster.api_pid()
        return Meter(
            at=time.monotonic(),
            operator_cpu=cpu_seconds(self.operator.pid),
            api_cpu=cpu_seconds(api_pid) if api_pid is not None else None,
            writes=writes,
            reads=reads,
            job_events=self.jobs.modified,
            by_resource=requests,
        )

    def start_up(self) -> Phase:
        """Create the jobs; until every one is Running (or the deadline)."""
        self.idle_rss = rss_kib(self.operator.pid)[0]
        profile = self.profile("start-up")
        try:
            return self._start_up()
        finally:
            stop_profile(profile)

    def _start_up(self) -> Phase:
        before = self.meter()
        create_jobs(self.custom, self.namespace, self.args.jobs, self.args.workers)
        shown = before.at
        while time.monotonic() < self.deadline and self.jobs.running() < self.args.jobs:
            self.sample_rss()
            if time.monotonic() - shown >= self.args.progress:
                shown = time.monotonic()
                print(
                    f"  {shown - before.at:6.1f}s  {progress(self.core, self.namespace, self.jobs.phase)}", flush=True
                )
            time.sleep(0.5)
        after = self.meter()
        self.sample_rss()
        print(
            f"{self.jobs.running()} of {self.args.jobs} jobs x {self.args.workers} workers Running after "
            f"{after.at - before.at:.1f}s",
            flush=True,
        )
        print(start_up_lag(self.pods, self.jobs, before.at), flush=True)
        return Phase("start-up", before, after, self.args.jobs)

    def steady(self, seconds: float) -> Phase:
        """Every job Running, nothing happening: what running jobs cost by themselves (resyncs, cost accrual)."""
        before = self.meter()
        end = min(self.deadline, before.at + seconds)
        while time.monotonic() < end:
            self.sample_rss()
            time.sleep(1)
        return Phase("steady", before, self.meter(), self.args.jobs)

    def preemptions(self) -> tuple[Phase, set[str], int]:
        """Preempt spot nodes one by one while the pod watch records; the phase, the chiefs before, the nodes."""
        profile = self.profile("preemption")
        try:
            return self._preemptions()
        finally:
            stop_profile(profile)

    def profile(self, phase: str) -> subprocess.Popen[bytes] | None:
        """py-spy sampling the operator (100 Hz, every thread, the interpreter not paused) until interrupted."""
        if self.args.profile is None:
            return None
        self.args.profile.mkdir(parents=True, exist_ok=True)
        command = [self.args.py_spy, "record", "--pid", str(self.operator.pid), "--rate", "100", "--threads", "--idle"]
        command += ["--nonblocking", "--format", "raw", "-o", str(self.args.profile / f"{phase}.txt")]
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def heap_summary(self) -> None:
        """With ``--heap``: the operator appends what holds its memory to DIR/heap.txt (see ttj.controller.heap)."""
        if self.args.profile is not None and self.args.heap:
            self.operator.send_signal(signal.SIGUSR1)
            time.sleep(5)

    def dump(self) -> None:
        """Every thread's stack now, into the profile's directory."""
        if self.args.profile is not None:
            with open(self.args.profile / "dump.txt", "wb") as out:
                subprocess.run([self.args.py_spy, "dump", "--pid", str(self.operator.pid)], stdout=out, check=False)

    def _preemptions(self) -> tuple[Phase, set[str], int]:
        chiefs_before = {
            p.metadata.name
            for p in self.core.list_namespaced_pod(self.namespace, label_selector=f"{LABEL_CHIEF}=true").items
        }
        before = self.meter()
        victims = self.cluster.nodes_of("gpu-pool")[: self.args.preemptions]
        for node in victims:
            if time.monotonic() > self.deadline:
                break
            self.cluster.preempt_node(node)
            time.sleep(self.args.interval)
        while time.monotonic() < self.deadline and self.jobs.running() < self.args.jobs:
            self.sample_rss()
            time.sleep(0.5)
        after = self.meter()
        time.sleep(2)  # the last events of the phase reach the watches
        print(
            f"job writes (MODIFIED events) from the first preemption until every job ran again: "
            f"{after.job_events - before.job_events}"
        )
        return Phase("preemptions", before, after, self.args.jobs), chiefs_before, len(victims)


def stop_profile(profile: subprocess.Popen[bytes] | None) -> None:
    if profile is not None:
        profile.send_signal(signal.SIGINT)  # py-spy writes what it sampled, then exits
        profile.wait(60)


def start_up_lag(pods: PodLog, jobs: JobLog, started: float) -> str:
    """When the jobs' pods were all ready, against when their jobs showed Running: the operator's own share of
    the start-up."""
    last_ready: dict[str, float] = {}
    for name, at in pods.ready.items():
        job = pods.job_of.get(name, "")
        last_ready[job] = max(last_ready.get(job, 0.0), at)
    lags = [jobs.running_at[job] - at for job, at in last_ready.items() if job in jobs.running_at]
    if not last_ready or not jobs.running_at:
        return "start-up: no job ran"
    return (
        f"start-up: every pod ready after {max(last_ready.values()) - started:.1f}s, every job Running after "
        f"{max(jobs.running_at.values()) - started:.1f}s; a job's last pod ready -> the job Running: {summary(lags)}"
    )


def _clock(epoch: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(epoch)) + f"{epoch % 1:.3f}"[1:]


def slowest_replacements(pods: PodLog, count: int = 5) -> list[str]:
    """The lost workers whose replacement came last after their loss was seen: the pod, its job, and when (the time
    of day, as the operator's log gives it) it was seen lost, stopped and replaced, to find them in that log."""
    wall = time.time() - time.monotonic()
    rows = []
    for name, seen in pods.lost.items():
        job, slot = pods.slot.get(name, ("", ""))
        slot_pods = [n for n, key in pods.slot.items() if key == (job, slot) and n != name]
        later = [pods.added[n] for n in slot_pods if pods.added.get(n, 0) > seen - 5]
        if later:
            stopped = pods.stopped.get(name)
            rows.append((min(later) - seen, name, job, seen, stopped, min(later)))
    return [
        f"{name} ({job}): replaced {delay * 1000:.0f} ms after seen lost at {_clock(seen + wall)}"
        + (f", stopped at {_clock(stopped + wall)}" if stopped is not None else "")
        for delay, name, job, seen, stopped, _added in sorted(rows, reverse=True)[:count]
    ]


def report(pods: PodLog, chiefs_before: set[str], preempted: int) -> None:
    """Pair each lost worker with the pod that took its slot, and each lost chief with the next chief."""
    print(f"preempted nodes: {preempted}; workers lost: {len(pods.lost)}")
    for line in slowest_replacements(pods):
        print(f"  slow: {line}")
    for since, moments in (("seen", pods.lost), ("stopped", pods.stopped)):
        recovery, handover = intervals(pods, moments, chiefs_before)
        for label, values in (
            (f"preemption {since} -> replacement created", recovery),
            (f"chief {since} -> new chief", handover),
        ):
            print(f"{label}: {summary(values)}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--preemptions", type=int, default=10, help="spot nodes preempted one after another")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between preemptions")
    parser.add_argument(
        "--stop-seconds",
        type=float,
        default=0.0,
        help="seconds a preempted worker's container takes to exit after SIGTERM, as a trainer writing its "
        "checkpoint does (within GKE's 15 s) [%(default)s: at once]",
    )
    parser.add_argument(
        "--steady",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="after the start-up, measure this long with nothing happening [%(default)s; 60 with --curve]",
    )
    parser.add_argument(
        "--curve",
        metavar="N,N,...",
        help="one run per number of jobs (a fresh cluster and operator each), the preemptions scaled to keep each "
        "job's preemption rate that of --jobs (--preemptions nodes every --interval s at --jobs jobs); prints the "
        "cost per job at each size",
    )
    parser.add_argument("--progress", type=float, default=10.0, help="seconds between start-up progress lines")
    parser.add_argument("--operator-verbose", action="store_true", help="the operator logs at debug level")
    parser.add_argument(
        "--deadline", type=float, default=900.0, help="stop a run after this many seconds, whatever state"
    )
    parser.add_argument(
        "--cluster",
        choices=("processes", "inline"),
        default="processes",
        help="processes: the API server, the scheduler and controllers, and the nodes each run in a process of "
        "their own; inline: all in this process [%(default)s]",
    )
    parser.add_argument(
        "--profile", type=Path, metavar="DIR", help="profile the operator with py-spy into DIR (see above)"
    )
    parser.add_argument(
        "--heap", action="store_true", help="with --profile: the operator traces its allocations (slower) into DIR"
    )
    beside = str(Path(sys.executable).with_name("py-spy"))
    parser.add_argument("--py-spy", default=shutil.which("py-spy") or beside, help=argparse.SUPPRESS)
    parser.add_argument("--serve", choices=("api", "control", "nodes"), help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    return parser.parse_args()


@dataclass(frozen=True)
class Outcome:
    """What one run measured, for the curve."""

    jobs: int
    phases: list[Phase]
    idle_rss_kib: int
    peak_rss_kib: int


def run_once(args: argparse.Namespace) -> Outcome:
    """One run: a fresh cluster and operator, the start-up, the steady phase when asked, the preemptions."""
    deadline = time.monotonic() + args.deadline

    from kubernetes import client, config
    from tests.e2e.operator_support import install_crd

    pools = bench_pools(args.jobs, args.workers, args.stop_seconds)
    print(
        f"== {args.jobs} jobs x {args.workers} workers, {args.preemptions} preemptions every {args.interval:g} s, "
        f"--stop-seconds {args.stop_seconds:g}; pools: {', '.join(f'{p.name} x{p.nodes}' for p in pools)}; "
        f"cluster: {args.cluster}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        flush=True,
    )
    namespace = "bench"
    logs = Path(tempfile.mkdtemp(prefix="ttj-operator-scale-"))
    if args.cluster == "processes":
        cluster: SeparateCluster | InlineCluster = SeparateCluster(args.jobs, args.workers, args.stop_seconds, logs)
    else:
        cluster = InlineCluster(pools)
    operator: subprocess.Popen[bytes] | None = None
    phases: list[Phase] = []
    try:
        api = config.new_client_from_config(config_file=cluster.kubeconfig_path)
        install_crd(api)
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        core.create_namespace({"metadata": {"name": namespace}})
        pods, jobs = PodLog(api, namespace), JobLog(api, namespace)
        pods.thread.start()
        jobs.thread.start()
        heap = args.profile / "heap.txt" if args.profile is not None and args.heap else None
        verbose = args.operator_verbose
        operator = start_operator(cluster.kubeconfig_path, namespace, logs / "operator.log", verbose, heap)
        time.sleep(3)  # the operator lists and watches before the first job comes
        run = Run(args, cluster, operator, api, core, custom, namespace, deadline, pods, jobs)
        phases.append(run.start_up())
        run.heap_summary()
        if args.steady > 0:
            phases.append(run.steady(args.steady))
        preemption, chiefs_before, preempted = run.preemptions()
        phases.append(preemption)
        rss, hwm = rss_kib(operator.pid)
        run.dump()
        run.heap_summary()
        pods.stop.set()
        jobs.stop.set()
        api.close()
    finally:
        if operator is not None:
            operator.terminate()
            try:
                operator.wait(15)
            except subprocess.TimeoutExpired:
                operator.kill()
        cluster.stop()
    report(pods, chiefs_before, preempted)
    for phase in phases:
        print(phase.line())
    peak = max(hwm, run.peak_rss)
    print(
        f"operator RSS: {rss / 1024:.0f} MiB now, peak {peak / 1024:.0f} MiB (VmHWM), "
        f"{run.idle_rss / 1024:.0f} MiB before the first job; per job {(peak - run.idle_rss) / args.jobs:.0f} KiB"
    )
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"operator log: {logs / 'operator.log'}", flush=True)
    return Outcome(args.jobs, phases, run.idle_rss, peak)


def curve(args: argparse.Namespace, sizes: list[int]) -> None:
    """One run per size, each job preempted at the rate --jobs/--preemptions/--interval set; then the cost per
    job at each size, side by side."""
    outcomes = []
    for jobs in sizes:
        scale = jobs / args.jobs
        preemptions = max(1, round(args.preemptions * scale))
        # the same phase length at every size: each job sees the same preemption rate
        interval = args.interval * args.preemptions / preemptions
        outcomes.append(run_once(replace_args(args, jobs=jobs, preemptions=preemptions, interval=interval)))
    print("\ncost per job: the start-up per job, the other phases per job-minute (jobs x the phase's minutes)")
    print(
        "| jobs | phase | per | operator CPU s | API server CPU s | operator API writes | memory per job (KiB) | "
        "peak RSS (MiB) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for outcome in outcomes:
        per_job = (outcome.peak_rss_kib - outcome.idle_rss_kib) / outcome.jobs
        for phase in outcome.phases:
            start_up = phase.name == "start-up"
            units = phase.jobs if start_up else phase.jobs * phase.seconds / 60
            operator_cpu = (phase.after.operator_cpu - phase.before.operator_cpu) / units
            api_cpu = (
                f"{(phase.after.api_cpu - phase.before.api_cpu) / units:.3f}"
                if phase.after.api_cpu is not None and phase.before.api_cpu is not None
                else "n/a"
            )
            writes = (phase.after.writes - phase.before.writes) / units
            print(
                f"| {outcome.jobs} | {phase.name} | {'job' if start_up else 'job-minute'} | {operator_cpu:.3f} | "
                f"{api_cpu} | {writes:.2f} | {per_job:.0f} | {outcome.peak_rss_kib / 1024:.0f} |"
            )
    rows = [row for outcome in outcomes if (row := start_up_less_steady(outcome)) is not None]
    if rows:
        print("\nthe start-up's operator CPU per job, less the steady rate over the minutes each job existed in it")
        print("| jobs | start-up | CPU s / job | steady CPU s / job-minute x minutes | less the steady |")
        print("|---|---|---|---|---|")
        print("\n".join(rows))


def start_up_less_steady(outcome: Outcome) -> str | None:
    """The start-up's operator CPU per job less what the steady phase's rate (CPU per job-minute: each job's timed
    pass) costs over the start-up's job-minutes (every job exists from its start): the part of the start-up's cost
    per job that is not the jobs merely existing for longer, at a size whose start-up the cluster makes longer."""
    phases = {phase.name: phase for phase in outcome.phases}
    start_up, steady = phases.get("start-up"), phases.get("steady")
    if start_up is None or steady is None or steady.seconds <= 0:
        return None
    rate = (steady.after.operator_cpu - steady.before.operator_cpu) / (steady.jobs * steady.seconds / 60)
    job_minutes = start_up.jobs * start_up.seconds / 60
    cpu = start_up.after.operator_cpu - start_up.before.operator_cpu
    return (
        f"| {outcome.jobs} | {start_up.seconds:.0f} s | {cpu / start_up.jobs:.3f} | {rate:.4f} x "
        f"{job_minutes / start_up.jobs:.1f} | {(cpu - rate * job_minutes) / start_up.jobs:.3f} |"
    )


def replace_args(args: argparse.Namespace, **changes: Any) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), **changes})


def main() -> int:
    args = parse_args()
    if args.serve:
        return serve_part(args.serve, args.kubeconfig, bench_pools(args.jobs, args.workers, args.stop_seconds))
    if args.curve:
        steady = args.steady or 60.0
        curve(replace_args(args, steady=steady), [int(n) for n in args.curve.split(",")])
        return 0
    run_once(args)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
