"""A test double of the Kubernetes API serving one Lease: GET, merge PATCH and PUT, with resourceVersion checks.

Only what the trainer uses (see ttj_trainer.lease). It speaks real HTTP, so the trainer's official
kubernetes client is exercised end to end; tests reach it through a kubeconfig file. Extra "doors" (more
listening ports on the same Lease, each with its own kubeconfig) let a test cut one trainer's API access
while the others keep theirs: a cut door answers 503.
"""

from __future__ import annotations

import copy
import json
import threading
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ttj.mergepatch import apply_merge_patch
from ttj_contract import ANNOTATION_PROGRESS, LeaseProgress, format_time


def read_progress(lease: dict[str, Any]) -> LeaseProgress | None:
    """The chief's report on ``lease``, read as the operator reads it; a malformed one fails the test."""
    raw = (lease["metadata"].get("annotations") or {}).get(ANNOTATION_PROGRESS)
    progress = LeaseProgress.from_annotation(raw)
    assert raw is None or progress is not None, f"malformed progress annotation: {raw!r}"
    return progress


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Trainers are killed mid-request on purpose (SIGKILL tests); a broken pipe is expected then.
        pass


class LeaseDouble:
    def __init__(
        self,
        namespace: str,
        name: str,
        holder: str | None = None,
        duration: int = 15,
        created: datetime | None = None,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.lock = threading.Lock()
        self.version = 1
        self.lease: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "resourceVersion": "1",
                "annotations": {},
                "uid": str(uuid.uuid4()),
                "creationTimestamp": format_time(created or datetime.now(UTC)),
            },
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "leaseTransitions": 0},
        }
        self.patches = 0
        self.conflicts = 0
        self.server = _QuietServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.doors: list[_QuietServer] = []
        self.cut_doors: set[int] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> LeaseDouble:
        self.thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        for server in [self.server, *self.doors]:
            server.shutdown()
            server.server_close()

    def door(self, path: Path) -> tuple[int, Path]:
        """Another way in to the same Lease, with its own kubeconfig at ``path``; returns (door, kubeconfig)."""
        number = len(self.doors)
        server = _QuietServer(("127.0.0.1", 0), self._handler(door=number))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.doors.append(server)
        return number, self._write_kubeconfig(path, f"http://127.0.0.1:{server.server_address[1]}")

    def cut(self, door: int, cut: bool = True) -> None:
        """Every request through ``door`` fails with 503 while cut."""
        if cut:
            self.cut_doors.add(door)
        else:
            self.cut_doors.discard(door)

    def write_kubeconfig(self, path: Path) -> Path:
        return self._write_kubeconfig(path, self.url)

    def _write_kubeconfig(self, path: Path, url: str) -> Path:
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "double", "cluster": {"server": url}}],
                    "users": [{"name": "double", "user": {"token": "test"}}],
                    "contexts": [{"name": "double", "context": {"cluster": "double", "user": "double"}}],
                    "current-context": "double",
                }
            )
        )
        return path

    # -- what tests (playing the operator) do --------------------------------------------------------------
    def _bump(self) -> None:
        self.version += 1
        self.lease["metadata"]["resourceVersion"] = str(self.version)

    def elect(self, holder: str) -> int:
        """Makes ``holder`` the chief in a new epoch, as the operator does; returns the epoch."""
        with self.lock:
            spec = self.lease["spec"]
            spec["holderIdentity"] = holder
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
            spec.pop("renewTime", None)
            self._bump()
            return int(spec["leaseTransitions"])

    def annotate(self, key: str, value: str) -> None:
        with self.lock:
            self.lease["metadata"]["annotations"][key] = value
            self._bump()

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return copy.deepcopy(self.lease)

    def progress(self) -> LeaseProgress | None:
        """The chief's report, read as the operator reads it."""
        return read_progress(self.snapshot())

    # -- HTTP --------------------------------------------------------------------------------------------
    def _handler(self, door: int | None = None) -> type[BaseHTTPRequestHandler]:
        double = self
        path = f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _status(self, code: int, reason: str, message: str) -> None:
                self._send(
                    code,
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "status": "Failure",
                        "reason": reason,
                        "code": code,
                        "message": message,
                    },
                )

            def _body(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(length) or b"{}")

            def _cut(self) -> bool:
                if door is not None and door in double.cut_doors:
                    self._status(503, "ServiceUnavailable", "this door is cut")
                    return True
                return False

            def do_GET(self) -> None:
                if self._cut():
                    return None
                if self.path.split("?")[0] != path:
                    return self._status(404, "NotFound", f"{self.path} not found")
                self._send(200, double.snapshot())
                return None

            def _write(self, new: dict[str, Any], claimed_version: str | None) -> None:
                if claimed_version and claimed_version != double.lease["metadata"]["resourceVersion"]:
                    double.conflicts += 1
                    return self._status(409, "Conflict", "the object has been modified")
                new["metadata"]["name"] = double.name
                new["metadata"]["namespace"] = double.namespace
                double.lease = new
                double._bump()
                double.patches += 1
                self._send(200, copy.deepcopy(new))
                return None

            def do_PATCH(self) -> None:
                if self._cut():
                    return None
                if self.path.split("?")[0] != path:
                    return self._status(404, "NotFound", f"{self.path} not found")
                if "merge-patch" not in (self.headers.get("Content-Type") or ""):
                    return self._status(415, "UnsupportedMediaType", "this double speaks merge-patch only")
                patch = self._body()
                with double.lock:
                    claimed = (patch.get("metadata") or {}).get("resourceVersion")
                    self._write(apply_merge_patch(double.lease, patch), claimed)
                return None

            def do_PUT(self) -> None:
                if self.path.split("?")[0] != path:
                    return self._status(404, "NotFound", f"{self.path} not found")
                body = self._body()
                with double.lock:
                    self._write(body, (body.get("metadata") or {}).get("resourceVersion"))
                return None

        return Handler
