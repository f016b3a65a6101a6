"""The container runtime of the local cluster: a pod's containers run as local processes.

- The container's ``command`` + ``args`` (``$(VAR)`` expanded as Kubernetes does) run as given; no
  image is pulled. ``python``/``python3`` as the first word is the Python that runs the cluster
  (``sys.executable``: the venv with ``ttj`` and ``ttj_trainer`` installed), and that venv's ``bin``
  leads ``PATH``. A container without a command whose image is the trainer image runs its entrypoint,
  ``python -m ttj_trainer``.
- Each pod's processes run under ``unshare --mount --uts`` with the pod's hostname, its hosts file
  (see loopback_network.py) bind-mounted on ``/etc/hosts``, and a per-container file bind-mounted at the
  container's ``terminationMessagePath`` (``/dev/termination-log``). Without ``unshare`` (not root),
  processes run plainly: pod IPs still work, DNS names do not.
- stdout and stderr go to ``STATE/pods/<ns>_<name>_<uid>/<container>.log`` (the previous run's log
  is kept as ``.log.previous`` for ``kubectl logs --previous``).
- Each container is its own process group: SIGTERM/SIGKILL reach the whole group.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .pools import now_rfc3339

log = logging.getLogger(__name__)

TRAINER_IMAGE_HINT = "ttj-trainer"
TRAINER_ENTRYPOINT = ("python", "-m", "ttj_trainer")
DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"
MAX_TERMINATION_MESSAGE = 4096  # bytes, as the kubelet caps it
FALLBACK_LOG_LINES = 80

_NAMESPACE_WRAPPER = r"""
set -e
mount --bind "$1" /etc/hosts
if [ -n "$3" ]; then
  mkdir -p "$(dirname "$3")" 2>/dev/null || true
  [ -e "$3" ] || : > "$3" 2>/dev/null || true
  mount --bind "$2" "$3" 2>/dev/null || true
fi
hostname "$4"
if [ -n "$5" ]; then mount --bind "$5" /etc/resolv.conf; fi
shift 5
exec "$@"
"""


def namespaces_available() -> bool:
    return os.geteuid() == 0 and shutil.which("unshare") is not None and shutil.which("mount") is not None


_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand_vars(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: known names are replaced, ``$$`` escapes, others stay."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return _VAR_REF.sub(replace, text)


def container_argv(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """The argv to run for a container, or ValueError when there is nothing runnable."""
    command = [str(c) for c in container.get("command") or []]
    args = [str(a) for a in container.get("args") or []]
    if not command:
        image = str(container.get("image") or "")
        if TRAINER_IMAGE_HINT not in image:
            raise ValueError(
                f"container {container.get('name')!r} has no command, and the local cluster does not run "
                f"images ({image or 'no image'}); give the container a command"
            )
        command = list(TRAINER_ENTRYPOINT)
    argv = [expand_vars(part, env) for part in command + args]
    if argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    return argv


def base_environment(hostname: str, kubeconfig: str | None, program_path: Sequence[str] = ()) -> dict[str, str]:
    """What every container starts from, before the pod's own env (an image's ENV, in effect).

    ``program_path``: directories of the user's own code (``--program-path``), first on ``PYTHONPATH``, as an
    image with ``ENV PYTHONPATH=...`` would have them."""
    venv_bin = str(Path(sys.executable).parent)
    env = {
        "PATH": f"{venv_bin}:{os.environ.get('PATH', '/usr/local/bin:/usr/bin:/bin')}",
        "HOME": os.environ.get("HOME", "/root"),
        "HOSTNAME": hostname,
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "PYTHONUNBUFFERED": "1",
    }
    if kubeconfig:
        env["KUBECONFIG"] = kubeconfig
    # The "image" is the code this cluster runs: a source checkout on PYTHONPATH (a worktree) included.
    python_path = [*program_path, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    if python_path:
        env["PYTHONPATH"] = os.pathsep.join(python_path)
    return env


def signal_exit_code(returncode: int) -> int:
    """Popen's -N for 'killed by signal N' as a container's exit code, 128+N."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass
class ContainerRun:
    """One run of one container (a restart is a new run)."""

    name: str
    argv: list[str]
    log_path: Path
    termination_path: Path
    process: subprocess.Popen[bytes]
    started_at: str
    finished_at: str | None = None
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None

    @property
    def pid(self) -> int:
        return self.process.pid


def _tail(path: Path, lines: int, limit: int) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            data = handle.read()
    except OSError:
        return ""
    text = b"\n".join(data.splitlines()[-lines:]).decode(errors="replace")
    return text[-limit:]


