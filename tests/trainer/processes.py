"""Launches real trainer processes (``python -m ttj_trainer``) on localhost, one 127.0.0.x address per pod."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.ports import free_port
from ttj_contract import Env, Role, ps_name, worker_hostname
from ttj_trainer.config import Knob


def wait_for(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


class TrainerJob:
    """One job's pods as local processes: PS tasks and worker slots, with the env the operator would give.

    A PS process that exits without being told to is started again, as the kubelet restarts the container of
    the PS Deployment's pod (restartPolicy Always); each restart is a warning in the test report. Workers
    are never restarted: that is the operator's job, and the tests play it.
    """

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
        self.worker_addresses = [f"127.0.0.{10 + i}:{free_port(f'127.0.0.{10 + i}')}" for i in range(slots)]
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
        #: How each process had ended when the job was stopped (None: it was still running, and was killed).
        self.ended: dict[str, int | None] = {}
        #: PS processes a test signalled: they stay down until the test starts them again.
        self.stopped_on_purpose: set[str] = set()
        #: (PS pod name, its exit code) for every restart of a PS that ended by itself.
        self.restarts: list[tuple[str, int]] = []
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None

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
        with self._lock:
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
            self.stopped_on_purpose.discard(name)
        if role == Role.PS and self._supervisor is None:
            self._supervisor = threading.Thread(target=self._restart_exited_ps, name=f"{name}-kubelet", daemon=True)
            self._supervisor.start()
        return process

    def _restart_exited_ps(self) -> None:
        while not self._stopping.wait(0.5):
            with self._lock:
                for index in range(len(self.ps_addresses)):
                    name = self.pod_name(Role.PS, index)
                    process = self.processes.get(name)
                    code = process.poll() if process is not None else None
                    if code is None or name in self.stopped_on_purpose or self._stopping.is_set():
                        continue
                    self.restarts.append((name, code))
                    warnings.warn(
                        f"{name} exited by itself with code {code}; restarted as its Deployment's pod would be "
                        f"(log: {self.workdir / f'{name}.{self.generation[name]}.log'})",
                        stacklevel=1,
                    )
                    self.start(Role.PS, index)

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
        name = self.pod_name(role, index)
        with self._lock:
            self.stopped_on_purpose.add(name)
            self.processes[name].send_signal(sig)

    def wait(self, role: str, index: int, timeout: float) -> int:
        return self.processes[self.pod_name(role, index)].wait(timeout)

    def stop_all(self) -> None:
        self._stopping.set()
        if self._supervisor is not None:
            self._supervisor.join()
        self.ended = {name: process.poll() for name, process in self.processes.items()}
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
        for process in self.processes.values():
            process.wait(10)

    def dump_logs(self, tail: int = 30) -> str:
        out = [f"exit codes when stopped (None: still running): {self.ended}; PS restarts: {self.restarts}"]
        for path in sorted(self.workdir.glob("*.log")):
            lines = path.read_text(errors="replace").splitlines()[-tail:]
            out.append(f"==== {path.name}\n" + "\n".join(lines))
        return "\n".join(out)
