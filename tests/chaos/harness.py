"""The operator under chaos, with a checker watching the cluster the whole time.

A local cluster (real API server, scheduler, Deployment controller, node fleet; pods simulated, so no
TensorFlow runs) and two or more ``ttj operator --leader-elect`` processes. While the jobs run, a
seeded :class:`Chaos` injects API faults on every verb (409, 429 with Retry-After, 500, 503, 504, added
latency), drops watches, forces ``410 Gone`` re-lists (the server's watch caches restarted under the
watchers, as an apiserver restart does), SIGKILLs operator replicas at random moments (mostly the leader,
often in the middle of a pass: every write is slowed by the injected latency) and preempts the nodes of
workers, chiefs and parameter servers. Then the faults stop, the jobs settle, and are deleted.

The :class:`Checker` watches pods, Leases and jobs from its own connections and checks, at every event:

- never two live pods in one (job, slot); never two live pods of one job labelled chief;
- a job's epoch (its Lease's ``leaseTransitions`` and ``status.chief.epoch``) never goes back;
- the status counters never go back, and ``failures`` stays 0 (no code failure is injected);

and after the run: every job Running with all its workers, one chief (the Lease holder, labelled), its
counters equal to the ground truth (each lost worker a preemption and a replacement, each replaced
parameter server a preemption: as counters never go back, equal at the end means never above before),
and once the jobs are deleted, no pod left. Ground truth is what the checker saw happen: a worker pod
Failed or marked DisruptionTarget, a new parameter server pod. (A lost worker cannot slip past it: the
operator's finalizer holds it until the loss is counted. A PS pod that never ran held no model state, and
is no loss, for the operator as for the checker.)

Pass or fail never depends on timing: every wait is for a state, with a generous bound.

Where it runs is a site (:mod:`tests.chaos.sites`): the local cluster above, or an existing cluster (a real
kube-apiserver with etcd) with a nodes-only fleet, where the faults are what a proxy and restarts give.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from ttj_contract import ANNOTATION_DELETED, LABEL_CHIEF, LABEL_JOB, LABEL_ROLE, LABEL_SLOT

log = logging.getLogger("ttj.chaos")

GROUP, VERSION, PLURAL = "transient.training", "v1alpha1", "transienttrainingjobs"
LEADER_LEASE = "ttj-operator-leader"
#: The taint GKE puts on a node about to be preempted; a node still shutting down after this long is dead.
TERMINATION_TAINT = "cloud.google.com/impending-node-termination"
DEAD_NODE_SECONDS = 30.0
COUNTERS = ("preemptions", "replacements", "failures", "chiefElections")


@dataclass
class ChaosPlan:
    """How much chaos, for how long. The defaults are the bounded run of ``make test``."""

    seed: int = 1
    jobs: int = 2
    workers: int = 3
    parameter_servers: int = 1
    operators: int = 2
    #: seconds of chaos before the faults stop
    duration: float = 45.0
    #: mean seconds between operator kills, worker/chief/PS preemptions, and forced 410 re-lists
    kill_every: float = 9.0
    preempt_every: float = 3.0
    relist_every: float = 12.0
    #: share of API requests failed (every verb), added latency and its jitter, watch drops per event
    fault_probability: float = 0.03
    latency_seconds: float = 0.005
    latency_jitter_seconds: float = 0.03
    watch_drop_probability: float = 0.002
    #: the operators' leader Lease duration (the standby takes over within it)
    lease_duration: float = 4.0
    #: stop after this many kills / preemptions even if time is left (None: no limit)
    max_kills: int | None = None
    max_preemptions: int | None = None
    #: mean seconds between node losses (a VM gone without a shutdown); None: none (the local run)
    lose_every: float | None = None
    #: bound on the settling after the chaos (a liveness bound, not a performance assertion)
    settle_timeout: float = 240.0


@dataclass
class Tally:
    """What the chaos did."""

    kills: int = 0
    leader_kills: int = 0
    preemptions: int = 0
    relists: int = 0
    watch_drops: int = 0
    faults: int = 0
    #: seconds from a leader's SIGKILL to another replica holding the leader Lease, with no other kill between
    failovers: list[float] = field(default_factory=list)
    #: failovers not measured because another replica was killed before one led
    compounded_failovers: int = 0
    #: a real site's component restarts (kube-apiserver, etcd), and nodes lost
    restarts: dict[str, int] = field(default_factory=dict)
    node_losses: int = 0
    preempted_pods: set[tuple[str, str]] = field(default_factory=set)
    #: replicas that ended by themselves (exit 3: lost the Lease; other: the operator failed)
    exits: list[str] = field(default_factory=list)


@dataclass
class Violation:
    at: float
    what: str


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def _live(pod: dict[str, Any]) -> bool:
    """Runs or may run: not finished, not being deleted, not shutting down with its node."""
    metadata, status = pod["metadata"], pod.get("status") or {}
    if metadata.get("deletionTimestamp") or status.get("phase") not in ("Pending", "Running"):
        return False
    return not any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True" for c in status.get("conditions") or []
    )


def _lost(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    disrupted = any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    return status.get("phase") == "Failed" or disrupted


class Checker:
    """Watches pods, Leases and jobs of one namespace; checks the invariants at every event."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.lock = threading.RLock()
        self.stop = threading.Event()
        self.pods: dict[str, dict[str, Any]] = {}
        self.jobs: dict[str, dict[str, Any]] = {}
        self.violations: list[Violation] = []
        #: per job: worker pods seen lost, PS pods seen Running (one that never ran held no model state)
        self.lost_workers: dict[str, set[str]] = defaultdict(set)
        self.ps_seen: dict[str, set[str]] = defaultdict(set)
        self.epochs: dict[str, int] = {}
        self.status_epochs: dict[str, int] = {}
        self.counters: dict[tuple[str, str], int] = {}
        #: recovery: when each (job, slot) lost a worker (and its incarnation), the seconds until a newer pod
        self.loss_at: dict[tuple[str, str], tuple[float, int]] = {}
        self.recoveries: list[float] = []
        #: the leader Lease's holders over time
        self.leader: str | None = None
        self.relists = 0
        #: nodes the chaos made vanish: a worker there is lost though its status still reads Running
        self.lost_nodes: set[str] = set()
        self.threads = [
            threading.Thread(target=self._watch, args=(kind,), name=f"checker-{kind}", daemon=True)
            for kind in ("pods", "leases", "jobs")
        ]

    def __enter__(self) -> Checker:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(40)

    # -- the watches (list, then watch; a 410 or any error: list again and replace what was known) ----
    def _lister(self, kind: str) -> Callable[..., Any]:
        core, coordination = client.CoreV1Api(self.api), client.CoordinationV1Api(self.api)
        custom = client.CustomObjectsApi(self.api)
        if kind == "pods":
            return lambda **kw: core.list_namespaced_pod(self.namespace, label_selector=LABEL_JOB, **kw)
        if kind == "leases":
            return lambda **kw: coordination.list_namespaced_lease(self.namespace, **kw)
        return lambda **kw: custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, **kw)

    def _watch(self, kind: str) -> None:
        lister = self._lister(kind)
        while not self.stop.is_set():
            try:
                answer = lister(_preload_content=False)
                listing = json.loads(answer.data)
                version = listing["metadata"]["resourceVersion"]
                self._replace(kind, listing.get("items") or [])
                while not self.stop.is_set():
                    stream = watch.Watch()
                    for event in stream.stream(
                        lister, resource_version=version, timeout_seconds=20, _preload_content=False
                    ):
                        if event["type"] == "ERROR":
                            raise ApiException(status=event["raw_object"].get("code", 500))
                        obj = event["raw_object"]
                        version = obj["metadata"]["resourceVersion"]
                        if event["type"] != "BOOKMARK":
                            self._event(kind, event["type"], obj)
                        if self.stop.is_set():
                            stream.stop()
                            return
            except Exception as exc:  # faults, drops, 410: list again
                with self.lock:
                    self.relists += 1
                log.debug("checker %s: %s; listing again", kind, exc)
                self.stop.wait(0.2)

    def _replace(self, kind: str, items: list[dict[str, Any]]) -> None:
        """A fresh list replaces what was known: what it lacks was deleted meanwhile (as an informer does)."""
        with self.lock:
            if kind == "pods":
                listed = {obj["metadata"]["name"] for obj in items}
                for name, pod in list(self.pods.items()):
                    if name not in listed:
                        self._event(kind, "DELETED", pod)
            for obj in items:
                self._event(kind, "ADDED", obj)

    def _event(self, kind: str, type_: str, obj: dict[str, Any]) -> None:
        with self.lock:
            now = time.monotonic()
            if kind == "pods":
                self._pod(type_, obj, now)
            elif kind == "leases":
                self._lease(obj, now)
            else:
                self._job(type_, obj, now)

    def violate(self, what: str) -> None:
        self.violations.append(Violation(time.monotonic(), what))
        log.error("INVARIANT VIOLATED: %s", what)

    def _pod(self, type_: str, pod: dict[str, Any], now: float) -> None:
        name, labels = pod["metadata"]["name"], pod["metadata"].get("labels") or {}
        job, role = labels.get(LABEL_JOB, ""), labels.get(LABEL_ROLE)
        if type_ == "DELETED":
            self.pods.pop(name, None)
        else:
            self.pods[name] = pod
        if role == "ps" and type_ != "DELETED" and (pod.get("status") or {}).get("phase") == "Running":
            self.ps_seen[job].add(name)  # a PS that ran held model state: losing it is a preemption
        if role != "worker":
            return
        slot, incarnation = labels.get(LABEL_SLOT, ""), int(name.rsplit("-", 1)[-1])
        deliberate = (pod["metadata"].get("annotations") or {}).get(ANNOTATION_DELETED) == "true"
        succeeded = (pod.get("status") or {}).get("phase") == "Succeeded"
        vanished = type_ == "DELETED" and not deliberate and not succeeded  # e.g. force-deleted off a dead node
        on_lost_node = pod["spec"].get("nodeName") in self.lost_nodes and not succeeded
        if (_lost(pod) or vanished or on_lost_node) and name not in self.lost_workers[job]:
            self.lost_workers[job].add(name)
            newer = any(
                int(p["metadata"]["name"].rsplit("-", 1)[-1]) > incarnation
                for p in self._workers(job)
                if p["metadata"]["labels"].get(LABEL_SLOT) == slot
            )
            if not newer:  # else its replacement was seen first: no sample
                self.loss_at.setdefault((job, slot), (now, incarnation))
        lost_at = self.loss_at.get((job, slot))
        if type_ == "ADDED" and lost_at is not None and incarnation > lost_at[1]:
            self.recoveries.append(now - lost_at[0])
            del self.loss_at[(job, slot)]
        live = [p for p in self._workers(job) if self._runs(p) and p["metadata"]["labels"].get(LABEL_SLOT) == slot]
        if len(live) > 1:
            self.violate(f"two live pods in {job} slot {slot}: {sorted(p['metadata']['name'] for p in live)}")
        chiefs = [p for p in self._workers(job) if self._runs(p) and p["metadata"]["labels"].get(LABEL_CHIEF) == "true"]
        if len(chiefs) > 1:
            self.violate(f"two live chiefs in {job}: {sorted(p['metadata']['name'] for p in chiefs)}")

    def _runs(self, pod: dict[str, Any]) -> bool:
        """Live, and not on a node the chaos made vanish: its VM is gone with its processes, though the pod
        reads Running until someone deletes it (the operator may replace it first: that is two pods, not two
        processes, in the slot)."""
        return _live(pod) and pod["spec"].get("nodeName") not in self.lost_nodes

    def lose_node(self, node: str) -> None:
        with self.lock:
            self.lost_nodes.add(node)
            for pod in [p for p in self.pods.values() if p["spec"].get("nodeName") == node]:
                self._pod("MODIFIED", pod, time.monotonic())

    def _workers(self, job: str) -> list[dict[str, Any]]:
        return [
            p
            for p in self.pods.values()
            if (p["metadata"].get("labels") or {}).get(LABEL_JOB) == job
            and (p["metadata"].get("labels") or {}).get(LABEL_ROLE) == "worker"
        ]

    def _lease(self, lease: dict[str, Any], now: float) -> None:
        name, spec = lease["metadata"]["name"], lease.get("spec") or {}
        if name == LEADER_LEASE:
            holder = spec.get("holderIdentity") or None
            self.leader = holder
            return
        job = (lease["metadata"].get("labels") or {}).get(LABEL_JOB)
        if not job:
            return
        epoch = int(spec.get("leaseTransitions") or 0)
        if epoch < self.epochs.get(job, 0):
            self.violate(f"{job}: the Lease's epoch went back from {self.epochs[job]} to {epoch}")
        self.epochs[job] = max(epoch, self.epochs.get(job, 0))

    def _job(self, type_: str, job: dict[str, Any], now: float) -> None:
        name = job["metadata"]["name"]
        if type_ == "DELETED":
            self.jobs.pop(name, None)
            return
        self.jobs[name] = job
        status = job.get("status") or {}
        epoch = int((status.get("chief") or {}).get("epoch") or 0)
        if epoch < self.status_epochs.get(name, 0):
            self.violate(f"{name}: status.chief.epoch went back from {self.status_epochs[name]} to {epoch}")
        self.status_epochs[name] = max(epoch, self.status_epochs.get(name, 0))
        for counter in COUNTERS:
            value = int(status.get(counter) or 0)
            if value < self.counters.get((name, counter), 0):
                self.violate(f"{name}: status.{counter} went back from {self.counters[(name, counter)]} to {value}")
            self.counters[(name, counter)] = max(value, self.counters.get((name, counter), 0))
        if int(status.get("failures") or 0):
            self.violate(f"{name}: status.failures = {status['failures']} but no code failure was injected")

    # -- for the chaos and the end ------------------------------------------------------------------
    def snapshot(self) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        with self.lock:
            return json.loads(json.dumps(self.pods)), json.loads(json.dumps(self.jobs))


