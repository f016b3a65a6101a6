"""kopf, unchanged, runs a trivial handler against the cluster (a subprocess: `python -m kopf run`)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from ttj_localcluster.cluster import LocalCluster

from .conftest import wait_for

HANDLER = Path(__file__).with_name("kopf_handler.py")


@contextlib.contextmanager
def kopf_running(kubeconfig: str, namespace: str, log_path: Path) -> Iterator[None]:
    """``kopf run`` of the trivial handler on one namespace, stopped at the end."""
    log = log_path.open("w")
    env = {**os.environ, "KUBECONFIG": kubeconfig}
    process = subprocess.Popen(
        [sys.executable, "-m", "kopf", "run", "--verbose", "--standalone", "--namespace", namespace, str(HANDLER)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _annotation(core: client.CoreV1Api, namespace: str, name: str, key: str) -> str | None:
    annotations = core.read_namespaced_config_map(name, namespace).metadata.annotations or {}
    return annotations.get(key)


def _handled(core: client.CoreV1Api, namespace: str, name: str) -> str:
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": name, "labels": {"ttj-kopf": "yes"}}, "data": {"a": "1"}}
    )
    return str(wait_for(lambda: _annotation(core, namespace, name, "ttj-kopf/seen"), timeout=60, what="kopf"))


def _release(core: client.CoreV1Api, namespace: str, *names: str) -> None:
    """kopf's finalizer would block the namespace's deletion now that kopf is gone."""
    for name in names:
        core.patch_namespaced_config_map(name, namespace, {"metadata": {"finalizers": None}})


def test_kopf_handles_create_and_update(
    kubeconfig: str, core: client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    with kopf_running(kubeconfig, namespace, tmp_path / "kopf.log"):
        assert _handled(core, namespace, "k") == "k"
        core.patch_namespaced_config_map("k", namespace, {"data": {"b": "2"}})
        assert wait_for(lambda: _annotation(core, namespace, "k", "ttj-kopf/data"), timeout=60, what="update") == "a,b"
    _release(core, namespace, "k")


def test_local_kopf_lists_again_after_410_gone(
    local_cluster: LocalCluster | None, kubeconfig: str, core: client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    """The operator's framework resumes its watch after the API server's watch caches restart (an apiserver
    restart): the resumed watch is 410 Gone, kopf lists again, and handles what came meanwhile."""
    if local_cluster is None:
        pytest.skip("a real apiserver is not restarted by the tests")
    log = tmp_path / "kopf.log"
    with kopf_running(kubeconfig, namespace, log):
        assert _handled(core, namespace, "before") == "before"
        # a write kopf does not watch: its last version is now older than where the restarted caches begin
        core.patch_namespace(namespace, {"metadata": {"labels": {"moved": "on"}}})
        local_cluster.restart_watch_caches()
        wait_for(lambda: "Restarting the watch-stream" in log.read_text(), timeout=30, what="kopf to see 410 Gone")
        assert _handled(core, namespace, "after") == "after"
    _release(core, namespace, "before", "after")
