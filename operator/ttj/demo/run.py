"""`make demo`: a real training job on the embedded local cluster, through injected preemptions.

It does what a user would do, with the same commands: start `ttj local-cluster`, install the CRD,
start `ttj operator`, apply the demo job, then hit a worker, then the chief, then bring the
capacity back, while showing progress. At the end it prints a summary and draws the timeline.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ttj.api import crd as crd_module
from ttj.api.models import GROUP, PLURAL, VERSION
from ttj.demo.timeline import Timeline, draw

REPO = Path(__file__).resolve().parents[3]
GPU_POOL = "gpu-pool"
TERMINAL = ("Succeeded", "Failed")


@dataclass
class Script:
    """When to inject what, as fractions of trainSteps; each fires once."""

    worker_at: float = 0.2
    chief_at: float = 0.45
    restore_after_chief: float = 0.1
    fired: list[str] = field(default_factory=list)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m ttj.demo", description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--job", default=str(REPO / "examples" / "demo.yaml"), help="the job to run [%(default)s]")
    parser.add_argument("--out", default=str(REPO / "out" / "demo"), help="logs, checkpoints, picture [%(default)s]")
    parser.add_argument("--timeout", type=float, default=1200, help="give up after this many seconds [%(default)s]")
    parser.add_argument("--gpu-nodes", type=int, default=3, help="spot GPU nodes in the local cluster [%(default)s]")
    parser.add_argument("--no-preemptions", action="store_true", help="run the job without injecting preemptions")
    return parser.parse_args(argv)


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.out).resolve()
        self.kubeconfig = self.out / "kubeconfig"
        self.processes: list[subprocess.Popen[bytes]] = []
        self.timeline = Timeline()
        self.script = Script()
        self.began = time.monotonic()
        self.namespace = "default"
        manifest = yaml.safe_load(Path(args.job).read_text())
        self.name: str = manifest["metadata"]["name"]
        manifest["metadata"].setdefault("namespace", self.namespace)
        self.namespace = manifest["metadata"]["namespace"]
        # A fresh checkpoint directory per run, so the demo never resumes an older one.
        manifest["spec"]["checkpoint"]["uri"] = str(self.out / "checkpoints")
        self.manifest = manifest
        self.train_steps = int(manifest["spec"]["trainSteps"])

    # -- processes -------------------------------------------------------------------------------

    def spawn(self, name: str, *argv: str) -> subprocess.Popen[bytes]:
        log = open(self.out / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1"}
        process = subprocess.Popen(
            [sys.executable, "-m", "ttj", *argv], stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        self.processes.append(process)
        return process

    def stop_all(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()

    # -- the run ---------------------------------------------------------------------------------

    def start_cluster(self) -> None:
        if self.out.exists():
            shutil.rmtree(self.out)
        (self.out / "state").mkdir(parents=True)
        pool = (
            f"name={GPU_POOL},nodes={self.args.gpu_nodes},provisioning=spot,accelerator=nvidia-tesla-t4,gpus=1,"
            "cpu=8,memory=30Gi,machine-type=n1-standard-8,restore-after=never"
        )
        cluster = self.spawn(
            "local-cluster",
            "local-cluster",
            "--kubeconfig",
            str(self.kubeconfig),
            "--state-dir",
            str(self.out / "state"),
            "--pool",
            "name=cpu-pool,nodes=2,cpu=4,memory=15Gi,machine-type=n1-standard-4",
            "--pool",
            pool,
        )
        deadline = time.monotonic() + 60
        while not self.kubeconfig.exists():
            if cluster.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the local cluster did not start; see {self.out / 'local-cluster.log'}")
            time.sleep(0.1)

    def api(self) -> Any:
        from kubernetes import client, config

        config.load_kube_config(config_file=str(self.kubeconfig))  # type: ignore[no-untyped-call]
        return client

    def install(self) -> None:
        client = self.api()
        extensions = client.ApiextensionsV1Api()
        with contextlib.suppress(client.ApiException):
            extensions.create_custom_resource_definition(crd_module.crd())
        custom = client.CustomObjectsApi()
        deadline = time.monotonic() + 30
        while True:
            try:
                custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL)
                break
            except client.ApiException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.spawn(
            "operator",
            "operator",
            "--all-namespaces",
            "--metrics-port",
            "0",
            "--liveness",
            "none",
            "--lease-duration",
            "15",
            "--node-grace",
            "10",
        )
        custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.manifest)
        self.began = time.monotonic()

    def observe(self) -> dict[str, Any]:
        client = self.api()
        now = time.monotonic() - self.began
        pods = client.CoreV1Api().list_namespaced_pod(
            self.namespace, label_selector=f"transient.training/job-name={self.name}"
        )
        present = set()
        for pod in pods.items:
            raw = client.ApiClient().sanitize_for_serialization(pod)
            present.add(raw["metadata"]["name"])
            self.timeline.observe_pod(now, raw)
        self.timeline.observe_gone(now, present)
        job = client.CustomObjectsApi().get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name)
        status: dict[str, Any] = job.get("status") or {}
        self.timeline.observe_status(now, status)
        return status

    def inject(self, status: dict[str, Any]) -> None:
        if self.args.no_preemptions:
            return
        from ttj.localcluster.nodes.control import ControlClient

        step = int((status.get("progress") or {}).get("globalStep") or 0)
        chief = (status.get("chief") or {}).get("pod")
        epoch = int((status.get("chief") or {}).get("epoch") or 0)
        control = ControlClient.from_kubeconfig(str(self.kubeconfig))
        now = time.monotonic() - self.began
        if "worker" not in self.script.fired and step >= self.script.worker_at * self.train_steps:
            victim = next(
                (s for s in self.running_workers() if s != chief),
                None,
            )
            if victim:
                control.preempt_pod(self.namespace, victim)
                self.timeline.preemptions.append((now, f"worker {victim}"))
                self.script.fired.append("worker")
                self.say(f"GKE takes back the node of worker {victim}")
        elif "chief" not in self.script.fired and "worker" in self.script.fired and chief:
            if step >= self.script.chief_at * self.train_steps and chief in self.running_workers():
                control.preempt_pod(self.namespace, chief)
                self.timeline.preemptions.append((now, f"chief {chief}"))
                self.script.fired.append(f"chief@{epoch}")
                self.script.fired.append("chief")
                self.say(f"GKE takes back the node of the chief {chief} (epoch {epoch})")
        elif "chief" in self.script.fired and "restore" not in self.script.fired:
            elected_after = epoch > min(int(f.split("@")[1]) for f in self.script.fired if f.startswith("chief@"))
            target = (self.script.chief_at + self.script.restore_after_chief) * self.train_steps
            if elected_after and step >= target:
                control.restore_pool(GPU_POOL)
                self.script.fired.append("restore")
                self.say("spot capacity is back: the GPU pool is restored")

    def running_workers(self) -> list[str]:
        return [
            s.name
            for s in self.timeline.pods.values()
            if s.role == "worker" and s.running is not None and s.ended is None
        ]

    def say(self, text: str) -> None:
        clock = time.monotonic() - self.began
        print(f"\n[{clock:6.1f}s] >>> {text}", flush=True)

    def show(self, status: dict[str, Any]) -> None:
        workers = status.get("workers") or {}
        chief = status.get("chief") or {}
        progress = status.get("progress") or {}
        cost = status.get("cost") or {}
        step = int(progress.get("globalStep") or 0)
        filled = int(30 * min(1.0, step / self.train_steps))
        bar = "#" * filled + "." * (30 - filled)
        line = (
            f"[{time.monotonic() - self.began:6.1f}s] {status.get('phase') or 'Pending':<10} "
            f"workers {workers.get('active', 0)}/{workers.get('desired', 0)} "
            f"chief {chief.get('pod') or '-'} (epoch {chief.get('epoch', 0)})  "
            f"step [{bar}] {step}/{self.train_steps}  ckpt {progress.get('checkpointStep', '-')}  "
            f"${float(cost.get('usd') or 0):.4f}"
        )
        if sys.stdout.isatty():
            print("\r\033[K" + line, end="", flush=True)
        else:
            print(line, flush=True)

    def run(self) -> int:
        print(f"ttj demo: starting the local cluster (logs and picture in {self.out})", flush=True)
        self.start_cluster()
        self.install()
        print(f"ttj demo: applied {self.args.job} as {self.namespace}/{self.name}", flush=True)
        status: dict[str, Any] = {}
        last_shown = 0.0
        interactive = sys.stdout.isatty()
        while time.monotonic() - self.began < self.args.timeout:
            status = self.observe()
            self.inject(status)
            if interactive or time.monotonic() - last_shown >= 5:
                self.show(status)
                last_shown = time.monotonic()
            if status.get("phase") in TERMINAL:
                break
            for process in self.processes:
                if process.poll() is not None:
                    raise SystemExit(f"a demo process exited early (code {process.returncode}); logs in {self.out}")
            time.sleep(1)
        self.show(status)
        print()
        return self.summarise(status)

    def summarise(self, status: dict[str, Any]) -> int:
        elapsed = time.monotonic() - self.began
        progress = status.get("progress") or {}
        cost = status.get("cost") or {}
        phase = status.get("phase") or "Pending"
        succeeded = phase == "Succeeded"
        picture = draw(self.timeline, self.out / "timeline.png", f"ttj demo: {self.name} ({phase})")
        rows = [
            ("result", "succeeded" if succeeded else f"NOT succeeded (phase {phase})"),
            ("global steps", f"{progress.get('globalStep', 0)} of {self.train_steps}"),
            ("last checkpoint", f"step {progress.get('checkpointStep', '-')} at {progress.get('checkpointPath', '-')}"),
            ("preemptions", str(status.get("preemptions", 0))),
            ("replacements", str(status.get("replacements", 0))),
            ("chief elections", str(status.get("chiefElections", 0))),
            ("steps lost", str(self.timeline.steps_lost())),
            ("time", f"{elapsed:.0f} s"),
            ("cost", f"${float(cost.get('usd') or 0):.4f}"),
            ("on-demand equivalent", f"${float(cost.get('onDemandEquivalentUSD') or 0):.4f}"),
            ("timeline picture", str(picture)),
        ]
        width = max(len(k) for k, _ in rows)
        print("\nttj demo summary")
        for key, value in rows:
            print(f"  {key:<{width}}  {value}")
        (self.out / "summary.json").write_text(json.dumps(dict(rows), indent=2))
        if not succeeded:
            for condition in status.get("conditions") or []:
                if condition.get("status") == "True":
                    print(f"  condition {condition['type']}: {condition.get('message', '')}")
            print(f"  logs: {self.out}/*.log and {self.out}/state/")
        return 0 if succeeded else 1


@contextlib.contextmanager
def running(demo: Demo) -> Iterator[Demo]:
    try:
        yield demo
    finally:
        demo.stop_all()


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt  # so that the cluster and operator it started are stopped too


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    demo = Demo(args)
    with running(demo):
        try:
            return demo.run()
        except KeyboardInterrupt:
            print("\nttj demo: interrupted", file=sys.stderr)
            return 130