class Operators:
    """``n`` operator replicas with leader election; each (re)start gets a new identity."""

    def __init__(self, kubeconfig: str, namespace: str, logs: Path, n: int, lease_duration: float) -> None:
        self.kubeconfig, self.namespace, self.logs = kubeconfig, namespace, logs
        self.processes: list[subprocess.Popen[bytes] | None] = [None] * n
        self.identities: list[str] = [""] * n
        self.lease_duration = lease_duration
        self.runs = itertools.count()

    def start(self, i: int) -> None:
        run = next(self.runs)
        self.identities[i] = f"operator-{i}-run-{run}"
        command = [
            sys.executable,
            "-m",
            "ttj",
            "operator",
            "-n",
            self.namespace,
            "--metrics-port",
            "0",
            "--liveness",
            "none",
            "--lease-duration",
            "8",
            "--chief-startup",
            "10",
            "--node-grace",
            "60",
            "--resync",
            "5",
            "--no-placement-check",
            "--leader-elect",
            "--leader-election-namespace",
            self.namespace,
            "--leader-election-identity",
            self.identities[i],
            "--leader-election-lease-duration",
            str(self.lease_duration),
        ]
        if os.environ.get("TTJ_CHAOS_VERBOSE"):
            command.append("-v")
        with open(self.logs / f"{self.identities[i]}.log", "wb") as out:
            self.processes[i] = subprocess.Popen(
                command, env={**os.environ, "KUBECONFIG": self.kubeconfig}, stdout=out, stderr=subprocess.STDOUT
            )

    def start_all(self) -> None:
        for i in range(len(self.processes)):
            self.start(i)

    def kill(self, i: int) -> None:
        process = self.processes[i]
        if process is not None:
            process.send_signal(signal.SIGKILL)
            process.wait(30)
            self.processes[i] = None

    def index_of(self, identity: str | None) -> int | None:
        return self.identities.index(identity) if identity in self.identities else None

    def stop_all(self) -> None:
        for i, process in enumerate(self.processes):
            if process is not None:
                process.terminate()
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    self.kill(i)
                self.processes[i] = None

    def unexpected_exits(self) -> list[str]:
        """Replicas that ended by themselves (a crash, or a lost Lease: exit 3)."""
        return [
            f"{self.identities[i]} exited {p.returncode}"
            for i, p in enumerate(self.processes)
            if p is not None and p.poll() is not None
        ]