@dataclass
class PodSandbox:
    """A pod's directory, hosts file and hostname: what its containers share."""

    namespace: str
    name: str
    uid: str
    ip: str
    hostname: str
    directory: Path
    hosts_file: Path | None
    runs: dict[str, ContainerRun] = field(default_factory=dict)
    #: the pod's network namespace (netns.py), entered with nsenter; None: the host's network
    netns: str | None = None


class ProcessRuntime:
    """Starts, signals and reaps container processes; calls ``on_exit(sandbox, run)`` when one ends."""

    def __init__(
        self,
        state_dir: Path,
        *,
        kubeconfig: str | None,
        on_exit: Callable[[PodSandbox, ContainerRun], None],
        use_namespaces: bool | None = None,
    ) -> None:
        self.state_dir = state_dir
        self.kubeconfig = kubeconfig
        self.on_exit = on_exit
        self.use_namespaces = namespaces_available() if use_namespaces is None else use_namespaces
        (state_dir / "pods").mkdir(parents=True, exist_ok=True)
        # In its own network namespace a pod cannot reach this machine's DNS server: without this, a lookup
        # of a name that is in no hosts file would wait for timeouts; the pod's own loopback refuses at once.
        self.resolv_conf = state_dir / "resolv.conf"
        self.resolv_conf.write_text(
            "# ttj local cluster: cluster names come from /etc/hosts; no DNS server inside pods\n"
            "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n",
            encoding="utf-8",
        )

    def sandbox(
        self, namespace: str, name: str, uid: str, *, ip: str, hostname: str, hosts_file: Path | None
    ) -> PodSandbox:
        directory = self.state_dir / "pods" / f"{namespace}_{name}_{uid}"
        directory.mkdir(parents=True, exist_ok=True)
        return PodSandbox(namespace, name, uid, ip, hostname, directory, hosts_file)

    @staticmethod
    def log_path(state_dir: Path, namespace: str, name: str, uid: str, container: str) -> Path:
        return state_dir / "pods" / f"{namespace}_{name}_{uid}" / f"{container}.log"

    def start(
        self, sandbox: PodSandbox, container: Mapping[str, Any], env: Mapping[str, str], working_dir: str | None
    ) -> ContainerRun:
        """Start one container; raises ValueError/OSError with a message when it cannot start."""
        name = str(container.get("name") or "container")
        argv = container_argv(container, env)
        log_path = sandbox.directory / f"{name}.log"
        if log_path.exists():
            log_path.replace(log_path.with_name(f"{name}.log.previous"))
        termination_path = sandbox.directory / f"{name}.termination-log"
        termination_path.write_bytes(b"")
        full_argv = list(argv)
        if self.use_namespaces and sandbox.hosts_file is not None:
            in_container_path = str(container.get("terminationMessagePath") or DEFAULT_TERMINATION_MESSAGE_PATH)
            full_argv = [
                "unshare",
                "--mount",
                "--uts",
                "--propagation",
                "private",
                "/bin/sh",
                "-c",
                _NAMESPACE_WRAPPER,
                "ttj-pod",
                str(sandbox.hosts_file),
                str(termination_path),
                in_container_path,
                sandbox.hostname,
                str(self.resolv_conf) if sandbox.netns is not None else "",
                *argv,
            ]
        if sandbox.netns is not None:
            full_argv = ["nsenter", f"--net={sandbox.netns}", *full_argv]
        cwd = working_dir if working_dir and Path(working_dir).is_dir() else str(sandbox.directory)
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                full_argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=dict(env),
                start_new_session=True,  # its own process group, so signals reach its children too
            )
        run = ContainerRun(name, argv, log_path, termination_path, process, now_rfc3339())
        sandbox.runs[name] = run
        threading.Thread(
            target=self._reap, args=(sandbox, run), name=f"reap-{sandbox.name}-{name}", daemon=True
        ).start()
        return run

    def _reap(self, sandbox: PodSandbox, run: ContainerRun) -> None:
        returncode = run.process.wait()
        run.exit_code = signal_exit_code(returncode)
        run.finished_at = now_rfc3339()
        run.reason = "Completed" if run.exit_code == 0 else "Error"
        message = run.termination_path.read_bytes()[:MAX_TERMINATION_MESSAGE].decode(errors="replace").strip()
        run.message = message or None
        try:
            self.on_exit(sandbox, run)
        except Exception:
            log.exception(
                "pod %s/%s: handling the exit of container %s failed", sandbox.namespace, sandbox.name, run.name
            )

    def fallback_message(self, run: ContainerRun) -> str:
        """terminationMessagePolicy FallbackToLogsOnError: the log's last lines."""
        return _tail(run.log_path, FALLBACK_LOG_LINES, MAX_TERMINATION_MESSAGE)

    @staticmethod
    def signal(run: ContainerRun, signum: int) -> None:
        if run.exit_code is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.process.pid, signum)

    def stop(self, sandbox: PodSandbox, grace_seconds: float) -> None:
        """SIGTERM every running container, SIGKILL what is left after the grace period; returns when all ended."""
        running = [r for r in sandbox.runs.values() if r.exit_code is None]
        for run in running:
            self.signal(run, signal.SIGTERM)
        deadline = time.monotonic() + max(0.0, grace_seconds)
        for run in running:
            remaining = deadline - time.monotonic()
            try:
                run.process.wait(timeout=max(0.0, remaining))
            except subprocess.TimeoutExpired:
                self.signal(run, signal.SIGKILL)
        for run in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                run.process.wait(timeout=10)
        # The reaper threads set exit codes; wait for them briefly so callers see final states.
        limit = time.monotonic() + 5
        while any(r.exit_code is None for r in running) and time.monotonic() < limit:
            time.sleep(0.01)

    @staticmethod
    def kill_group_leftovers(sandbox: PodSandbox) -> None:
        """Children that outlived their container's main process die with the pod."""
        for run in sandbox.runs.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(run.process.pid, signal.SIGKILL)


