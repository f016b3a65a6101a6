"""The local cluster's nodes, scheduler, Deployment controller and kubelets, driven through the API.

The scheduler, the Deployment controller and the kubelet fleet are API clients started as add-ons;
these tests only talk HTTP to the API server (and to the fleet's injection API)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config

from ttj_localcluster.nodes.control import ControlClient
from ttj_localcluster.nodes.netns import PodNetworkNamespaces
from ttj_localcluster.nodes.podstate import SHUTDOWN_MESSAGE
from ttj_localcluster.nodes.pools import GPU_TAINT
from ttj_localcluster.nodes.runtime import namespaces_available

from .conftest import NodesCluster, wait_for

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}

ECHO_SERVER = textwrap.dedent(
    """
    import os, socket
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((os.environ["POD_IP"], 7000)); s.listen()
    while True:
        c, _ = s.accept(); c.sendall(socket.gethostname().encode()); c.close()
    """
)
ECHO_CLIENT = textwrap.dedent(
    """
    import os, socket, sys, time
    print("ME=" + os.environ["ME"])
    from kubernetes import client, config  # the API, through the KUBECONFIG the cluster gives pods
    config.load_kube_config()
    me = client.CoreV1Api().read_namespaced_pod(os.environ["ME"], "default")
    print("API sees me on", me.spec.node_name, flush=True)
    for name in sys.argv[1:]:
        deadline = time.time() + 20
        while True:
            try:
                c = socket.create_connection((name, 7000), timeout=2)
                print(name, "->", c.recv(100).decode(), flush=True); break
            except OSError as exc:
                if time.time() > deadline:
                    open("/dev/termination-log", "w").write("cannot reach " + name)
                    sys.exit(2)
                time.sleep(0.1)
    """
)
SIGTERM_AWARE = textwrap.dedent(
    """
    import signal, sys, time
    def on_term(*_):
        print("got SIGTERM", flush=True)
        sys.exit(143)
    signal.signal(signal.SIGTERM, on_term)
    print("running", flush=True)
    while True:
        time.sleep(1)
    """
)
STUBBORN = (
    "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('running', flush=True)\ntime.sleep(600)"
)


def pod_manifest(name: str, code: str, **spec: Any) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "python:3.11",
        "command": ["python", "-c", code],
        "args": spec.pop("args", []),
        "env": spec.pop("env", []),
        "resources": spec.pop("resources", {}),
    }
    labels = spec.pop("labels", {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [container], **spec},
    }


def condition(pod: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in pod.get("status", {}).get("conditions") or [] if c["type"] == kind), None)


def phase(c: NodesCluster, name: str) -> str | None:
    pod = c.pod(name)
    return pod["status"].get("phase") if pod else None


POD_IP_ENV = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]


def test_nodes_look_like_gke_pools(nodes_cluster: NodesCluster) -> None:
    nodes = nodes_cluster.kube.request("GET", "/api/v1/nodes")["items"]
    gpu = [n for n in nodes if n["metadata"]["labels"].get("cloud.google.com/gke-nodepool") == "gpu"]
    assert len(gpu) == 2
    for node in gpu:
        labels = node["metadata"]["labels"]
        assert labels["cloud.google.com/gke-spot"] == "true"
        assert labels["cloud.google.com/gke-accelerator"] == "nvidia-tesla-t4"
        assert node["spec"]["taints"] == [GPU_TAINT]
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "1"
        assert condition(node, "Ready")["status"] == "True"  # type: ignore[index]
        lease = nodes_cluster.kube.get(
            f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node['metadata']['name']}"
        )
        assert lease is not None
        assert lease["spec"]["holderIdentity"] == node["metadata"]["name"]
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", lease["spec"]["renewTime"])  # a MicroTime


@pytest.mark.skipif(not namespaces_available(), reason="DNS names need root and unshare (per-pod /etc/hosts)")
def test_deployment_pods_run_on_the_right_pool_and_reach_each_other(nodes_cluster: NodesCluster) -> None:
    c = nodes_cluster
    api = config.new_client_from_config(config_file=c.kubeconfig)  # the official client, typed models
    apps, core = k8s.AppsV1Api(api), k8s.CoreV1Api(api)
    core.create_namespaced_service(
        "default",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "echo"},
            "spec": {"clusterIP": "None", "selector": {"app": "echo"}, "ports": [{"port": 7000}]},
        },
    )
    template = pod_manifest(
        "ignored",
        ECHO_SERVER,
        env=POD_IP_ENV,
        nodeSelector={"cloud.google.com/gke-nodepool": "cpu"},
        labels={"app": "echo"},
    )
    apps.create_namespaced_deployment(
        "default",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "echo"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "echo"}},
                "template": {"metadata": template["metadata"], "spec": template["spec"]},
            },
        },
    )
    # a pod with hostname + subdomain gets <hostname>.<subdomain>.<ns>.svc.cluster.local
    named = pod_manifest(
        "named-pod", ECHO_SERVER, env=POD_IP_ENV, labels={"app": "echo"}, hostname="named", subdomain="echo"
    )
    core.create_namespaced_pod("default", named)

    status = wait_for(
        lambda: (apps.read_namespaced_deployment("echo", "default").status.available_replicas == 2) or None,
        what="2 available replicas",
    )
    assert status
    deployment = apps.read_namespaced_deployment("echo", "default")
    assert deployment.status.ready_replicas == 2
    assert deployment.status.updated_replicas == 2
    replica_sets = apps.list_namespaced_replica_set("default", label_selector="app=echo").items
    assert len(replica_sets) == 1
    rs = replica_sets[0]
    template_hash = rs.metadata.labels["pod-template-hash"]
    assert rs.metadata.name == f"echo-{template_hash}"
    assert rs.metadata.owner_references[0].kind == "Deployment"
    assert rs.metadata.owner_references[0].controller
    pods = core.list_namespaced_pod("default", label_selector=f"pod-template-hash={template_hash}").items
    assert len(pods) == 2
    node_pool = {n.metadata.name: n.metadata.labels["cloud.google.com/gke-nodepool"] for n in core.list_node().items}
    for pod in pods:
        assert pod.metadata.owner_references[0].name == rs.metadata.name
        assert node_pool[pod.spec.node_name] == "cpu"
        assert pod.status.phase == "Running"
        assert pod.status.pod_ip.startswith("10." if c.fleet.podnet is not None else "127.")
    assert len({p.status.pod_ip for p in pods}) == 2
    wait_for(lambda: phase(c, "named-pod") == "Running", what="named pod running")

    # A client on the GPU pool reaches them by Service DNS name, by the pod's stable name and by pod IP.
    targets = [
        "echo.default.svc.cluster.local",
        "named.echo.default.svc.cluster.local",
        "echo",
        *[p.status.pod_ip for p in pods],
    ]
    me_env = [{"name": "ME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    client_pod = pod_manifest(
        "echo-client",
        ECHO_CLIENT,
        args=targets,
        env=me_env,
        restartPolicy="Never",
        tolerations=[GPU_TOLERATION],
        nodeSelector={"cloud.google.com/gke-spot": "true"},
    )
    core.create_namespaced_pod("default", client_pod)
    final = wait_for(
        lambda: phase(c, "echo-client") in ("Succeeded", "Failed") and c.pod("echo-client"), what="client done"
    )
    log = core.read_namespaced_pod_log("echo-client", "default")  # pods/log, proxied to the node's kubelet
    state = final["status"]["containerStatuses"][0]["state"]["terminated"]
    assert final["status"]["phase"] == "Succeeded", (state, log)
    assert state["exitCode"] == 0
    assert state["reason"] == "Completed"
    assert node_pool[final["spec"]["nodeName"]] == "gpu"
    assert f"API sees me on {final['spec']['nodeName']}" in log
    assert core.read_namespaced_pod_log("echo-client", "default", tail_lines=1).count("\n") == 1
    assert "ME=echo-client" in log
    assert "named.echo.default.svc.cluster.local -> named" in log
    for pod in pods:
        assert f"{pod.status.pod_ip} -> {pod.metadata.name}" in log
    api.close()


def test_failing_container_reports_error_and_termination_message(nodes_cluster: NodesCluster) -> None:
    c = nodes_cluster
    code = "open('/dev/termination-log', 'w').write('model diverged'); raise SystemExit(3)"
    c.kube.request("POST", "/api/v1/namespaces/default/pods", body=pod_manifest("failing", code, restartPolicy="Never"))
    pod = wait_for(lambda: phase(c, "failing") == "Failed" and c.pod("failing"), what="pod failed")
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 3
    assert terminated["reason"] == "Error"
    assert terminated["message"] == "model diverged"


def test_pod_wanting_more_gpus_than_any_node_stays_pending(nodes_cluster: NodesCluster) -> None:
    c = nodes_cluster
    greedy = pod_manifest("greedy", "pass", resources={"limits": {"nvidia.com/gpu": 4}}, tolerations=[GPU_TOLERATION])
    c.kube.request("POST", "/api/v1/namespaces/default/pods", body=greedy)
    scheduled = wait_for(lambda: condition(c.pod("greedy") or {}, "PodScheduled"), what="PodScheduled condition")
    assert scheduled["status"] == "False"
    assert scheduled["reason"] == "Unschedulable"
    assert re.fullmatch(r"0/(\d+) nodes are available: \1 Insufficient nvidia\.com/gpu\.", scheduled["message"])
    pod = c.pod("greedy")
    assert pod is not None
    assert pod["status"]["phase"] == "Pending"
    assert not pod["spec"].get("nodeName")
    # The scheduler posts its Event after the status write, as kube-scheduler does: wait for it, not race it.
    wait_for(
        lambda: any(
            e["reason"] == "FailedScheduling" and e["involvedObject"]["name"] == "greedy"
            for e in c.kube.request("GET", "/api/v1/namespaces/default/events")["items"]
        ),
        what="a FailedScheduling Event",
    )
    # without the toleration the GPU nodes' taint is the reason there
    plain = pod_manifest("plain-gpu", "pass", resources={"limits": {"nvidia.com/gpu": 1}})
    c.kube.request("POST", "/api/v1/namespaces/default/pods", body=plain)
    message = wait_for(
        lambda: (condition(c.pod("plain-gpu") or {}, "PodScheduled") or {}).get("message"), what="message"
    )
    assert "node(s) had untolerated taint {nvidia.com/gpu: present}" in message
    assert "Insufficient nvidia.com/gpu" in message


def test_preemption_sigterms_fails_pods_and_removes_the_node(nodes_cluster: NodesCluster) -> None:
    c = nodes_cluster
    node = c.fleet.nodes_of("gpu")[0]
    on_node = {"kubernetes.io/hostname": node}
    c.kube.request(
        "POST",
        "/api/v1/namespaces/default/pods",
        body=pod_manifest(
            "victim", SIGTERM_AWARE, nodeSelector=on_node, tolerations=[GPU_TOLERATION], restartPolicy="Never"
        ),
    )
    c.kube.request(
        "POST",
        "/api/v1/namespaces/default/pods",
        body=pod_manifest(
            "stubborn", STUBBORN, nodeSelector=on_node, tolerations=[GPU_TOLERATION], restartPolicy="Never"
        ),
    )
    for name in ("victim", "stubborn"):
        wait_for(lambda n=name: phase(c, n) == "Running", what=f"{name} running")  # type: ignore[misc]
        log_path = c.fleet.log_file("default", name)
        wait_for(lambda p=log_path: p is not None and "running" in p.read_text(), what=f"{name} started")  # type: ignore[misc]

    control = ControlClient.from_kubeconfig(c.kubeconfig)  # the HTTP injection API, found via the kubeconfig
    answer = control.preempt_pod("default", "victim", wait=True)
    assert answer["node"] == node
    assert answer["done"]
    assert sorted(answer["pods"]) == ["default/stubborn", "default/victim"]

    victim = c.pod("victim")
    assert victim is not None
    assert victim["status"]["phase"] == "Failed"
    assert victim["status"]["reason"] == "Terminated"
    assert victim["status"]["message"] == SHUTDOWN_MESSAGE
    disruption = condition(victim, "DisruptionTarget")
    assert disruption is not None
    assert disruption["status"] == "True"
    assert victim["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 143
    log_path = c.fleet.log_file("default", "victim")
    assert log_path is not None
    assert "got SIGTERM" in log_path.read_text()
    stubborn = c.pod("stubborn")
    assert stubborn is not None
    assert stubborn["status"]["reason"] == "Terminated"
    assert stubborn["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137  # SIGKILL after grace
    assert c.kube.get(f"/api/v1/nodes/{node}") is None
    assert c.kube.get(f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}") is None
    # The pool replaces the VM under a new name.
    restored = wait_for(lambda: len(c.fleet.nodes_of("gpu")) == 2 and c.fleet.nodes_of("gpu"), what="pool restored")
    assert node not in restored
    assert all(c.kube.get(f"/api/v1/nodes/{n}") for n in restored)


def test_deleting_a_pod_sigterms_then_sigkills_after_grace(nodes_cluster: NodesCluster) -> None:
    c = nodes_cluster
    c.kube.request("POST", "/api/v1/namespaces/default/pods", body=pod_manifest("polite", SIGTERM_AWARE))
    c.kube.request(
        "POST", "/api/v1/namespaces/default/pods", body=pod_manifest("deaf", STUBBORN, terminationGracePeriodSeconds=1)
    )
    for name in ("polite", "deaf"):
        wait_for(lambda n=name: phase(c, n) == "Running", what=f"{name} running")  # type: ignore[misc]
        log_path = c.fleet.log_file("default", name)
        wait_for(lambda p=log_path: p is not None and "running" in p.read_text(), what=f"{name} started")  # type: ignore[misc]
    polite_log = c.fleet.log_file("default", "polite")
    for name in ("polite", "deaf"):
        c.kube.delete(f"/api/v1/namespaces/default/pods/{name}")
    wait_for(lambda: c.pod("polite") is None and c.pod("deaf") is None, what="both pods gone")
    assert polite_log is not None
    assert "got SIGTERM" in polite_log.read_text()


def test_rolling_update_replaces_the_replica_set(nodes_cluster: NodesCluster) -> None:
    c = nodes_cluster
    template = pod_manifest("x", "import time; time.sleep(600)", labels={"app": "roll"})
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "roll"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "roll"}},
            "template": {"metadata": template["metadata"], "spec": template["spec"]},
        },
    }
    path = "/apis/apps/v1/namespaces/default/deployments"
    c.kube.request("POST", path, body=deployment)
    wait_for(
        lambda: (c.kube.get(f"{path}/roll") or {}).get("status", {}).get("availableReplicas") == 2, what="available"
    )
    c.kube.merge_patch(
        f"{path}/roll",
        {"spec": {"template": {"spec": {"containers": [{**template["spec"]["containers"][0], "args": ["v2"]}]}}}},
    )

    def rolled() -> bool:
        status = (c.kube.get(f"{path}/roll") or {}).get("status", {})
        sets = c.kube.request("GET", "/apis/apps/v1/namespaces/default/replicasets")["items"]
        mine = [s for s in sets if s["metadata"]["name"].startswith("roll-")]
        return (
            status.get("updatedReplicas") == 2
            and status.get("availableReplicas") == 2
            and status.get("replicas") == 2
            and len(mine) == 2
            and sorted(s["spec"]["replicas"] for s in mine) == [0, 2]
        )

    wait_for(rolled, timeout=60, what="rolled out")
    c.kube.delete(f"{path}/roll")  # the API server's garbage collector removes ReplicaSets and pods
    roll_pods = "/api/v1/namespaces/default/pods"
    wait_for(
        lambda: not c.kube.request("GET", roll_pods, query=[("labelSelector", "app=roll")])["items"],
        what="pods collected",
    )


def test_followed_logs_stream_while_the_container_runs(nodes_cluster: NodesCluster, tmp_path: Path) -> None:
    c = nodes_cluster
    go_on = tmp_path / "go-on"
    code = textwrap.dedent(
        f"""
        import os, time
        print("first", flush=True)
        while not os.path.exists({str(go_on)!r}):
            time.sleep(0.05)
        print("second", flush=True)
        """
    )
    c.kube.request("POST", "/api/v1/namespaces/default/pods", body=pod_manifest("chatty", code, restartPolicy="Never"))
    wait_for(lambda: phase(c, "chatty") == "Running", what="chatty running")
    api = config.new_client_from_config(config_file=c.kubeconfig)
    # pods/log?follow=true, proxied by the API server to the node's kubelet endpoint
    stream = k8s.CoreV1Api(api).read_namespaced_pod_log("chatty", "default", follow=True, _preload_content=False)
    received = b""
    chunks = stream.stream(1024, decode_content=False)
    while b"first" not in received:
        received += next(chunks)
    assert phase(c, "chatty") == "Running"  # what came so far came while the container runs
    go_on.touch()
    received += b"".join(chunks)  # the stream ends with the container
    assert received.decode().split() == ["first", "second"]
    assert phase(c, "chatty") in ("Running", "Succeeded")
    api.close()


def test_control_and_kubelet_endpoint_errors(nodes_cluster: NodesCluster) -> None:
    c = nodes_cluster
    control = ControlClient.from_kubeconfig(c.kubeconfig)
    assert set(control.status()["pools"]) == {"cpu", "gpu"}
    with pytest.raises(RuntimeError, match="no live node named 'nope'"):
        control.preempt_node("nope")
    with pytest.raises(RuntimeError, match="pod default/nope does not exist"):
        control.preempt_pod("default", "nope")
    with pytest.raises(RuntimeError, match="no pool named 'tpu'"):
        control.restore_pool("tpu")
    with pytest.raises(RuntimeError, match='give "node": NAME or "pod"'):
        control._call("POST", "/preempt", {})
    with pytest.raises(RuntimeError, match="the body must be a JSON object"):
        control._call("POST", "/lose", [])  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="unknown path /ttj-local/nope"):
        control._call("GET", "/nope")
    assert control._call("GET", "/status/")["runPods"] is True
    assert c.fleet.control is not None
    kubelet = ControlClient(f"http://127.0.0.1:{c.fleet.control.port}")
    with pytest.raises(RuntimeError, match='container "main" in pod "nope" has no log here'):
        kubelet._call("GET", "/containerLogs/default/nope/main")
    with pytest.raises(RuntimeError, match="use /containerLogs/NAMESPACE/POD/CONTAINER"):
        kubelet._call("GET", "/containerLogs/default")


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")
def test_kubectl_logs_and_errors(nodes_cluster: NodesCluster) -> None:
    c = nodes_cluster
    code = "print('line one'); print('line two')"
    c.kube.request("POST", "/api/v1/namespaces/default/pods", body=pod_manifest("talker", code, restartPolicy="Never"))
    wait_for(lambda: phase(c, "talker") == "Succeeded", what="talker done")
    env = {**os.environ, "KUBECONFIG": c.kubeconfig}
    out = subprocess.run(["kubectl", "logs", "talker", "--tail=1"], env=env, capture_output=True, text=True, check=True)
    assert out.stdout == "line two\n"
    missing = subprocess.run(
        ["kubectl", "logs", "talker", "-c", "nope"], env=env, capture_output=True, text=True, check=False
    )
    assert missing.returncode != 0
    assert "container nope is not valid for pod talker" in missing.stderr


WILDCARD_SERVER = textwrap.dedent(
    """
    import socket
    s = socket.socket(); s.bind(("0.0.0.0", 2222)); s.listen()  # as TensorFlow's gRPC server binds
    while True:
        c, _ = s.accept(); c.sendall(socket.gethostname().encode()); c.close()
    """
)


@pytest.mark.skipif(
    not PodNetworkNamespaces.available(), reason="needs root, ip and nsenter for pod network namespaces"
)
def test_pods_have_their_own_network_stack(nodes_cluster: NodesCluster) -> None:
    c = nodes_cluster
    assert c.fleet.podnet is not None
    for name in ("wild-a", "wild-b"):
        c.kube.request("POST", "/api/v1/namespaces/default/pods", body=pod_manifest(name, WILDCARD_SERVER))
    ips = [
        wait_for(lambda n=name: (c.pod(n) or {}).get("status", {}).get("podIP"), what="pod IP")
        for name in ("wild-a", "wild-b")
    ]  # type: ignore[misc]
    for name in ("wild-a", "wild-b"):
        wait_for(lambda n=name: phase(c, n) == "Running", what=f"{name} running")  # type: ignore[misc]
    # Both bound 0.0.0.0:2222 without clashing; the host reaches each at its own pod IP.
    for ip, name in zip(ips, ("wild-a", "wild-b"), strict=True):
        answer = wait_for(lambda ip=ip: _try_recv(ip, 2222), what=f"{name} answering")  # type: ignore[misc]
        assert answer == name
    for name in ("wild-a", "wild-b"):
        c.kube.delete(f"/api/v1/namespaces/default/pods/{name}")
    wait_for(lambda: c.pod("wild-a") is None and c.pod("wild-b") is None, what="deleted")


def _try_recv(ip: str, port: int) -> str | None:
    try:
        with socket.create_connection((ip, port), timeout=2) as conn:
            return conn.recv(100).decode()
    except OSError:
        return None


@pytest.mark.skipif(
    not PodNetworkNamespaces.available(), reason="needs root, ip and nsenter for pod network namespaces"
)
def test_unknown_names_fail_fast_inside_pods(nodes_cluster: NodesCluster) -> None:
    c = nodes_cluster
    code = (
        "import socket, time\nstart = time.monotonic()\n"
        "try:\n    socket.getaddrinfo('empty-slot.job.default.svc', 2222)\nexcept OSError:\n    pass\n"
        "print('lookup took', round(time.monotonic() - start, 2))"
    )
    c.kube.request("POST", "/api/v1/namespaces/default/pods", body=pod_manifest("lookup", code, restartPolicy="Never"))
    wait_for(lambda: phase(c, "lookup") == "Succeeded", what="lookup done")
    log = c.fleet.log_file("default", "lookup")
    assert log is not None
    took = float(log.read_text().split("lookup took")[1])
    assert took < 1.0
