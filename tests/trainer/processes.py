"""Launches real trainer processes (``python -m ttj_trainer``) on localhost, one 127.0.0.x address per pod."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ttj_contract import Env, Role, ps_name, worker_hostname
from ttj_trainer.config import Knob


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


class TrainerJob:
    """One job's pods as local processes: PS tasks and worker slots, with the env the operator would give."""

    def __init__(
        self,
        workdir: Path,
        kubeconfig: Path,
        *,
        slots: int = 3,
        ps_count: int = 1,
        job_name: str = "job",
        namespace: str = "default",
        **settings: Any,
    ) -> None:
        self.workdir = workdir
        self.kubeconfig = kubeconfig
        self.job_name = job_name
        self.namespace = namespace
        # The port a worker serves on must be unique on this host: TF's gRPC server binds 0.0.0.0.
        self.ps_addresses = [f"127.0.0.1:{free_port()}" for _ in range(ps_count)]
        self.worker_addresses = [f"127.0.0.{10 + i}:{free_port()}" for i in range(slots)]
        self.checkpoint_uri = str(workdir / "checkpoints")
        # Keyword arguments name variables as the environment does (TTJ_TRAIN_STEPS="240").
        self.settings: dict[str, str] = {
            Env.MODEL: "small-cnn",
            Env.DATASET: "synthetic",
            Env.TRAIN_STEPS: "100000",
            Env.BATCH_SIZE: "16",
            Env.LEARNING_RATE: "0.02",
            Env.LEARNING_RATE_SCALING: "activeWorkers",
            Env.CHECKPOINT_URI: self.checkpoint_uri,
            Env.CHECKPOINT_INTERVAL_STEPS: "50",
            Env.CHECKPOINT_INTERVAL_SECONDS: "0",
            Env.DESIRED_WORKERS: str(slots),
            Knob.METRICS_PORT: "0",
            Knob.LEASE_POLL_SECONDS: "0.5",
        } | {k: str(v) for k, v in settings.items()}
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.generation: dict[str, int] = {}

    def pod_name(self, role: str, index: int) -> str:
        """The pod's stable hostname (one process per slot here, so no incarnations)."""
        return ps_name(self.job_name, index) if role == Role.PS else worker_hostname(self.job_name, index)

    def env(self, role: str, index: int) -> dict[str, str]:
        address = (self.ps_addresses if role == Role.PS else self.worker_addresses)[index]
        tf_config = {
            "cluster": {Role.PS: self.ps_addresses, Role.WORKER: self.worker_addresses},
            "task": {"type": role, "index": index},
        }
        env = {k: v for k, v in os.environ.items() if not k.startswith("TTJ_") and k not in set(Env)}
        env |= self.settings | {
            Env.TF_CONFIG: json.dumps(tf_config),
            Env.POD_NAME: self.pod_name(role, index),
            Env.POD_NAMESPACE: self.namespace,
            Env.POD_IP: address.rsplit(":", 1)[0],
            Env.JOB_NAME: self.job_name,
            "KUBECONFIG": str(self.kubeconfig),
        }
        return env

    def start(self, role: str, index: int, **overrides: str) -> subprocess.Popen[bytes]:
        name = self.pod_name(role, index)
        generation = self.generation.get(name, 0) + 1
        self.generation[name] = generation
        log = open(self.workdir / f"{name}.{generation}.log", "wb")  # noqa: SIM115 - the child owns it
        process = subprocess.Popen(
            [sys.executable, "-m", "ttj_trainer"],
            env=self.env(role, index) | overrides,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.processes[name] = process
        return process

    def log(self, role: str, index: int) -> str:
        name = self.pod_name(role, index)
        return (self.workdir / f"{name}.{self.generation[name]}.log").read_text(errors="replace")

    def logs(self) -> list[dict[str, Any]]:
        """Every JSON log line of every process so far, in no particular order."""
        entries = []
        for path in sorted(self.workdir.glob("*.log")):
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith("{"):
                    with contextlib.suppress(json.JSONDecodeError):
                        entries.append(json.loads(line))
        return entries

    def signal(self, role: str, index: int, sig: int) -> None:
        self.processes[self.pod_name(role, index)].send_signal(sig)

    def wait(self, role: str, index: int, timeout: float) -> int:
        return self.processes[self.pod_name(role, index)].wait(timeout)

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
        for process in self.processes.values():
            process.wait(10)

    def dump_logs(self, tail: int = 30) -> str:
        out = []
        for path in sorted(self.workdir.glob("*.log")):
            lines = path.read_text(errors="replace").splitlines()[-tail:]
            out.append(f"==== {path.name}\n" + "\n".join(lines))
        return "\n".join(out)