def downward_value(pod: Mapping[str, Any], field_path: str) -> str:
    """A fieldRef value (metadata.name, metadata.labels['k'], status.podIP, spec.nodeName, ...)."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    simple = {
        "metadata.name": metadata.get("name"),
        "metadata.namespace": metadata.get("namespace"),
        "metadata.uid": metadata.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
        "status.podIP": status.get("podIP"),
        "status.hostIP": status.get("hostIP"),
        "status.podIPs": ",".join(i.get("ip", "") for i in status.get("podIPs") or []),
    }
    if field_path in simple:
        return str(simple[field_path] or "")
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", field_path)
    if match:
        return str((metadata.get(match.group(1)) or {}).get(match.group(2), ""))
    raise ValueError(f"unsupported fieldRef fieldPath {field_path!r}")


def resource_value(container: Mapping[str, Any], resource: str, divisor: str | None) -> str:
    """A resourceFieldRef value: the container's limit (or request), divided and rounded up."""
    import math

    from ttj_contract.quantity import parse_quantity

    kind, _, name = resource.partition(".")
    resources = container.get("resources") or {}
    source = resources.get(kind) or {}
    if name not in source and kind == "requests":
        source = resources.get("limits") or {}
    if name not in source:
        # Unset limits read as the node's allocatable in Kubernetes; the local node's size is not known
        # here, so report 0 rather than a made-up figure.
        return "0"
    value = parse_quantity(source[name]) / parse_quantity(divisor or "1")
    return str(math.ceil(value))


def pod_environment(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    base: Mapping[str, str],
    lookup: Callable[[str, str, str, bool], str | None],
) -> dict[str, str]:
    """Base env + env vars of the container with valueFrom resolved; ``lookup(kind, name, key, optional)``
    reads a ConfigMap/Secret key (kind ``configmap``/``secret``). envFrom is applied first, as in Kubernetes."""
    env = dict(base)
    for source in container.get("envFrom") or []:
        prefix = str(source.get("prefix") or "")
        for kind, ref_key in (("configmap", "configMapRef"), ("secret", "secretRef")):
            ref = source.get(ref_key)
            if ref:
                values = lookup(kind, str(ref.get("name")), "*", bool(ref.get("optional")))
                if values:
                    for line in values.splitlines():
                        key, _, value = line.partition("=")
                        env[prefix + key] = value
    for item in container.get("env") or []:
        name = str(item.get("name"))
        if "value" in item:
            env[name] = expand_vars(str(item.get("value") or ""), env)
            continue
        value_from = item.get("valueFrom") or {}
        if "fieldRef" in value_from:
            env[name] = downward_value(pod, str(value_from["fieldRef"].get("fieldPath")))
        elif "resourceFieldRef" in value_from:
            ref = value_from["resourceFieldRef"]
            target = container
            if ref.get("containerName"):
                target = next(
                    (
                        c
                        for c in (pod.get("spec") or {}).get("containers") or []
                        if c.get("name") == ref["containerName"]
                    ),
                    container,
                )
            env[name] = resource_value(target, str(ref.get("resource")), ref.get("divisor"))
        elif "configMapKeyRef" in value_from or "secretKeyRef" in value_from:
            kind, ref = (
                ("configmap", value_from["configMapKeyRef"])
                if "configMapKeyRef" in value_from
                else ("secret", value_from["secretKeyRef"])
            )
            found = lookup(kind, str(ref.get("name")), str(ref.get("key")), bool(ref.get("optional")))
            if found is not None:
                env[name] = found
        else:
            env[name] = ""
    return env
