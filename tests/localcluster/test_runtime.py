"""Pods as processes without a cluster: pod IPs, DNS through the per-pod hosts file, signals, messages."""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.localcluster.conftest import local_cluster_options
from ttj_localcluster.nodes import cli as nodes_cli
from ttj_localcluster.nodes.fleet import NodeFleet
from ttj_localcluster.nodes.loopback_network import PodNetwork, PodRecord, ServiceRecord
from ttj_localcluster.nodes.runtime import (
    ContainerRun,
    PodSandbox,
    ProcessRuntime,
    base_environment,
    container_argv,
    expand_vars,
    namespaces_available,
    pod_environment,
)

SERVER = """
import os, socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((os.environ["POD_IP"], 7000)); s.listen()
while True:
    c, _ = s.accept(); c.sendall(("hello from " + socket.gethostname()).encode()); c.close()
"""
CLIENT = """
import socket, sys, time
for name in sys.argv[1:]:
    for _ in range(100):
        try:
            c = socket.create_connection((name, 7000), timeout=2); print(name, "->", c.recv(100).decode()); break
        except OSError:
            time.sleep(0.1)
    else:
        sys.exit("could not reach " + name)
"""


def wait_for(predicate, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.05)


def test_expand_and_python_mapping() -> None:
    assert expand_vars("$(A)-$(B)-$$(A)", {"A": "x"}) == "x-$(B)-$(A)"
    assert container_argv({"name": "c", "command": ["python", "-c", "$(A)"]}, {"A": "pass"}) == [
        sys.executable,
        "-c",
        "pass",
    ]
    with pytest.raises(ValueError, match="does not run images"):
        container_argv({"name": "c", "image": "nginx"}, {})
    assert container_argv({"name": "c", "image": "ghcr.io/x/ttj-trainer:1"}, {})[1:] == ["-m", "ttj_trainer"]


def test_downward_api_env() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "a"}},
        "spec": {"nodeName": "n1"},
        "status": {"podIP": "127.1.0.9"},
    }
    container = {
        "name": "c",
        "resources": {"limits": {"cpu": "1500m", "memory": "1Gi"}},
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
            {"name": "ADDR", "value": "$(POD_IP):2222"},
        ],
    }
    env = pod_environment(pod, container, {"HOME": "/root"}, lambda *_: None)
    assert env == {
        "HOME": "/root",
        "POD_NAME": "p",
        "POD_NAMESPACE": "ns",
        "POD_IP": "127.1.0.9",
        "NODE": "n1",
        "APP": "a",
        "CPU": "2",
        "MEM_MI": "1024",
        "ADDR": "127.1.0.9:2222",
    }


