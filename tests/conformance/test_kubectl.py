"""The real kubectl binary against the cluster: apply, get (server-side tables), describe, scale, delete."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import minimal_job

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


def kubectl(
    kubeconfig: str, *args: str, stdin: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None
    env = {**os.environ, "KUBECONFIG": kubeconfig}
    result = subprocess.run(
        [KUBECTL, *args], input=stdin, capture_output=True, text=True, env=env, timeout=60, check=False
    )
    if check and result.returncode != 0:
        pytest.fail(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr}")
    return result


def test_kubectl_crud_and_tables(kubeconfig: str, ttj_crd: dict[str, Any], namespace: str, tmp_path: Path) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "kpod", "labels": {"app": "k"}},
        "spec": {"containers": [{"name": "c", "image": "busybox", "env": [{"name": "A", "value": "1"}]}]},
    }
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(pod))
    out = kubectl(kubeconfig, "-n", namespace, "apply", "-f", str(manifest)).stdout
    assert "pod/kpod created" in out
    pod["spec"]["containers"][0]["image"] = "busybox:2"
    manifest.write_text(yaml.safe_dump(pod))
    assert "pod/kpod configured" in kubectl(kubeconfig, "-n", namespace, "apply", "-f", str(manifest)).stdout
    table = kubectl(kubeconfig, "-n", namespace, "get", "pods").stdout
    assert table.split("\n")[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert "kpod" in table
    assert "Pending" in table
    image = kubectl(
        kubeconfig, "-n", namespace, "get", "pod", "kpod", "-o", "jsonpath={.spec.containers[0].image}"
    ).stdout
    assert image == "busybox:2"
    described = kubectl(kubeconfig, "-n", namespace, "describe", "pod", "kpod").stdout
    assert "Name:" in described
    assert "kpod" in described
    assert "deleted" in kubectl(kubeconfig, "-n", namespace, "delete", "pod", "kpod", "--wait=false").stdout


def test_kubectl_with_transient_training_jobs(
    kubeconfig: str, ttj_crd: dict[str, Any], namespace: str, tmp_path: Path
) -> None:
    job = minimal_job("kjob", workers={"replicas": 3, "minReplicas": 2, "maxReplicas": 5})
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(job))
    assert "created" in kubectl(kubeconfig, "-n", namespace, "apply", "-f", str(manifest)).stdout
    header = kubectl(kubeconfig, "-n", namespace, "get", "ttj").stdout.split("\n")[0].split()
    assert header == ["NAME", "PHASE", "WORKERS", "CHIEF", "STEP", "COST", "AGE"]
    assert "scaled" in kubectl(kubeconfig, "-n", namespace, "scale", "ttj/kjob", "--replicas=4").stdout
    replicas = kubectl(
        kubeconfig, "-n", namespace, "get", "ttj", "kjob", "-o", "jsonpath={.spec.workers.replicas}"
    ).stdout
    assert replicas == "4"
    refused = kubectl(kubeconfig, "-n", namespace, "scale", "ttj/kjob", "--replicas=1", check=False)
    assert refused.returncode != 0
    assert "workers.minReplicas must not exceed workers.replicas" in refused.stderr
    bad = minimal_job("kbad", workers={"replicas": 1, "minReplicas": 2})
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    refused = kubectl(kubeconfig, "-n", namespace, "apply", "-f", str(tmp_path / "bad.yaml"), check=False)
    assert refused.returncode != 0
    assert "workers.minReplicas must not exceed workers.replicas" in refused.stderr
    described = kubectl(kubeconfig, "-n", namespace, "describe", "ttj", "kjob").stdout
    assert "Train Steps:" in described
    assert "deleted" in kubectl(kubeconfig, "-n", namespace, "delete", "ttj", "kjob").stdout
    assert "kjob" not in kubectl(kubeconfig, "-n", namespace, "get", "ttj").stdout
