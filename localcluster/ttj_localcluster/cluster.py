"""``LocalCluster``: the API server plus add-ons (node pools, scheduler, controllers, kubelet simulation…),
usable from sync code (own thread and event loop) or async code (``await cluster.astart()``)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import tempfile
import threading
from collections.abc import Sequence
from types import TracebackType
from typing import Protocol

from .apiserver import ApiServer
from .apiserver.faults import FaultInjector


class Addon(Protocol):
    """Something that runs beside the API server as a client of it (started after it is ready)."""

    def start(self, kubeconfig_path: str) -> None: ...

    def stop(self) -> None: ...


def kubeconfig_text(url: str, name: str = "ttj-local", token: str | None = None, ca_pem: bytes | None = None) -> str:
    """The kubeconfig as YAML, written by hand: importing a YAML library would delay the start by more than
    the server itself takes to start. Scalars are JSON strings, which YAML reads as double-quoted scalars."""
    q = json.dumps
    user = f"  user:\n    token: {q(token)}\n" if token else "  user: {}\n"
    authority = f"    certificate-authority-data: {q(base64.b64encode(ca_pem).decode())}\n" if ca_pem else ""
    return (
        "apiVersion: v1\n"
        "kind: Config\n"
        "clusters:\n"
        f"- name: {q(name)}\n"
        "  cluster:\n"
        f"    server: {q(url)}\n"
        f"{authority}"
        "users:\n"
        f"- name: {q(name)}\n"
        f"{user}"
        "contexts:\n"
        f"- name: {q(name)}\n"
        "  context:\n"
        f"    cluster: {q(name)}\n"
        f"    user: {q(name)}\n"
        "    namespace: default\n"
        f"current-context: {q(name)}\n"
        "preferences: {}\n"
    )


class LocalCluster:
    """The embedded cluster. ``with LocalCluster() as cluster:`` starts it in a background thread."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        addons: Sequence[Addon] = (),
        kubeconfig_path: str | None = None,
        history_size: int | None = None,
        bookmark_interval_seconds: float = 5.0,
        authorization_mode: str = "AlwaysAllow",
        tls: bool | None = None,
    ) -> None:
        self.server = ApiServer(
            host,
            port,
            history_size=history_size,
            bookmark_interval_seconds=bookmark_interval_seconds,
            authorization_mode=authorization_mode,
            tls=tls,
        )
        self.addons = list(addons)
        self._kubeconfig_path = kubeconfig_path
        self._own_kubeconfig: str | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started_addons: list[Addon] = []

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def admin_token(self) -> str:
        """The bearer token of the kubeconfig's user (system:masters), for requests made without the kubeconfig."""
        return self.server.access.authenticator.admin_token

    @property
    def faults(self) -> FaultInjector:
        """Fault injection, controllable from any thread."""
        return self.server.faults

    @property
    def kubeconfig_path(self) -> str:
        """Where the kubeconfig was written (a temporary file unless one was asked for)."""
        if self._kubeconfig_path is None:
            fd, path = tempfile.mkstemp(prefix="ttj-local-", suffix=".kubeconfig")
            os.close(fd)
            self._kubeconfig_path = self._own_kubeconfig = path
            self.write_kubeconfig(path)
        return self._kubeconfig_path

    def restart_watch_caches(self) -> None:
        """What an apiserver restart does to watches: every resource's watch cache starts again from now (a
        watch resuming from an earlier version is answered 410 Gone and its client must list again), and
        the watch streams open now end. Callable from any thread while the cluster runs."""
        done = threading.Event()

        def restart() -> None:
            self.server.store.restart_watch_caches()
            done.set()

        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(restart)
            done.wait(10)
        else:
            restart()
        self.faults.drop_watches()

    def write_kubeconfig(self, path: str) -> str:
        """Write a kubeconfig for this cluster (atomically: readers never see half a file)."""
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".kubeconfig-")
        with os.fdopen(fd, "w") as handle:
            certificates = self.server.certificates
            handle.write(
                kubeconfig_text(
                    self.url,
                    token=self.server.access.authenticator.admin_token,
                    ca_pem=certificates.ca_pem if certificates is not None else None,
                )
            )
        os.replace(tmp, path)
        return path

    # -- sync use (own thread) ---------------------------------------------------------------------

    def start(self) -> LocalCluster:
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self.server.start())
            except BaseException as exc:
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self.server.stop())
                loop.close()

        self._thread = threading.Thread(target=run, name="ttj-local-apiserver", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise RuntimeError(f"the local cluster's API server did not start: {failure[0]}") from failure[0]
        self._after_server_started()
        return self

    def stop(self) -> None:
        self._stop_addons()
        if self._thread is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._thread = None
        self._remove_own_kubeconfig()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- async use (the caller's loop) ------------------------------------------------------------

    async def astart(self) -> LocalCluster:
        """Serve from the running event loop; add-ons start in a worker thread (their start() may block)."""
        await self.server.start()
        await asyncio.to_thread(self._after_server_started)
        return self

    async def astop(self) -> None:
        await asyncio.to_thread(self._stop_addons)
        await self.server.stop()
        self._remove_own_kubeconfig()

    async def __aenter__(self) -> LocalCluster:
        return await self.astart()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.astop()

    # -- shared ------------------------------------------------------------------------------------

    def start_addons(self, addons: Sequence[Addon]) -> None:
        """Start more add-ons (in order) on a running cluster; they are stopped with it, in reverse order.

        ``ttj local-cluster`` writes its kubeconfig first and starts the node add-ons with this afterwards, so
        that the API answers before the add-ons' imports (the kubernetes client) are paid for.
        """
        path = self.kubeconfig_path
        for addon in addons:
            if addon not in self.addons:
                self.addons.append(addon)
            addon.start(path)
            self._started_addons.append(addon)

    def _after_server_started(self) -> None:
        if self._kubeconfig_path is not None:
            self.write_kubeconfig(self._kubeconfig_path)
        path = self.kubeconfig_path
        try:
            for addon in self.addons:
                addon.start(path)
                self._started_addons.append(addon)
        except BaseException:
            self.stop()
            raise

    def _stop_addons(self) -> None:
        while self._started_addons:
            self._started_addons.pop().stop()

    def _remove_own_kubeconfig(self) -> None:
        if self._own_kubeconfig is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._own_kubeconfig)
            self._own_kubeconfig = None
            self._kubeconfig_path = None