def test_program_path_leads_python_path_and_a_container_env_replaces_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ttj local-cluster --program-path DIR``: a module in DIR, outside any installed package, imports in a
    pod's container (first on PYTHONPATH, before the cluster's own); a container's own PYTHONPATH replaces it,
    as a container's env replaces an image's ENV."""
    code = tmp_path / "my code"
    code.mkdir()
    (code / "my_model.py").write_text("NAME = 'mine'\n")
    options = local_cluster_options("--program-path", str(code), "--state-dir", str(tmp_path / "state"))
    nodes_cli.check_arguments(options)
    [fleet] = [a for a in nodes_cli.build_addons(options) if isinstance(a, NodeFleet)]
    assert fleet.program_path == (str(code),)

    monkeypatch.setenv("PYTHONPATH", "/the/cluster/source")
    base = base_environment("pod-0", None, fleet.program_path)
    assert base["PYTHONPATH"] == f"{code}:/the/cluster/source"
    monkeypatch.delenv("PYTHONPATH")
    assert "PYTHONPATH" not in base_environment("pod-0", None)

    exits: list[ContainerRun] = []
    runtime = ProcessRuntime(tmp_path / "pods", kubeconfig=None, on_exit=lambda _, run: exits.append(run))
    sandbox = runtime.sandbox("default", "p", "u1", ip="127.0.0.1", hostname="p", hosts_file=None)
    probe = {"name": "probe", "command": ["python", "-c", "import my_model; print(my_model.NAME)"]}
    mine = runtime.start(sandbox, probe, base_environment("p", None, fleet.program_path), None)
    wait_for(lambda: len(exits) == 1)
    assert (mine.exit_code, mine.log_path.read_text().strip()) == (0, "mine")
    elsewhere = {**probe, "name": "elsewhere", "env": [{"name": "PYTHONPATH", "value": str(tmp_path)}]}
    replaced = pod_environment({}, elsewhere, base, lambda *_: None)
    run = runtime.start(sandbox, elsewhere, replaced, None)
    wait_for(lambda: len(exits) == 2)
    assert run.exit_code == 1
    assert "No module named 'my_model'" in run.log_path.read_text()


def test_a_program_path_that_is_not_a_directory_stops_the_command(tmp_path: Path) -> None:
    options = local_cluster_options("--program-path", str(tmp_path / "missing"))
    with pytest.raises(SystemExit, match=r"--program-path .*missing: no such directory"):
        nodes_cli.check_arguments(options)


@pytest.mark.skipif(not namespaces_available(), reason="needs root and unshare for per-pod /etc/hosts")
def test_pods_reach_each_other_by_service_dns_and_pod_ip(tmp_path: Path) -> None:
    network = PodNetwork(tmp_path)
    exits: list[ContainerRun] = []
    done = threading.Event()

    def on_exit(_: PodSandbox, run: ContainerRun) -> None:
        exits.append(run)
        done.set()

    runtime = ProcessRuntime(tmp_path, kubeconfig=None, on_exit=on_exit)
    network.set_service(ServiceRecord("default", "echo", {"app": "echo"}))
    server_ip = network.allocate_ip("u1")
    client_ip = network.allocate_ip("u2")
    assert server_ip != client_ip
    assert server_ip.startswith("127.")
    network.set_pod(PodRecord("default", "echo-0", server_ip, {"app": "echo"}, "echo-0", "echo"))
    server_box = runtime.sandbox(
        "default", "echo-0", "u1", ip=server_ip, hostname="echo-0", hosts_file=network.hosts_file("default", "echo-0")
    )
    client_box = runtime.sandbox(
        "other", "client", "u2", ip=client_ip, hostname="client", hosts_file=network.hosts_file("other", "client")
    )
    network.set_pod(PodRecord("other", "client", client_ip, {}, "client", None))
    base = {"PATH": "/usr/bin:/bin", "POD_IP": server_ip}
    runtime.start(server_box, {"name": "server", "command": ["python", "-c", SERVER]}, base, None)
    try:
        # the service and the pod's stable name from another namespace, and the bare pod IP
        names = ["echo.default.svc.cluster.local", "echo-0.echo.default.svc", server_ip]
        run = runtime.start(client_box, {"name": "client", "command": ["python", "-c", CLIENT, *names]}, base, None)
        wait_for(done.is_set)
        log = run.log_path.read_text()
        assert run.exit_code == 0, log
        assert log.count("hello from echo-0") == 3
        assert network.resolve("echo", "default") == [server_ip]
        assert network.resolve("echo", "other") == []  # the short name only inside the namespace
        # The hosts file is rewritten in place: the running pod sees a Service that appears later.
        inode = network.hosts_file("default", "echo-0").stat().st_ino
        network.set_service(ServiceRecord("default", "late", {"app": "echo"}))
        assert network.hosts_file("default", "echo-0").stat().st_ino == inode
        assert "late.default.svc.cluster.local" in network.hosts_file("default", "echo-0").read_text()
    finally:
        runtime.stop(server_box, grace_seconds=2)
    server = server_box.runs["server"]
    assert server.exit_code == 128 + signal.SIGTERM
    assert server.reason == "Error"


def test_clusters_side_by_side_never_hand_out_the_same_pod_ips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Both draw the same "random" /16 first: the second finds it claimed and takes the next one.
    monkeypatch.setattr("random.shuffle", lambda blocks: None)
    first, second = PodNetwork(tmp_path / "a"), PodNetwork(tmp_path / "b")
    a, b = first.allocate_ip("uid"), second.allocate_ip("uid")
    assert a.split(".")[:2] != b.split(".")[:2], (a, b)
    del first
    assert PodNetwork(tmp_path / "c").allocate_ip("uid") == a, "a dropped network frees its /16"


def test_termination_message_and_sigkill_after_grace(tmp_path: Path) -> None:
    network = PodNetwork(tmp_path)
    runtime = ProcessRuntime(tmp_path, kubeconfig="/k/config", on_exit=lambda *_: None)
    box = runtime.sandbox(
        "default", "p", "u", ip=network.allocate_ip("u"), hostname="p", hosts_file=network.hosts_file("default", "p")
    )
    script = (
        "import os, sys\n"
        "open('/dev/termination-log', 'w').write('bad things: ' + os.environ['KUBECONFIG']) "
        "if os.path.exists('/dev/termination-log') and os.environ.get('NS') else None\n"
        "print('last words'); sys.exit(3)"
    )
    env = {"PATH": "/usr/bin:/bin", "KUBECONFIG": "/k/config", "NS": "1" if runtime.use_namespaces else ""}
    run = runtime.start(box, {"name": "c", "command": ["python", "-c", script]}, env, None)
    wait_for(lambda: run.exit_code is not None)
    assert run.exit_code == 3
    assert run.reason == "Error"
    if runtime.use_namespaces:
        assert run.message == "bad things: /k/config"
    assert "last words" in runtime.fallback_message(run)
    stubborn = (
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(60)"
    )
    run = runtime.start(box, {"name": "stubborn", "command": ["python", "-c", stubborn]}, env, None)
    wait_for(lambda: "ready" in run.log_path.read_text())
    started = time.monotonic()
    runtime.stop(box, grace_seconds=0.5)
    assert run.exit_code == 128 + signal.SIGKILL
    assert time.monotonic() - started < 10