def job_manifest(name: str, namespace: str, plan: ChaosPlan) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TransientTrainingJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "trainSteps": 1_000_000,
            "model": "small-cnn",
            "dataset": "synthetic",
            "checkpoint": {"uri": "/tmp/ck"},
            "workers": {"replicas": plan.workers, "minReplicas": 1},
            "parameterServers": {"replicas": plan.parameter_servers},
            "backoffLimit": 0,
        },
    }


@dataclass
class Outcome:
    plan: ChaosPlan
    tally: Tally
    violations: list[str]
    problems: list[str]
    recoveries: list[float]
    seconds: float
    logs: Path

    def summary(self) -> dict[str, Any]:
        rec = self.recoveries
        return {
            "seed": self.plan.seed,
            "seconds": round(self.seconds, 1),
            "faultsInjected": self.tally.faults,
            "watchDrops": self.tally.watch_drops,
            "forcedRelists": self.tally.relists,
            "operatorKills": self.tally.kills,
            "leaderKills": self.tally.leader_kills,
            "selfExits": len(self.tally.exits),
            "preemptions": self.tally.preemptions,
            "nodeLosses": self.tally.node_losses,
            "restarts": dict(self.tally.restarts),
            "violations": len(self.violations),
            "problemsAtEnd": len(self.problems),
            "recoveryP50": round(statistics.median(rec), 2) if rec else None,
            "recoveryP99": round(percentile(rec, 99), 2) if rec else None,
            "recoveries": len(rec),
            "failoverP50": round(statistics.median(self.tally.failovers), 2) if self.tally.failovers else None,
            "failoverMax": round(max(self.tally.failovers), 2) if self.tally.failovers else None,
            "failovers": len(self.tally.failovers),
            "failoversCutByAnotherKill": self.tally.compounded_failovers,
        }


