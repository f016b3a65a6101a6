"""kopf, unchanged, runs a trivial handler against the cluster (a subprocess: `python -m kopf run`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from kubernetes import client

from .conftest import wait_for

HANDLER = Path(__file__).with_name("kopf_handler.py")


def test_kopf_handles_create_and_update(
    kubeconfig: str, core: client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    log = (tmp_path / "kopf.log").open("w")
    env = {**os.environ, "KUBECONFIG": kubeconfig}
    process = subprocess.Popen(
        [sys.executable, "-m", "kopf", "run", "--standalone", "--namespace", namespace, str(HANDLER)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        core.create_namespaced_config_map(
            namespace, {"metadata": {"name": "k", "labels": {"ttj-kopf": "yes"}}, "data": {"a": "1"}}
        )

        def annotated(key: str) -> str | None:
            annotations = core.read_namespaced_config_map("k", namespace).metadata.annotations or {}
            return annotations.get(key)

        assert wait_for(lambda: annotated("ttj-kopf/seen"), timeout=60, what="kopf's create handler") == "k"
        core.patch_namespaced_config_map("k", namespace, {"data": {"b": "2"}})
        assert wait_for(lambda: annotated("ttj-kopf/data"), timeout=60, what="kopf's update handler") == "a,b"

    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
    # kopf's finalizer would block the namespace's deletion now that kopf is gone
    core.patch_namespaced_config_map("k", namespace, {"metadata": {"finalizers": None}})
