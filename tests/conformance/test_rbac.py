"""RBAC as kube-apiserver enforces it: service-account identities from TokenRequest tokens, Roles and
ClusterRoles with their bindings (verbs, apiGroups, resources, subresources, resourceNames, nonResourceURLs),
403 bodies in kube's words, and privilege-escalation prevention on Roles and bindings.

Runs against a local cluster started with authorization mode RBAC and against the cluster in KUBECONFIG; skips
where the cluster under test does not enforce RBAC."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from .conftest import raw_request, watch_events
from .identities import (
    client_with_token,
    eventually,
    forbidden,
    rbac_api,
    rbac_cluster,
    service_account_client,
    status_of,
)

__all__ = ["rbac_api", "rbac_cluster"]  # the fixtures

RBAC_GROUP = "rbac.authorization.k8s.io"


@pytest.fixture
def rbac(rbac_api: client.ApiClient) -> client.RbacAuthorizationV1Api:
    return client.RbacAuthorizationV1Api(rbac_api)


@pytest.fixture
def namespace(rbac_api: client.ApiClient) -> Iterator[str]:
    """A fresh namespace per test, on the RBAC cluster."""
    name = f"conf-rbac-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(rbac_api)
    core.create_namespace({"metadata": {"name": name, "labels": {"ttj-conformance": "true"}}})
    yield name
    core.delete_namespace(name)


@pytest.fixture
def nobody(rbac_api: client.ApiClient, namespace: str) -> Iterator[client.ApiClient]:
    """A service account no binding names (beyond what every authenticated user gets)."""
    api = service_account_client(rbac_api, namespace, "nobody")
    if status_of(lambda: client.CoreV1Api(api).list_namespaced_pod(namespace)) == 200:
        pytest.skip("the cluster under test does not enforce RBAC")
    yield api
    api.close()


def lease(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"holderIdentity": "someone"}}


def role(name: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "rules": list(rules)}


def binding(name: str, role_kind: str, role_name: str, *subjects: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": role_kind, "name": role_name},
        "subjects": list(subjects),
    }


def account(namespace: str, name: str) -> dict[str, Any]:
    return {"kind": "ServiceAccount", "name": name, "namespace": namespace}


def test_denials_say_who_cannot_do_what_where(nobody: client.ApiClient, namespace: str) -> None:
    user = f"system:serviceaccount:{namespace}:nobody"
    body = forbidden(lambda: client.CoordinationV1Api(nobody).read_namespaced_lease("job-b-chief", namespace))
    assert (body["kind"], body["reason"], body["code"]) == ("Status", "Forbidden", 403)
    assert body["message"] == (
        f'leases.coordination.k8s.io "job-b-chief" is forbidden: User "{user}" cannot get resource "leases" '
        f'in API group "coordination.k8s.io" in the namespace "{namespace}"'
    )
    assert body["details"] == {"name": "job-b-chief", "group": "coordination.k8s.io", "kind": "leases"}

    body = forbidden(lambda: client.CoreV1Api(nobody).list_namespaced_pod(namespace))
    assert body["message"] == (
        f'pods is forbidden: User "{user}" cannot list resource "pods" in API group "" in the namespace "{namespace}"'
    )
    body = forbidden(lambda: client.CoreV1Api(nobody).list_node())
    assert body["message"] == (
        f'nodes is forbidden: User "{user}" cannot list resource "nodes" in API group "" at the cluster scope'
    )
    body = forbidden(
        lambda: client.CoreV1Api(nobody).create_namespaced_service_account_token("nobody", namespace, {"spec": {}})
    )
    assert (
        f'cannot create resource "serviceaccounts/token" in API group "" in the namespace "{namespace}"'
        in (body["message"])
    )


def test_non_resource_urls_discovery_for_everyone_the_rest_denied(nobody: client.ApiClient) -> None:
    assert client.VersionApi(nobody).get_code().major
    assert raw_request(nobody, "GET", "/apis")["kind"] == "APIGroupList"
    body = forbidden(lambda: raw_request(nobody, "GET", "/metrics"))
    user = body["message"].split('"')[1]
    assert body["message"] == f'forbidden: User "{user}" cannot get path "/metrics"'


def test_an_unknown_token_is_unauthorized(rbac_api: client.ApiClient, nobody: client.ApiClient) -> None:
    stranger = client_with_token(rbac_api, "not-a-token-anyone-issued")
    with pytest.raises(client.ApiException) as info:
        client.CoreV1Api(stranger).list_namespace()
    assert info.value.status == 401
    assert json.loads(info.value.body)["reason"] == "Unauthorized"


def test_role_with_resource_names_grants_that_object_only(
    rbac_api: client.ApiClient, rbac: client.RbacAuthorizationV1Api, nobody: client.ApiClient, namespace: str
) -> None:
    coordination = client.CoordinationV1Api(rbac_api)
    for name in ("job-a-chief", "job-b-chief"):
        coordination.create_namespaced_lease(namespace, lease(name))
    rule = {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "resourceNames": ["job-a-chief"],
        "verbs": ["get", "watch", "patch"],
    }
    rbac.create_namespaced_role(namespace, role("job-a", rule))
    rbac.create_namespaced_role_binding(namespace, binding("job-a", "Role", "job-a", account(namespace, "nobody")))
    trainer = client.CoordinationV1Api(nobody)

    eventually(lambda: trainer.read_namespaced_lease("job-a-chief", namespace), "the Role to take effect")
    renewed = trainer.patch_namespaced_lease("job-a-chief", namespace, {"spec": {"holderIdentity": "me"}})
    assert renewed.spec.holder_identity == "me"
    # a watch of that one object (by metadata.name) is a request for that name
    watched = watch_events(
        nobody,
        f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases?fieldSelector=metadata.name%3Djob-a-chief"
        "&watch=true&timeoutSeconds=1",
    )
    assert watched  # the object as it is, then whatever changed it within the second
    assert {event["object"]["metadata"]["name"] for event in watched} == {"job-a-chief"}

    assert forbidden(lambda: trainer.read_namespaced_lease("job-b-chief", namespace))["details"]["name"] == (
        "job-b-chief"
    )
    assert status_of(lambda: trainer.patch_namespaced_lease("job-b-chief", namespace, {"spec": {}})) == 403
    assert status_of(lambda: trainer.list_namespaced_lease(namespace)) == 403  # a list names no object
    assert status_of(lambda: trainer.create_namespaced_lease(namespace, lease("mine"))) == 403
    assert status_of(lambda: trainer.delete_namespaced_lease("job-a-chief", namespace)) == 403  # verb not granted


def test_cluster_role_through_a_role_binding_is_namespaced(
    rbac_api: client.ApiClient, rbac: client.RbacAuthorizationV1Api, nobody: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(rbac_api)
    other = f"{namespace}-other"
    core.create_namespace({"metadata": {"name": other}})
    name = f"conf-pod-reader-{uuid.uuid4().hex[:8]}"
    try:
        rbac.create_cluster_role(role(name, {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}))
        rbac.create_namespaced_role_binding(
            namespace, binding("reader", "ClusterRole", name, account(namespace, "nobody"))
        )
        reader = client.CoreV1Api(nobody)
        eventually(lambda: reader.list_namespaced_pod(namespace), "the RoleBinding to take effect")
        assert status_of(lambda: reader.list_namespaced_pod(other)) == 403
        assert status_of(reader.list_pod_for_all_namespaces) == 403
        # subresources are separate resources: pods does not grant pods/status
        assert status_of(lambda: reader.read_namespaced_pod_status("any", namespace)) == 403
        # the same ClusterRole bound cluster-wide grants every namespace, through a Group subject
        rbac.create_cluster_role_binding(
            binding(name, "ClusterRole", name, {"kind": "Group", "name": f"system:serviceaccounts:{namespace}"})
        )
        eventually(reader.list_pod_for_all_namespaces, "the ClusterRoleBinding to take effect")
        assert status_of(lambda: reader.list_namespaced_pod(other)) == 200
    finally:
        for delete in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
            try:
                delete(name)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
        core.delete_namespace(other)


def test_a_role_granting_more_than_its_author_holds_is_refused(
    rbac_api: client.ApiClient, rbac: client.RbacAuthorizationV1Api, nobody: client.ApiClient, namespace: str
) -> None:
    """The operator's case: it may create each job's trainer Role because it holds the Lease verbs itself."""
    author_rules = [
        {"apiGroups": [RBAC_GROUP], "resources": ["roles", "rolebindings"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "watch", "patch"]},
    ]
    rbac.create_namespaced_role(namespace, role("author", *author_rules))
    rbac.create_namespaced_role_binding(namespace, binding("author", "Role", "author", account(namespace, "nobody")))
    author = client.RbacAuthorizationV1Api(nobody)
    lease_rule = {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["job-a-chief"]}

    held = role("trainer", {**lease_rule, "verbs": ["get", "watch", "patch"]})
    eventually(lambda: author.create_namespaced_role(namespace, held), "the author's Role to take effect")

    more = role("too-much", {**lease_rule, "verbs": ["get", "delete"]})
    body = forbidden(lambda: author.create_namespaced_role(namespace, more))
    user = f"system:serviceaccount:{namespace}:nobody"
    assert body["message"].startswith(
        f'roles.rbac.authorization.k8s.io "too-much" is forbidden: user "{user}" (groups=['
    )
    assert "is attempting to grant RBAC permissions not currently held:" in body["message"]
    assert "delete" in body["message"].split("not currently held:")[1]
    assert "get" not in body["message"].split("not currently held:")[1].split("Verbs:")[1]

    # a binding to a role whose rules the author holds is fine; to one it does not hold, refused
    author.create_namespaced_role_binding(namespace, binding("trainer", "Role", "trainer", account(namespace, "x")))
    rbac.create_namespaced_role(namespace, more)
    body = forbidden(
        lambda: author.create_namespaced_role_binding(
            namespace, binding("too-much", "Role", "too-much", account(namespace, "x"))
        )
    )
    assert body["message"].startswith(f'rolebindings.rbac.authorization.k8s.io "too-much" is forbidden: user "{user}"')
    # ... unless the author may `bind` that very role
    rbac.patch_namespaced_role(
        "author",
        namespace,
        {
            "rules": [
                *author_rules,
                {"apiGroups": [RBAC_GROUP], "resources": ["roles"], "resourceNames": ["too-much"], "verbs": ["bind"]},
            ]
        },
    )
    eventually(
        lambda: author.create_namespaced_role_binding(
            namespace, binding("too-much", "Role", "too-much", account(namespace, "x"))
        ),
        "the bind permission to take effect",
    )


def test_service_account_tokens_die_with_their_account(
    rbac_api: client.ApiClient, nobody: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(rbac_api)
    assert client.VersionApi(nobody).get_code().major
    core.delete_namespaced_service_account("nobody", namespace)

    def refused() -> bool:
        try:
            client.VersionApi(nobody).get_code()
        except client.ApiException as exc:
            return exc.status == 401
        return False

    from .conftest import wait_for

    wait_for(refused, what="the deleted account's token to be refused")


def test_anonymous_requests_get_only_public_information(rbac_api: client.ApiClient, nobody: client.ApiClient) -> None:
    anonymous = client_with_token(rbac_api, None)
    try:
        assert client.VersionApi(anonymous).get_code().major
    except client.ApiException as exc:
        if exc.status == 401:
            pytest.skip("the cluster turns anonymous authentication off")
        raise
    body = forbidden(lambda: client.CoreV1Api(anonymous).list_namespace())
    assert body["message"] == (
        'namespaces is forbidden: User "system:anonymous" cannot list resource "namespaces" in API group "" '
        "at the cluster scope"
    )


def invalid(call: Any) -> dict[str, Any]:
    with pytest.raises(client.ApiException) as info:
        call()
    assert info.value.status == 422, info.value.body
    body: dict[str, Any] = json.loads(info.value.body)
    assert body["reason"] == "Invalid"
    return body


def test_rbac_objects_are_validated(rbac: client.RbacAuthorizationV1Api, namespace: str) -> None:
    no_verbs = role("no-verbs", {"apiGroups": [""], "resources": ["pods"]})  # the typed client refuses to send it
    path = f"/apis/{RBAC_GROUP}/v1/namespaces/{namespace}/roles"
    body = invalid(lambda: raw_request(rbac.api_client, "POST", path, no_verbs))
    assert "rules[0].verbs: Required value: verbs must contain at least one value" in body["message"]
    urls = role("urls", {"nonResourceURLs": ["/healthz"], "verbs": ["get"]})
    body = invalid(lambda: rbac.create_namespaced_role(namespace, urls))
    assert "namespaced rules cannot apply to non-resource URLs" in body["message"]
    rbac.create_namespaced_role(namespace, role("a", {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}))
    rbac.create_namespaced_role_binding(namespace, binding("b", "Role", "a", account(namespace, "x")))
    moved = {"roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": "other"}}
    body = invalid(lambda: rbac.patch_namespaced_role_binding("b", namespace, moved))
    assert "cannot change roleRef" in body["message"]
    cluster_binding = binding(f"conf-{uuid.uuid4().hex[:8]}", "Role", "a", account(namespace, "x"))
    body = invalid(lambda: rbac.create_cluster_role_binding(cluster_binding))
    assert 'roleRef.kind: Unsupported value: "Role"' in body["message"]


def test_impersonation_needs_the_impersonate_verb_and_then_acts_as_the_user(
    rbac_api: client.ApiClient, nobody: client.ApiClient, namespace: str
) -> None:
    """``kubectl --as``: an admin may act as the service account, and is then refused what it is refused."""
    user = f"system:serviceaccount:{namespace}:nobody"
    as_nobody = {"Accept": "application/json", "Impersonate-User": user}
    with pytest.raises(client.ApiException) as info:
        raw_request(rbac_api, "GET", f"/api/v1/namespaces/{namespace}/pods", headers=as_nobody)
    assert json.loads(info.value.body)["message"] == (
        f'pods is forbidden: User "{user}" cannot list resource "pods" in API group "" in the namespace "{namespace}"'
    )
    as_admin = {"Accept": "application/json", "Impersonate-User": "kubernetes-admin"}
    body = forbidden(lambda: raw_request(nobody, "GET", "/api/v1/namespaces", headers=as_admin))
    assert body["message"] == (
        f'users "kubernetes-admin" is forbidden: User "{user}" cannot impersonate resource "users" in API group "" '
        "at the cluster scope"
    )


def test_access_reviews_answer_what_the_authorizer_would(
    rbac_api: client.ApiClient, nobody: client.ApiClient, namespace: str
) -> None:
    authorization = client.AuthorizationV1Api(nobody)

    def may(verb: str, resource: str, name: str = "") -> bool:
        attributes = {"namespace": namespace, "verb": verb, "group": "coordination.k8s.io", "resource": resource}
        if name:
            attributes["name"] = name
        answer = authorization.create_self_subject_access_review({"spec": {"resourceAttributes": attributes}})
        return bool(answer.status.allowed)

    assert not may("get", "leases", "job-a-chief")
    rule = {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["job-a-chief"]}
    rbac = client.RbacAuthorizationV1Api(rbac_api)
    rbac.create_namespaced_role(namespace, role("lease", {**rule, "verbs": ["get"]}))
    rbac.create_namespaced_role_binding(namespace, binding("lease", "Role", "lease", account(namespace, "nobody")))
    from .conftest import wait_for

    wait_for(lambda: may("get", "leases", "job-a-chief"), what="the Role to take effect")
    assert not may("get", "leases", "job-b-chief")
    assert not may("patch", "leases", "job-a-chief")
    # an admin asks about someone else
    review = client.AuthorizationV1Api(rbac_api).create_subject_access_review(
        {
            "spec": {
                "user": f"system:serviceaccount:{namespace}:nobody",
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
                "resourceAttributes": {"namespace": namespace, "verb": "list", "resource": "pods"},
            }
        }
    )
    assert review.status.allowed is False


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_create_token_and_auth_can_i(
    rbac_cluster: tuple[str, client.ApiClient], nobody: client.ApiClient, namespace: str
) -> None:
    """What a platform team runs to audit an identity: ``kubectl auth can-i --as``, and ``kubectl create token``."""
    kubeconfig = rbac_cluster[0]

    def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": kubeconfig}
        return subprocess.run(["kubectl", *args], capture_output=True, text=True, env=env, timeout=60, check=False)

    token = kubectl("create", "token", "nobody", "-n", namespace, "--duration=10m")
    assert token.returncode == 0, token.stderr
    assert client.VersionApi(client_with_token(rbac_cluster[1], token.stdout.strip())).get_code().major
    as_nobody = f"--as=system:serviceaccount:{namespace}:nobody"
    denied = kubectl("auth", "can-i", "list", "pods", "-n", namespace, as_nobody)
    assert (denied.returncode, denied.stdout.strip()) == (1, "no"), denied.stderr
    allowed = kubectl("auth", "can-i", "get", "/version", as_nobody)
    assert (allowed.returncode, allowed.stdout.strip()) == (0, "yes"), allowed.stderr
