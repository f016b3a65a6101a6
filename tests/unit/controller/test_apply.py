"""The Applier's answers to the API's refusals: what is harmless, what stops the pass, what is retried."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from ttj.controller.apply import Applier, Conflict
from ttj.kubeapi import MERGE_PATCH, KubeError, path
from ttj.planner import CreateChild, DeleteChild, EmitEvent, LabelPod, RemoveFinalizer, UpdateLease, Write
from ttj_contract import ANNOTATION_DELETED, FINALIZER, KIND

NS = "ns"
Answer = dict[str, Any] | KubeError | Callable[[], dict[str, Any]]


def refusal(status: int, message: str = "") -> KubeError:
    return KubeError(status, json.dumps({"kind": "Status", "code": status, "message": message}))


@dataclass
class ScriptedApi:
    """Answers each (method, path) from its script, in order (the last answer repeats); {} when unscripted."""

    script: dict[tuple[str, str], list[Answer]] = field(default_factory=dict)
    requests: list[tuple[str, str, Any, str]] = field(default_factory=list)

    def request(
        self, method: str, path: str, *, body: Any = None, content_type: str = "application/json"
    ) -> dict[str, Any]:
        self.requests.append((method, path, body, content_type))
        answers = self.script.get((method, path)) or [{}]
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, KubeError):
            raise answer
        return answer() if callable(answer) else answer


def pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}}


def lease(holder: str | None = None) -> dict[str, Any]:
    spec = {"holderIdentity": holder} if holder else {}
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "j-chief"}, "spec": spec}


LEASE_PATH = path("Lease", NS, "j-chief")


def test_refusals_of_idempotent_writes_are_harmless() -> None:
    api = ScriptedApi(
        {
            ("POST", path("Pod", NS)): [refusal(409)],
            ("POST", path("Lease", NS)): [refusal(409)],
            ("DELETE", path("Pod", NS, "gone")): [refusal(404)],
            ("PATCH", path("Pod", NS, "gone")): [refusal(404)],
            ("PATCH", LEASE_PATH): [refusal(404)],
        }
    )
    writes: list[Write] = [
        CreateChild(pod("exists")),
        CreateChild(lease()),  # holderless: the Lease that is there will do
        DeleteChild("Pod", "gone"),
        LabelPod("gone", {"a": "b"}),
        UpdateLease("j-chief", annotations={"a": "b"}),
        LabelPod("next", {"a": "b"}),
    ]
    Applier(api).apply(NS, writes)
    assert len(api.requests) == len(writes)


@pytest.mark.parametrize(
    ("write", "answer"),
    [
        (UpdateLease("j-chief", resource_version="7", holder="w-1", epoch=2), refusal(409)),
        (UpdateLease("j-chief", resource_version="7", holder="w-1", epoch=2), refusal(404)),
        (CreateChild(lease("w-1")), refusal(409)),
    ],
    ids=["lease changed", "lease gone", "an election in a create that finds the Lease"],
)
def test_a_refused_conditional_write_stops_the_pass(write: Write, answer: KubeError) -> None:
    api = ScriptedApi({("PATCH", LEASE_PATH): [answer], ("POST", path("Lease", NS)): [answer]})
    with pytest.raises(Conflict):
        Applier(api).apply(NS, [write, LabelPod("w-1", {"a": "b"})])
    assert len(api.requests) == 1


def test_the_lease_precondition_is_sent() -> None:
    api = ScriptedApi()
    Applier(api).apply(NS, [UpdateLease("j-chief", resource_version="7", holder="w-1", epoch=2)])
    [(method, url, body, content_type)] = api.requests
    assert (method, url, content_type) == ("PATCH", LEASE_PATH, MERGE_PATCH)
    assert body == {"metadata": {"resourceVersion": "7"}, "spec": {"holderIdentity": "w-1", "leaseTransitions": 2}}


def test_a_terminating_namespace_ends_the_pass_quietly() -> None:
    terminating = refusal(403, "unable to create new content in namespace ns because it is being terminated")
    api = ScriptedApi({("POST", path("Pod", NS)): [terminating]})
    applied = Applier(api).apply(NS, [CreateChild(pod("w"))])
    assert not applied.refused


QUOTA = (
    'pods "w-1" is forbidden: exceeded quota: compute, requested: requests.cpu=1, used: requests.cpu=4, '
    "limited: requests.cpu=4"
)


@pytest.mark.parametrize(
    "error",
    [
        refusal(403, QUOTA),
        refusal(403, 'pods "w-1" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true'),
        refusal(
            422,
            'Pod "w-1" is invalid: spec.containers[0].resources.requests: Invalid value: "2": '
            "must be less than or equal to cpu limit",
        ),
        refusal(500, "etcdserver: request timed out"),
    ],
    ids=["quota", "pod security", "invalid", "server error"],
)
def test_a_refused_create_is_recorded_and_the_other_writes_still_apply(error: KubeError) -> None:
    api = ScriptedApi({("POST", path("Pod", NS)): [error, {}]})
    writes: list[Write] = [
        CreateChild(pod("w-1")),
        CreateChild(pod("w-2")),
        UpdateLease("j-chief", resource_version="7", holder="w-0", epoch=1),  # the election
        LabelPod("w-0", {"chief": "true"}),
    ]
    applied = Applier(api).apply(NS, writes)
    assert len(api.requests) == len(writes)
    [refused] = applied.refused
    assert refused.status == error.status
    assert refused.message == error.message
    assert (refused.kind, refused.name, refused.verb) == ("Pod", "w-1", "create")
    assert applied.retry_after_seconds is None


def test_a_throttled_write_carries_the_servers_retry_after() -> None:
    throttled = KubeError(
        429,
        json.dumps(
            {"kind": "Status", "code": 429, "message": "too many requests", "details": {"retryAfterSeconds": 7}}
        ),
    )
    api = ScriptedApi({("POST", path("Pod", NS)): [throttled]})
    applied = Applier(api).apply(NS, [CreateChild(pod("w-1")), LabelPod("w-0", {"a": "b"})])
    assert len(api.requests) == 2
    assert applied.retry_after_seconds == 7
    assert [r.status for r in applied.refused] == [429]


def test_a_refused_election_still_stops_the_pass() -> None:
    """The status relies on a conditional write: whatever refused it, the status must not claim it."""
    api = ScriptedApi({("PATCH", LEASE_PATH): [refusal(403, "forbidden")]})
    with pytest.raises(KubeError):
        Applier(api).apply(NS, [UpdateLease("j-chief", resource_version="7", holder="w-1", epoch=2)])


def test_a_deliberate_forced_delete_marks_the_pod_first() -> None:
    api = ScriptedApi()
    Applier(api).apply(NS, [DeleteChild("Pod", "w", force=True, mark_deliberate=True)])
    assert [(m, b) for m, _, b, _ in api.requests] == [
        ("PATCH", {"metadata": {"annotations": {ANNOTATION_DELETED: "true"}}}),
        (
            "DELETE",
            {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background", "gracePeriodSeconds": 0},
        ),
    ]


def invalid(field: str, message: str) -> KubeError:
    """A 422 as kube-apiserver words it, with its cause."""
    body = {
        "kind": "Status",
        "code": 422,
        "reason": "Invalid",
        "message": f'Pod "w" is invalid: {field}: {message}',
        "details": {"name": "w", "kind": "Pod", "causes": [{"reason": "FieldValueInvalid", "field": field}]},
    }
    return KubeError(422, json.dumps(body))


def test_a_delete_of_a_name_that_now_holds_a_successor_finds_its_object_gone() -> None:
    """kube answers the deliberate mark naming the observed uid with 422 (metadata.uid is immutable) when a
    successor took the name: the object meant is gone, nothing is reported, the successor is not deleted,
    and the pass goes on."""
    successor = invalid("metadata.uid", 'Invalid value: "observed": field is immutable')
    api = ScriptedApi({("PATCH", path("Pod", NS, "w")): [successor]})
    writes: list[Write] = [
        DeleteChild("Pod", "w", mark_deliberate=True, uid="observed"),
        LabelPod("w-0", {"a": "b"}),
    ]
    applied = Applier(api).apply(NS, writes)
    assert applied.refused == []
    assert [(m, u) for m, u, _, _ in api.requests] == [
        ("PATCH", path("Pod", NS, "w")),
        ("PATCH", path("Pod", NS, "w-0")),
    ]
    assert api.requests[0][2]["metadata"]["uid"] == "observed"


def test_another_invalid_answer_to_the_deliberate_mark_is_reported() -> None:
    refused = invalid("metadata.annotations", "Invalid value: too long")
    api = ScriptedApi({("PATCH", path("Pod", NS, "w")): [refused]})
    applied = Applier(api).apply(NS, [DeleteChild("Pod", "w", mark_deliberate=True, uid="observed")])
    assert [(r.kind, r.name, r.verb, r.status) for r in applied.refused] == [("Pod", "w", "delete", 422)]


def test_a_replacement_records_its_recovery_time() -> None:
    since = datetime.now(UTC)
    applied = Applier(ScriptedApi()).apply(NS, [CreateChild(pod("w-2")), CreateChild(pod("w-3"), recovery_since=since)])
    assert len(applied.recoveries) == 1
    assert applied.recoveries[0] >= 0


class Versions:
    """A pod that another writer changes between each read and our patch."""

    def __init__(self, finalizers: list[str]) -> None:
        self.version = 0
        self.finalizers = finalizers

    def __call__(self) -> dict[str, Any]:
        self.version += 1
        return {"metadata": {"name": "w", "resourceVersion": str(self.version), "finalizers": self.finalizers}}


def test_the_finalizer_is_removed_under_the_version_read_and_retried_on_conflicts() -> None:
    pod_path = path("Pod", NS, "w")
    api = ScriptedApi(
        {
            ("GET", pod_path): [Versions([FINALIZER, "example.com/keep"])],
            ("PATCH", pod_path): [refusal(409), refusal(409), {}],
        }
    )
    Applier(api).apply(NS, [RemoveFinalizer("w")])
    patches = [body for method, _, body, _ in api.requests if method == "PATCH"]
    assert [p["metadata"]["resourceVersion"] for p in patches] == ["1", "2", "3"]
    assert patches[-1]["metadata"]["finalizers"] == ["example.com/keep"]


def test_the_last_finalizer_goes_with_its_key_and_an_absent_one_is_left_alone() -> None:
    pod_path = path("Pod", NS, "w")
    api = ScriptedApi({("GET", pod_path): [Versions([FINALIZER])]})
    Applier(api).apply(NS, [RemoveFinalizer("w")])
    assert api.requests[-1][2] == {"metadata": {"resourceVersion": "1", "finalizers": None}}
    api = ScriptedApi({("GET", pod_path): [Versions(["example.com/keep"])]})
    Applier(api).apply(NS, [RemoveFinalizer("w")])
    assert [m for m, *_ in api.requests] == ["GET"]


def test_a_pod_that_keeps_changing_is_a_conflict() -> None:
    pod_path = path("Pod", NS, "w")
    api = ScriptedApi({("GET", pod_path): [Versions([FINALIZER])], ("PATCH", pod_path): [refusal(409)]})
    with pytest.raises(Conflict):
        Applier(api).apply(NS, [RemoveFinalizer("w")])
    assert [m for m, *_ in api.requests] == ["GET", "PATCH"] * 5


def test_releasing_an_orphan_pod_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    pod_path = path("Pod", NS, "w")
    Applier(ScriptedApi({("GET", pod_path): [refusal(404)]})).release_finalizer(NS, "w")
    assert not caplog.records
    with caplog.at_level(logging.WARNING):
        Applier(ScriptedApi({("GET", pod_path): [refusal(500, "etcd")]})).release_finalizer(NS, "w")
    assert "could not release pod ns/w: etcd" in caplog.text


def test_the_status_is_written_under_the_jobs_version() -> None:
    status_path = path(KIND, NS, "j", "status")
    api = ScriptedApi({("PATCH", status_path): [{"metadata": {"resourceVersion": "9"}}, refusal(409)]})
    answer = Applier(api).write_status(NS, "j", "8", {"phase": "Running"})
    assert answer["metadata"]["resourceVersion"] == "9"
    assert api.requests[0][2:] == ({"status": {"phase": "Running"}, "metadata": {"resourceVersion": "8"}}, MERGE_PATCH)
    with pytest.raises(Conflict):
        Applier(api).write_status(NS, "j", "8", {"phase": "Running"})


def test_deleting_a_job_that_is_gone_is_fine() -> None:
    api = ScriptedApi({("DELETE", path(KIND, NS, "j")): [refusal(404)]})
    Applier(api).delete_job(NS, "j")
    assert api.requests[0][2]["propagationPolicy"] == "Background"


def test_events_are_best_effort(caplog: pytest.LogCaptureFixture) -> None:
    job = {
        "apiVersion": "transient.training/v1alpha1",
        "kind": KIND,
        "metadata": {"name": "j", "namespace": NS, "uid": "u"},
    }
    api = ScriptedApi({("POST", path("Event", NS)): [refusal(403, "no events for you")]})
    with caplog.at_level(logging.WARNING):
        Applier(api).post_event(job, EmitEvent("Normal", "ChiefElected", "x" * 2000))
    assert "no events for you" in caplog.text
    body = api.requests[0][2]
    assert body["involvedObject"] == {
        "apiVersion": job["apiVersion"],
        "kind": KIND,
        "name": "j",
        "namespace": NS,
        "uid": "u",
        "resourceVersion": None,
    }
    assert len(body["message"]) == 1024
