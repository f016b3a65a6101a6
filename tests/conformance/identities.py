"""Acting as someone else than the kubeconfig's user, the same way on the local cluster and a real one: a
service account's token from the TokenRequest API, used as the only credential of a new client."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from kubernetes import client

from ttj_localcluster.cluster import LocalCluster

from .conftest import wait_for

T = TypeVar("T")


def client_with_token(admin: client.ApiClient, token: str | None) -> client.ApiClient:
    """A client for the same server, authenticated by ``token`` alone (no client certificate, no exec plugin);
    no token: anonymous."""
    configuration = copy.deepcopy(admin.configuration)
    configuration.api_key = {"authorization": f"Bearer {token}"} if token else {}
    configuration.api_key_prefix = {}
    configuration.refresh_api_key_hook = None
    configuration.cert_file = configuration.key_file = None
    configuration.username = configuration.password = None
    return client.ApiClient(configuration)


def service_account_client(admin: client.ApiClient, namespace: str, name: str) -> client.ApiClient:
    """Creates the ServiceAccount (if missing) and returns a client acting as it."""
    core = client.CoreV1Api(admin)
    try:
        core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    issued = wait_for(lambda: _token(core, namespace, name), what=f"a token for service account {namespace}/{name}")
    return client_with_token(admin, issued)


def _token(core: client.CoreV1Api, namespace: str, name: str) -> str | None:
    try:
        answer = core.create_namespaced_service_account_token(name, namespace, {"spec": {"expirationSeconds": 600}})
    except client.ApiException as exc:
        if exc.status == 404:  # a real cluster's cache may not know the account yet
            return None
        raise
    return str(answer.status.token)


def status_of(call: Callable[[], Any]) -> int:
    """The HTTP status a call ends with: 200 when it succeeds."""
    try:
        call()
    except client.ApiException as exc:
        return int(exc.status)
    return 200


def forbidden(call: Callable[[], Any]) -> dict[str, Any]:
    """The Status body of a call that must be refused with 403."""
    import json

    with pytest.raises(client.ApiException) as info:
        call()
    assert info.value.status == 403, info.value.body
    body: dict[str, Any] = json.loads(info.value.body)
    return body


def eventually(call: Callable[[], T], what: str) -> T:
    """``call()`` once RBAC lets it through: a real API server's authorizer sees a new binding after its cache
    does (milliseconds to a second)."""

    def attempt() -> list[T] | None:
        try:
            return [call()]
        except client.ApiException as exc:
            if exc.status == 403:
                return None
            raise

    return wait_for(attempt, what=what)[0]


@pytest.fixture(scope="module")
def rbac_cluster(
    kubeconfig: str, k8s_api: client.ApiClient, local_cluster: LocalCluster | None
) -> Iterator[tuple[str, client.ApiClient]]:
    """(kubeconfig, admin client) of a cluster that authorizes by RBAC: the real cluster under test, or a local
    cluster of its own started with authorization mode RBAC (and so TLS: the session's local cluster serves plain
    HTTP and allows everything, because kubectl sends no credentials over plain HTTP)."""
    if local_cluster is None:
        yield kubeconfig, k8s_api
        return
    from kubernetes import config

    with LocalCluster(authorization_mode="RBAC") as cluster:
        api = config.new_client_from_config(config_file=cluster.kubeconfig_path)
        yield cluster.kubeconfig_path, api
        api.close()


@pytest.fixture(scope="module")
def rbac_api(rbac_cluster: tuple[str, client.ApiClient]) -> client.ApiClient:
    return rbac_cluster[1]
