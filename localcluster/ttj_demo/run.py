"""`make demo`: a real training job on the embedded local cluster, through injected preemptions.

It does what a user would do, with the same commands: start `ttj local-cluster`, install the CRD,
start `ttj operator`, apply the demo job, then hit a worker, then the chief, then bring the
capacity back, while showing progress. At the end it prints a summary and draws the timeline.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ttj.timeline.model import Timeline
from ttj_contract import Role, format_usd
from ttj_demo.stack import Stack

REPO = Path(__file__).resolve().parents[2]
TERMINAL = ("Succeeded", "Failed")


@dataclass
class Script:
    """When to inject what, as fractions of trainSteps; each fires once."""

    worker_at: float = 0.2
    chief_at: float = 0.45
    restore_after_chief: float = 0.1
    fired: list[str] = field(default_factory=list)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m ttj_demo", description=__doc__.splitlines()[0] if __doc__ else "")
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
        if self.out.exists():
            shutil.rmtree(self.out)
        self.stack = Stack(self.out, gpu_nodes=args.gpu_nodes)
        self.timeline = Timeline()
        self.script = Script()
        self.began = time.monotonic()
        manifest = yaml.safe_load(Path(args.job).read_text())
        self.name: str = manifest["metadata"]["name"]
        self.namespace: str = manifest["metadata"].setdefault("namespace", "default")
        # A fresh checkpoint directory per run, so the demo never resumes an older one.
        manifest["spec"]["checkpoint"]["uri"] = str(self.out / "checkpoints")
        self.manifest = manifest
        self.train_steps = int(manifest["spec"]["trainSteps"])

    def observe(self) -> dict[str, Any]:
        now = time.monotonic() - self.began
        pods = self.stack.pods(self.namespace, self.name)
        for pod in pods:
            self.timeline.observe_pod(now, pod)
        self.timeline.observe_gone(now, {pod["metadata"]["name"] for pod in pods})
        status: dict[str, Any] = self.stack.job(self.namespace, self.name).get("status") or {}
        self.timeline.observe_status(now, status)
        return status

    def inject(self, status: dict[str, Any]) -> None:
        if self.args.no_preemptions:
            return
        step = int((status.get("progress") or {}).get("globalStep") or 0)
        chief = (status.get("chief") or {}).get("pod")
        epoch = int((status.get("chief") or {}).get("epoch") or 0)
        now = time.monotonic() - self.began
        if "worker" not in self.script.fired and step >= self.script.worker_at * self.train_steps:
            victim = next(
                (s for s in self.running_workers() if s != chief),
                None,
            )
            if victim:
                self.stack.preempt_pod_node(self.namespace, victim)
                self.timeline.preemptions.append((now, f"worker {victim}"))
                self.script.fired.append("worker")
                self.say(f"GKE takes back the node of worker {victim}")
        elif "chief" not in self.script.fired and "worker" in self.script.fired and chief:
            if step >= self.script.chief_at * self.train_steps and chief in self.running_workers():
                self.stack.preempt_pod_node(self.namespace, chief)
                self.timeline.preemptions.append((now, f"chief {chief}"))
                self.script.fired.append(f"chief@{epoch}")
                self.script.fired.append("chief")
                self.say(f"GKE takes back the node of the chief {chief} (epoch {epoch})")
        elif "chief" in self.script.fired and "restore" not in self.script.fired:
            elected_after = epoch > min(int(f.split("@")[1]) for f in self.script.fired if f.startswith("chief@"))
            target = (self.script.chief_at + self.script.restore_after_chief) * self.train_steps
            if elected_after and step >= target:
                self.stack.restore_gpu_pool()
                self.script.fired.append("restore")
                self.say("spot capacity is back: the GPU pool is restored")

    def running_workers(self) -> list[str]:
        return [
            s.name
            for s in self.timeline.pods.values()
            if s.role == Role.WORKER and s.running is not None and s.ended is None
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
            f"{format_usd(float(cost.get('usd') or 0))}"
        )
        if sys.stdout.isatty():
            print("\r\033[K" + line, end="", flush=True)
        else:
            print(line, flush=True)

    def run(self) -> int:
        print(f"ttj demo: starting the local cluster (logs and picture in {self.out})", flush=True)
        self.stack.start()
        self.stack.create_job(self.manifest)
        self.began = time.monotonic()
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
            self.stack.check_alive()
            time.sleep(1)
        self.show(status)
        print()
        return self.summarise(status)

    def draw(self, title: str) -> Path:
        """The picture ``ttj timeline -o`` draws, read from the cluster the same way, with the demo's finer
        samples of the step and the cost; its text form beside it."""
        from datetime import UTC, datetime

        from ttj.kubeapi import KubeClient
        from ttj.timeline.cli import read_job
        from ttj.timeline.cluster import from_cluster
        from ttj.timeline.draw import draw
        from ttj.timeline.text import render

        client = KubeClient.from_kubeconfig(str(self.stack.kubeconfig))
        try:
            read = read_job(client, self.namespace, self.name)
        finally:
            client.close()
        timeline = self.timeline
        if read is not None:
            timeline = from_cluster(*read, now=datetime.now(UTC))
            timeline.refine(self.timeline)
        (self.out / "timeline.txt").write_text(render(timeline, title))
        return draw(timeline, self.out / "timeline.png", title)

    def summarise(self, status: dict[str, Any]) -> int:
        elapsed = time.monotonic() - self.began
        progress = status.get("progress") or {}
        cost = status.get("cost") or {}
        phase = status.get("phase") or "Pending"
        succeeded = phase == "Succeeded"
        picture = self.draw(f"ttj demo: {self.name} ({phase})")
        rows = [
            ("result", "succeeded" if succeeded else f"NOT succeeded (phase {phase})"),
            ("global steps", f"{progress.get('globalStep', 0)} of {self.train_steps}"),
            ("last checkpoint", f"step {progress.get('checkpointStep', '-')} at {progress.get('checkpointPath', '-')}"),
            ("preemptions", str(status.get("preemptions", 0))),
            ("replacements", str(status.get("replacements", 0))),
            ("chief elections", str(status.get("chiefElections", 0))),
            ("steps lost", str(self.timeline.steps_lost())),
            ("time", f"{elapsed:.0f} s"),
            ("cost", format_usd(float(cost.get("usd") or 0))),
            ("on-demand equivalent", format_usd(float(cost.get("onDemandEquivalentUSD") or 0))),
            ("saved, net of preemptions", format_usd(float((status.get("savings") or {}).get("netUSD") or 0))),
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


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt  # so that the cluster and operator it started are stopped too


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    demo = Demo(args)
    try:
        return demo.run()
    except KeyboardInterrupt:
        print("\nttj demo: interrupted", file=sys.stderr)
        return 130
    except RuntimeError as exc:
        print(f"\nttj demo: {exc}", file=sys.stderr)
        return 1
    finally:
        demo.stack.stop()
