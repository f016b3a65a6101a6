"""The chaos proxy does what the real-cluster chaos relies on, checked against a local cluster: it passes requests
and watch streams through with the kubeconfig's credentials, and when told to, answers 429/5xx itself, 409 to
writes only, resets connections and cuts streams."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from tests.chaos.proxy import STATUS_FAULTS, FaultyApiProxy
from ttj_localcluster.cluster import LocalCluster


@dataclass
class Through:
    proxy: FaultyApiProxy
    kubeconfig: Path
    core: Any


@pytest.fixture(scope="module")
def through(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Through]:
    """The proxy in front of a local cluster, and a client that reaches the cluster through it alone."""
    with LocalCluster() as cluster:
        proxy = FaultyApiProxy(cluster.kubeconfig_path, seed=3)
        proxy.start()
        path = proxy.kubeconfig_through(cluster.kubeconfig_path, tmp_path_factory.mktemp("proxy") / "kubeconfig")
        api = config.new_client_from_config(config_file=str(path))
        api.configuration.retries = False
        try:
            yield Through(proxy, path, client.CoreV1Api(api))
        finally:
            api.close()
            proxy.stop()


@pytest.fixture
def proxy(through: Through) -> Iterator[FaultyApiProxy]:
    yield through.proxy
    through.proxy.configure()


def config_map(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "data": {"k": "v"}}


def test_clients_behind_the_proxy_carry_no_credentials_and_are_served(through: Through) -> None:
    written = through.kubeconfig.read_text()
    assert "token" not in written
    assert "certificate" not in written
    assert f"http://127.0.0.1:{through.proxy.port}" in written
    through.core.create_namespaced_config_map("default", config_map("served"))
    assert through.core.read_namespaced_config_map("served", "default").data == {"k": "v"}


def test_it_answers_throttling_and_server_errors_itself(through: Through, proxy: FaultyApiProxy) -> None:
    proxy.configure(status_probability=1.0)
    url = f"http://127.0.0.1:{proxy.port}/api/v1/namespaces/default/configmaps"
    # Plain requests: the Kubernetes client would wait out each Retry-After and try again.
    answers = [urllib3.request("GET", url, retries=False) for _ in range(40)]
    assert {answer.status for answer in answers} == set(STATUS_FAULTS)
    for answer in answers:
        assert answer.json()["code"] == answer.status
        assert answer.json()["reason"] == STATUS_FAULTS[answer.status]
        assert answer.headers.get("Retry-After") == ("1" if answer.status in (429, 503) else None)


def test_it_answers_conflicts_to_writes_only(through: Through, proxy: FaultyApiProxy) -> None:
    proxy.configure(conflict_probability=1.0)
    with pytest.raises(ApiException) as refused:
        through.core.create_namespaced_config_map("default", config_map("conflicted"))
    assert refused.value.status == 409
    assert '"reason": "Conflict"' in refused.value.body
    assert through.core.list_namespaced_config_map("default").items is not None
    proxy.configure()
    with pytest.raises(ApiException) as missing:
        through.core.read_namespaced_config_map("conflicted", "default")
    assert missing.value.status == 404  # the refused write never reached the server


def test_it_resets_connections_before_any_answer(through: Through, proxy: FaultyApiProxy) -> None:
    proxy.configure(refuse_probability=1.0)
    with pytest.raises(urllib3.exceptions.HTTPError):
        through.core.list_namespaced_config_map("default")
    assert proxy.refused >= 1


def test_watch_events_stream_through_and_a_cut_ends_the_stream(through: Through, proxy: FaultyApiProxy) -> None:
    through.core.create_namespaced_config_map("default", config_map("watched"))
    seen = []
    for event in watch.Watch().stream(
        through.core.list_namespaced_config_map, "default", field_selector="metadata.name=watched", timeout_seconds=1
    ):
        seen.append(event["object"].metadata.name)
        break
    assert seen == ["watched"]
    proxy.configure(cut_probability=1.0)
    cut_before = proxy.cut
    with pytest.raises(urllib3.exceptions.HTTPError):
        for _ in watch.Watch().stream(through.core.list_namespaced_config_map, "default", timeout_seconds=5):
            pass
    assert proxy.cut == cut_before + 1