class Chaos:
    """Runs one chaos plan on a site (a fresh local cluster unless given, see :mod:`tests.chaos.sites`);
    :meth:`run` returns what happened."""

    def __init__(self, plan: ChaosPlan, logs: Path, site: Any = None) -> None:
        self.plan, self.logs = plan, logs
        self.rng = random.Random(plan.seed)
        self.tally = Tally()
        self.namespace = "chaos"
        #: where the run happens (None: a fresh local cluster, as ``make test`` runs it)
        self.site: Any = site
        #: nodes the chaos made vanish (their workers are losses; their Nodes go as dead ones)
        self.lost_nodes: set[str] = set()
        #: the leader killed last (identity, when), until another replica leads
        self.failover_from: tuple[str, float] | None = None
        self.top_up_at = 0.0
        self.api: Any = None
        #: when each node was first seen shutting down
        self.dying_since: dict[str, float] = {}

    def run(self) -> Outcome:
        from tests.chaos.sites import LocalSite
        from tests.e2e.operator_support import ChiefHeartbeat, install_crd

        plan = self.plan
        started = time.monotonic()
        site = self.site if self.site is not None else LocalSite(plan)
        with site:
            self.site, self.namespace = site, site.namespace
            api = self.api = site.api
            install_crd(api)
            client.CoreV1Api(api).create_namespace({"metadata": {"name": self.namespace}})
            operators = Operators(
                site.operator_kubeconfig, self.namespace, self.logs, plan.operators, plan.lease_duration
            )
            problems: list[str] = []
            with Checker(api, self.namespace) as checker, ChiefHeartbeat(api, period=1.0):
                operators.start_all()
                try:
                    for j in range(plan.jobs):
                        self._retry(
                            lambda j=j: client.CustomObjectsApi(api).create_namespaced_custom_object(
                                GROUP, VERSION, self.namespace, PLURAL, job_manifest(f"job-{j}", self.namespace, plan)
                            )
                        )
                    problems += self._wait_settled(checker, "before the chaos", plan.settle_timeout)
                    self._chaos(site, site.control, checker, operators)
                    site.faults_off()
                    site.wait_up(plan.settle_timeout)
                    self._top_up()
                    for i, process in enumerate(operators.processes):  # every replica up for the settling
                        if process is None or process.poll() is not None:
                            operators.start(i)
                    problems += self._wait_settled(checker, "after the chaos", plan.settle_timeout)
                    problems += self._delete_and_wait_empty(api, checker, plan.settle_timeout)
                finally:
                    site.faults_off()
                    operators.stop_all()
                recoveries = list(checker.recoveries)
                violations = [v.what for v in checker.violations]
        return Outcome(plan, self.tally, violations, problems, recoveries, time.monotonic() - started, self.logs)

    # -- the faults ---------------------------------------------------------------------------------
    def _chaos(self, site: Any, control: Any, checker: Checker, operators: Operators) -> None:
        plan, rng = self.plan, self.rng
        site.faults_on()
        end = time.monotonic() + plan.duration
        start = time.monotonic()
        # Each kind of fault at least once in any run, however the draws fall.
        due = {
            "kill": start + min(rng.expovariate(1 / plan.kill_every), 0.3 * plan.duration),
            "preempt": start + min(rng.expovariate(1 / plan.preempt_every), 0.1 * plan.duration),
            "relist": start + min(rng.expovariate(1 / plan.relist_every), 0.5 * plan.duration),
        }
        if plan.lose_every is not None:  # drawn only when asked: the local run's draws stay as they were
            due["lose"] = start + rng.expovariate(1 / plan.lose_every)
        restarts: dict[int, float] = {}
        self.failover_from = None
        while time.monotonic() < end:
            site.poll()
            if (
                plan.max_kills is not None
                and plan.max_preemptions is not None
                and self.tally.kills >= plan.max_kills
                and self.tally.preemptions >= plan.max_preemptions
            ):
                break
            now = time.monotonic()
            if self.failover_from is not None and checker.leader not in (None, self.failover_from[0]):
                self.tally.failovers.append(now - self.failover_from[1])  # within the loop's 0.2 s tick
                self.failover_from = None
            for i, at in list(restarts.items()):
                if now >= at:
                    operators.start(i)
                    del restarts[i]
            if now >= self.top_up_at:  # the cloud brings preempted VMs back (the fleet's own restore may fail)
                self.top_up_at = now + 5.0
                self._top_up()
            for i, process in enumerate(operators.processes):  # exited by itself: restarted, as by a kubelet
                if process is not None and process.poll() is not None and i not in restarts:
                    self.tally.exits.append(f"{operators.identities[i]} exited {process.returncode}")
                    operators.processes[i] = None
                    restarts[i] = now + 1.0
            action = min(due, key=lambda k: due[k])
            if due[action] > now:
                time.sleep(min(0.2, due[action] - now))
                continue
            if action == "kill":
                due["kill"] = now + rng.expovariate(1 / plan.kill_every)
                if plan.max_kills is None or self.tally.kills < plan.max_kills:
                    self._kill(checker, operators, restarts)
            elif action == "preempt":
                due["preempt"] = now + rng.expovariate(1 / plan.preempt_every)
                if plan.max_preemptions is None or self.tally.preemptions < plan.max_preemptions:
                    self._preempt(control, checker)
            elif action == "lose":
                due["lose"] = now + rng.expovariate(1 / (plan.lose_every or 1.0))
                self._lose(control, checker)
            else:
                due["relist"] = now + rng.expovariate(1 / plan.relist_every)
                self._force_relist(site)
        faults, dropped = site.injected()
        self.tally.faults = faults
        self.tally.watch_drops = dropped + self.tally.relists

    def _top_up(self) -> None:
        """What the cloud and kube's pod GC do, which the local fleet may leave half-done when its own requests
        take injected faults: a VM whose shutdown never finished is gone (its Node deleted), pods bound to a
        Node that no longer exists are force-deleted, and the pools are brought back to their size."""
        try:
            self._collect_dead_nodes()
        except Exception as exc:  # an injected fault: next time
            log.debug("collecting dead nodes: %s", exc)
        for pool in self.site.pools:
            try:
                self.site.restore_pool(pool)
            except Exception as exc:
                log.debug("topping up %s: %s", pool, exc)

    def _collect_dead_nodes(self) -> None:
        core = client.CoreV1Api(self.api)
        now = time.monotonic()
        nodes = core.list_node().items
        for node in nodes:
            # A lost node's VM is gone: the cloud deletes its Node, as one that never finished shutting down.
            dying = node.metadata.name in self.lost_nodes or any(
                t.key == TERMINATION_TAINT for t in node.spec.taints or []
            )
            if not dying:
                continue
            first = self.dying_since.setdefault(node.metadata.name, now)
            if now - first > DEAD_NODE_SECONDS:
                with contextlib.suppress(ApiException):
                    core.delete_node(node.metadata.name)
        existing = {n.metadata.name for n in nodes}
        for pod in core.list_namespaced_pod(self.namespace).items:
            if pod.spec.node_name and pod.spec.node_name not in existing:
                with contextlib.suppress(ApiException):
                    core.delete_namespaced_pod(pod.metadata.name, self.namespace, grace_period_seconds=0)

    def _kill(self, checker: Checker, operators: Operators, restarts: dict[int, float]) -> None:
        alive = [i for i, p in enumerate(operators.processes) if p is not None and p.poll() is None]
        if not alive:
            return
        leader = operators.index_of(checker.leader)
        victim = leader if leader in alive and self.rng.random() < 0.75 else self.rng.choice(alive)
        was_leader = victim == leader
        old = operators.identities[victim]
        killed_at = time.monotonic()
        if self.failover_from is not None:  # a kill during a failover: that one no longer measures a failover
            self.tally.compounded_failovers += 1
            self.failover_from = None
        operators.kill(victim)
        self.tally.kills += 1
        restarts[victim] = killed_at + self.rng.uniform(0.5, 3.0)
        if was_leader:
            self.tally.leader_kills += 1
            if len(alive) > 1 and self.failover_from is None:  # a standby was up: how long until it leads
                self.failover_from = (old, killed_at)

    def _preempt(self, control: Any, checker: Checker) -> None:
        pods, jobs = checker.snapshot()
        # A node whose PS the operator has not recorded yet is spared: each PS replacement is then seen,
        # and counted, on its own (the operator counts a new PS pod, not how many came and went before).
        unrecorded_nodes = set()
        for pod in pods.values():
            labels = pod["metadata"].get("labels") or {}
            if labels.get(LABEL_ROLE) == "ps":
                status = (jobs.get(labels.get(LABEL_JOB, "")) or {}).get("status") or {}
                if pod["metadata"]["name"] not in (status.get("parameterServerPods") or []):
                    unrecorded_nodes.add(pod["spec"].get("nodeName"))
        candidates = [
            pod
            for pod in pods.values()
            if _live(pod)
            and (pod.get("status") or {}).get("phase") == "Running"
            and pod["spec"].get("nodeName")
            and pod["spec"]["nodeName"] not in unrecorded_nodes
        ]
        if not candidates:
            return
        weights = [3.0 if (p["metadata"]["labels"].get(LABEL_CHIEF) == "true") else 1.0 for p in candidates]
        victim = self.rng.choices(candidates, weights=weights)[0]
        try:
            control.preempt_pod(self.namespace, victim["metadata"]["name"], wait=False)
        except Exception as exc:  # gone meanwhile, or the control endpoint blipped
            log.info("preemption of %s not done: %s", victim["metadata"]["name"], exc)
            return
        self.tally.preemptions += 1
        self.tally.preempted_pods.add((victim["metadata"]["labels"].get(LABEL_JOB, ""), victim["metadata"]["name"]))

    def _force_relist(self, site: Any) -> None:
        """The site's disruption of every watcher: on the local cluster its watch caches restarted (each
        re-watch gets 410 Gone and must list again), on a real one kube-apiserver or etcd restarted."""
        what = site.disrupt()
        if what == "relist":
            self.tally.relists += 1
        elif what is not None:
            self.tally.restarts[what] = self.tally.restarts.get(what, 0) + 1

    def _lose(self, control: Any, checker: Checker) -> None:
        """A GPU node under a Running worker vanishes without a shutdown (its kubelet silent, Ready=Unknown);
        the cloud deletes its Node later (:meth:`_collect_dead_nodes`). Its worker is a loss."""
        pods, _ = checker.snapshot()
        nodes = [
            p["spec"]["nodeName"]
            for p in pods.values()
            if _live(p)
            and (p.get("status") or {}).get("phase") == "Running"
            and p["metadata"]["labels"].get(LABEL_ROLE) == "worker"
            and p["spec"].get("nodeName")
            and p["spec"]["nodeName"] not in self.lost_nodes
        ]
        if not nodes:
            return
        node = self.rng.choice(sorted(nodes))
        try:
            control.lose_node(node)
        except Exception as exc:
            log.info("loss of node %s not done: %s", node, exc)
            return
        self.lost_nodes.add(node)
        checker.lose_node(node)
        self.tally.node_losses += 1

    # -- the end ------------------------------------------------------------------------------------
    def _retry(self, call: Callable[[], Any], attempts: int = 30) -> Any:
        for attempt in range(attempts):
            try:
                return call()
            except ApiException as exc:
                if exc.status == 409 and attempt and "AlreadyExists" in str(exc.body):
                    return None
                if attempt == attempts - 1:
                    raise
                time.sleep(0.2)
        return None

    def _settled_problems(self, checker: Checker) -> list[str]:
        """Why the jobs are not yet where they would be without faults; empty when they are."""
        pods, jobs = checker.snapshot()
        plan = self.plan
        problems = []
        for j in range(plan.jobs):
            name = f"job-{j}"
            job = jobs.get(name)
            if job is None:
                problems.append(f"{name}: not seen")
                continue
            status = job.get("status") or {}
            live = [
                p
                for p in pods.values()
                if (p["metadata"].get("labels") or {}).get(LABEL_JOB) == name
                and (p["metadata"].get("labels") or {}).get(LABEL_ROLE) == "worker"
                and _live(p)
            ]
            running = [p for p in live if (p.get("status") or {}).get("phase") == "Running"]
            slots = sorted(int(p["metadata"]["labels"][LABEL_SLOT]) for p in live)
            chiefs = [p["metadata"]["name"] for p in live if p["metadata"]["labels"].get(LABEL_CHIEF) == "true"]
            chief = (status.get("chief") or {}).get("pod")
            lost = len(checker.lost_workers[name])
            ps_replaced = max(0, len(checker.ps_seen[name]) - plan.parameter_servers)
            want = {
                "phase": ("Running", status.get("phase")),
                "active": (plan.workers, (status.get("workers") or {}).get("active")),
                "running pods": (plan.workers, len(running)),
                "slots": (list(range(plan.workers)), slots),
                "chief labelled": ([chief], chiefs),
                "accounted": (None, status.get("accountedPods")),
                "replacements": (lost, int(status.get("replacements") or 0)),
                "preemptions": (lost + ps_replaced, int(status.get("preemptions") or 0)),
                "failures": (0, int(status.get("failures") or 0)),
            }
            problems += [
                f"{name}: {k} is {got!r}, want {exp!r} (workers lost {lost}, PS pods seen {len(checker.ps_seen[name])})"
                for k, (exp, got) in want.items()
                if exp != got
            ]
            if len(running) < len(live):
                problems += [f"{name}: {self._why_not_running(checker, p)}" for p in live if p not in running]
            ps_live = [
                p
                for p in pods.values()
                if (p["metadata"].get("labels") or {}).get(LABEL_JOB) == name
                and (p["metadata"].get("labels") or {}).get(LABEL_ROLE) == "ps"
                and _live(p)
            ]
            if sorted(status.get("parameterServerPods") or []) != sorted(p["metadata"]["name"] for p in ps_live):
                problems.append(f"{name}: parameterServerPods {status.get('parameterServerPods')} vs live PS pods")
        return problems

    def _why_not_running(self, checker: Checker, pod: dict[str, Any]) -> str:
        """A pod that does not run, and its node as the API has it: for the report of a run that did not settle."""
        status, node_name = pod.get("status") or {}, (pod.get("spec") or {}).get("nodeName")
        conditions = {c.get("type"): f"{c.get('status')} {c.get('reason', '')}" for c in status.get("conditions") or []}
        text = f"{pod['metadata']['name']} {status.get('phase')} on node {node_name}: {conditions}"
        if node_name:
            try:
                node = client.CoreV1Api(checker.api).read_node(node_name)
                ready = next((c for c in node.status.conditions or [] if c.type == "Ready"), None)
                text += (
                    f"; node Ready={ready.status if ready else None} deleting={bool(node.metadata.deletion_timestamp)}"
                )
            except ApiException as exc:
                text += f"; node: HTTP {exc.status}"
        return text

    def _wait_settled(self, checker: Checker, when: str, timeout: float) -> list[str]:
        deadline = time.monotonic() + timeout
        problems = self._settled_problems(checker)
        stable_since: float | None = None
        while time.monotonic() < deadline:
            if time.monotonic() >= self.top_up_at:
                self.top_up_at = time.monotonic() + 5.0
                self._top_up()
            problems = self._settled_problems(checker)
            if problems:
                stable_since = None
            elif stable_since is None:
                stable_since = time.monotonic()
            elif time.monotonic() - stable_since > 3.0:  # settled, and staying so
                return []
            time.sleep(0.5)
        self._dump_state(checker, when)
        return [f"not settled {when}: {p}" for p in problems]

    def _dump_state(self, checker: Checker, when: str) -> None:
        """What the API holds when the jobs did not settle (jobs, pods, Deployments, ReplicaSets, Events,
        ServiceAccounts), for the report: ``state-<when>.json`` beside the operators' logs."""
        state: dict[str, Any] = {}
        core, apps = client.CoreV1Api(self.api), client.AppsV1Api(self.api)
        custom = client.CustomObjectsApi(self.api)
        listings = {
            "jobs": lambda: custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL),
            "pods": lambda: self.api.sanitize_for_serialization(core.list_namespaced_pod(self.namespace)),
            "deployments": lambda: self.api.sanitize_for_serialization(apps.list_namespaced_deployment(self.namespace)),
            "replicasets": lambda: self.api.sanitize_for_serialization(
                apps.list_namespaced_replica_set(self.namespace)
            ),
            "serviceaccounts": lambda: self.api.sanitize_for_serialization(
                core.list_namespaced_service_account(self.namespace)
            ),
            "events": lambda: self.api.sanitize_for_serialization(core.list_namespaced_event(self.namespace)),
            "nodes": lambda: self.api.sanitize_for_serialization(core.list_node()),
        }
        for kind, listing in listings.items():
            try:
                state[kind] = listing()
            except ApiException as exc:
                state[kind] = f"HTTP {exc.status}"
        path = self.logs / f"state-{when.replace(' ', '-')}.json"
        path.write_text(json.dumps(state, indent=1, default=str))

    def _delete_and_wait_empty(self, api: client.ApiClient, checker: Checker, timeout: float) -> list[str]:
        custom = client.CustomObjectsApi(api)
        for j in range(self.plan.jobs):
            with contextlib.suppress(ApiException):
                self._retry(
                    lambda j=j: custom.delete_namespaced_custom_object(
                        GROUP, VERSION, self.namespace, PLURAL, f"job-{j}"
                    )
                )
        deadline = time.monotonic() + timeout
        left: list[str] = []
        while time.monotonic() < deadline:
            if time.monotonic() >= self.top_up_at:
                self.top_up_at = time.monotonic() + 5.0
                self._top_up()
            pods = client.CoreV1Api(api).list_namespaced_pod(self.namespace).items
            left = [f"{p.metadata.name} ({p.status.phase}, finalizers {p.metadata.finalizers})" for p in pods]
            if not left:
                return []
            time.sleep(0.5)
        return [f"orphan pods after the jobs were deleted: {left}"]


@contextlib.contextmanager
def quiet_kubernetes_logs() -> Iterator[None]:
    logger = logging.getLogger("kubernetes")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)
