"""The real kubectl binary against the cluster: apply, get (server-side tables), describe, scale, delete."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from ttj_contract import format_usd

from .conftest import NO_SCHEDULER, minimal_job

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
        "spec": {
            "schedulerName": NO_SCHEDULER,  # stays Pending on any cluster
            "containers": [{"name": "c", "image": "busybox", "env": [{"name": "A", "value": "1"}]}],
        },
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
    assert header == ["NAME", "PHASE", "REASON", "WORKERS", "CHIEF", "STEP", "OF", "COST", "ETA", "AGE"]
    usd = 0.0023326063027777778
    running = {"type": "Running", "status": "False", "reason": "WaitingForWorkers", "message": "",
               "lastTransitionTime": "2026-11-28T12:00:00Z"}  # fmt: skip
    created = {**running, "type": "Created", "status": "True", "reason": "ChildrenCreated"}
    eta = {"p50": "2026-12-04T08:00:00Z", "p90": "2026-12-04T09:00:30Z"}
    status = {"status": {"phase": "Running", "cost": {"usd": usd, "summary": format_usd(usd)},
                         "conditions": [created, running], "progress": {"globalStep": 10, "eta": eta}}}  # fmt: skip
    kubectl(kubeconfig, "-n", namespace, "patch", "ttj", "kjob", "--subresource=status", "--type=merge",
            "-p", json.dumps(status))  # fmt: skip
    row = kubectl(kubeconfig, "-n", namespace, "get", "ttj", "kjob", "--no-headers").stdout.split()
    assert "$0.0023" in row, f"money reads as money in the COST column: {row}"
    assert "2026-12-04T09:00:30Z" in row, f"the p90 completion in the ETA column: {row}"
    assert row[1:3] == ["Running", "WaitingForWorkers"], f"the Running condition's reason beside the phase: {row}"
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


REPO = Path(__file__).resolve().parents[2]


def test_kubectl_apply_the_examples_directory(kubeconfig: str, ttj_crd: dict[str, Any]) -> None:
    """`kubectl apply -f examples/` as the README says; examples/full.yaml names namespace default."""
    examples = str(REPO / "examples")
    dry = kubectl(kubeconfig, "apply", "--dry-run=server", "-f", examples).stdout
    assert dry.count("(server dry run)") == 4, dry
    try:
        out = kubectl(kubeconfig, "apply", "-f", examples).stdout
        for name in ("demo", "resnet32-full", "my-model-mixed", "resnet32-cifar10"):
            assert f"transienttrainingjob.transient.training/{name} created" in out
        table = kubectl(kubeconfig, "get", "ttj", "resnet32-full", "demo").stdout.splitlines()
        assert table[0].split() == ["NAME", "PHASE", "REASON", "WORKERS", "CHIEF", "STEP", "OF", "COST", "ETA", "AGE"]
        assert [row.split()[0] for row in table[1:]] == ["resnet32-full", "demo"]
        refused = kubectl(kubeconfig, "scale", "ttj/resnet32-full", "--replicas=9", check=False)
        assert refused.returncode != 0
        assert "workers.replicas must not exceed workers.maxReplicas" in refused.stderr
        assert "scaled" in kubectl(kubeconfig, "scale", "ttj/resnet32-full", "--replicas=8").stdout
        replicas = kubectl(kubeconfig, "get", "ttj/resnet32-full", "-o", "jsonpath={.spec.workers.replicas}").stdout
        assert replicas == "8"
        described = kubectl(kubeconfig, "describe", "ttj", "resnet32-full").stdout
        assert "Max Replicas:" in described
        assert "t4-spot" in described
    finally:
        out = kubectl(kubeconfig, "delete", "--ignore-not-found", "-f", examples).stdout
    assert "deleted" in out
    assert "resnet32-full" not in kubectl(kubeconfig, "get", "ttj").stdout


def test_kubectl_apply_f_on_the_crds_directory(kubeconfig: str, ttj_crd: dict[str, Any]) -> None:
    """`kubectl apply -f crds/`, the idiom many projects document, reads the CRD and nothing else."""
    crds = str(Path(__file__).resolve().parents[2] / "crds")
    out = kubectl(kubeconfig, "apply", "--dry-run=server", "-f", crds).stdout.strip().splitlines()
    crd = "customresourcedefinition.apiextensions.k8s.io/transienttrainingjobs.transient.training"
    assert out in ([f"{crd} configured (server dry run)"], [f"{crd} unchanged (server dry run)"]), out
    assert "transienttrainingjobs.transient.training" in kubectl(kubeconfig, "kustomize", crds).stdout


def test_kubectl_explain_reads_the_crd_descriptions(kubeconfig: str, ttj_crd: dict[str, Any]) -> None:
    explained = kubectl(kubeconfig, "explain", "ttj.spec.workers").stdout
    assert "KIND:       TransientTrainingJob" in explained
    assert "FIELD: workers <Object>" in explained
    assert "FIELDS:" in explained
    schema = ttj_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    workers = schema["properties"]["spec"]["properties"]["workers"]
    for field, definition in workers["properties"].items():
        assert f"  {field}\t<" in explained, field
        first_words = " ".join(definition["description"].split()[:3])
        assert first_words in " ".join(explained.split()), (field, first_words)
    top = kubectl(kubeconfig, "explain", "ttj").stdout
    assert "status\t<Object>" in top
    nested = kubectl(kubeconfig, "explain", "ttj.spec.workers.tolerations").stdout
    assert "FIELD: tolerations <[]Object>" in nested


def test_kubectl_shows_events_from_both_apis(kubeconfig: str, ttj_crd: dict[str, Any], namespace: str) -> None:
    """Events written through core/v1 (kopf's, the kubelet's) and events.k8s.io/v1 both appear in `kubectl get
    events` and in the Events section of `kubectl describe`."""
    job = minimal_job("evjob")
    kubectl(kubeconfig, "-n", namespace, "apply", "-f", "-", stdin=yaml.safe_dump(job))
    uid = kubectl(kubeconfig, "-n", namespace, "get", "ttj", "evjob", "-o", "jsonpath={.metadata.uid}").stdout
    regarding = {
        "apiVersion": "transient.training/v1alpha1",
        "kind": "TransientTrainingJob",
        "name": "evjob",
        "namespace": namespace,
        "uid": uid,
    }
    core_event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "evjob.core"},
        "involvedObject": regarding,
        "reason": "WorkerPreempted",
        "message": "worker slot 2 lost its node",
        "type": "Warning",
        "source": {"component": "ttj-operator"},
        "firstTimestamp": "2026-11-21T10:00:00Z",
        "lastTimestamp": "2026-11-21T10:00:00Z",
        "count": 1,
    }
    new_event = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "evjob.new"},
        "eventTime": "2026-11-21T10:00:01.000000Z",
        "reportingController": "transient.training/operator",
        "reportingInstance": "ttj-operator-0",
        "action": "Elect",
        "reason": "ChiefElected",
        "note": "evjob-worker-1-0 is the chief",
        "type": "Normal",
        "regarding": regarding,
    }
    for event in (core_event, new_event):
        kubectl(kubeconfig, "-n", namespace, "create", "-f", "-", stdin=yaml.safe_dump(event))
    listed = kubectl(kubeconfig, "-n", namespace, "get", "events").stdout
    assert listed.splitlines()[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    for text in ("WorkerPreempted", "worker slot 2 lost its node", "ChiefElected", "evjob-worker-1-0 is the chief"):
        assert text in listed
    assert "transienttrainingjob/evjob" in listed
    # a real control plane writes Events of its own into the namespace (its controllers'): only the job's count
    about_the_job = "--field-selector=regarding.name=evjob"
    new_api = kubectl(
        kubeconfig, "-n", namespace, "get", "events.v1.events.k8s.io", about_the_job, "-o", "name"
    ).stdout.split()
    assert sorted(new_api) == ["event.events.k8s.io/evjob.core", "event.events.k8s.io/evjob.new"]
    described = kubectl(kubeconfig, "-n", namespace, "describe", "ttj", "evjob").stdout
    events_section = described.split("Events:", 1)[1]
    assert "WorkerPreempted" in events_section
    assert "worker slot 2 lost its node" in events_section
    assert "ChiefElected" in events_section
    assert "evjob-worker-1-0 is the chief" in events_section
