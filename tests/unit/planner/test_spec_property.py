"""Specs generated from the CRD's own schema: the planner never raises, and every pod (and other child) it
asks for is accepted by the API server's validation, or the job is Invalid.

The schema is the one the API server enforces (crds/), turned into plain JSON Schema for
hypothesis-jsonschema: an int-or-string node becomes ``anyOf [integer, string]`` with its bounds, Kubernetes'
own keys are dropped. CEL rules are not in JSON Schema, so generated specs may break them; the planner must
then say Invalid (its models mirror the rules), never crash.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
from datetime import timedelta
from typing import Any

import hypothesis_jsonschema._from_schema as jsonschema_strategies
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture import utils as conjecture
from hypothesis_jsonschema import from_schema

from tests.pod_prerequisites import named_objects, template_pod_specs
from tests.unit.controller.in_process_api import NAMESPACE, InProcessApi
from tests.unit.planner.builders import T0, node, run_pod, run_ps
from ttj.api.crd import crd
from ttj.kubeapi import KubeError, path
from ttj.planner import CreateChild, Plan
from ttj.planner.world import World
from ttj_contract import KIND
from ttj_localcluster.apiserver.errors import ApiError

S = timedelta(seconds=1)
#: How many specs a run generates; TTJ_SPEC_EXAMPLES=N explores N new (random) ones instead of the fixed 100.
EXAMPLES = int(os.environ.get("TTJ_SPEC_EXAMPLES", "100"))
EXPLORE = "TTJ_SPEC_EXAMPLES" in os.environ


class _OldStyleMany:
    """hypothesis-jsonschema 0.23 drives ``many`` with ``more()``/``reject()``; Hypothesis 6.13x made it a
    context manager iterated with ``for``. The same decisions, through the new interface."""

    def __init__(self, data: Any, **sizes: Any) -> None:
        self._many = conjecture.many(data, **sizes)
        self._many.__enter__()
        self._elements = iter(self._many)

    def more(self) -> bool:
        if next(self._elements, StopIteration) is StopIteration:
            self._many.__exit__(None)
            return False
        return True

    def reject(self) -> None:
        self._many.reject()


if not hasattr(conjecture.many, "more"):
    jsonschema_strategies.cu = type("CompatUtils", (), {"many": _OldStyleMany})  # type: ignore[attr-defined]


def _plain(node: Any) -> Any:
    """A structural schema node as JSON Schema hypothesis-jsonschema understands."""
    if isinstance(node, list):
        return [_plain(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _plain(v) for k, v in node.items() if not k.startswith("x-kubernetes-") and k != "description"}
    if node.get("x-kubernetes-int-or-string"):
        integer = {"type": "integer", **{k: out.pop(k) for k in ("minimum", "maximum") if k in out}}
        string = {"type": "string", **{k: out.pop(k) for k in ("pattern", "maxLength") if k in out}}
        out["anyOf"] = [integer, string]
    if out.get("type") == "object" and "properties" in out:
        out["additionalProperties"] = False
    return out


def spec_schema() -> dict[str, Any]:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    plain: dict[str, Any] = _plain(schema)
    return plain


SPECS = from_schema(spec_schema())
NAMES = st.from_regex(r"\A[a-z]([-a-z0-9]{0,40}[a-z0-9])?\Z")


class Stats:
    generated = 0
    invalid = 0
    api_refused = 0
    models_laxer = 0
    checked_objects = 0


def manifest(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "transient.training/v1alpha1",
        "kind": "TransientTrainingJob",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": "job-uid", "generation": 1},
        "spec": spec,
    }


def invalid(result: Plan) -> bool:
    return any(c["type"] == "Invalid" and c["status"] == "True" for c in result.status.get("conditions") or [])


def accepted_by_the_api_server(api: InProcessApi, result: Plan) -> None:
    """Every object the plan creates passes the API server's validation (admission of the real kinds)."""
    for write in result.of_type(CreateChild):
        obj = copy.deepcopy(write.manifest)
        obj["metadata"].pop("ownerReferences", None)
        obj["metadata"].pop("finalizers", None)
        rtype = api._target(path(write.kind, NAMESPACE))[0]
        # A pod names its ServiceAccount, which must exist (the ServiceAccount admission plugin): the plan
        # creates it first, so it is created for real here; any other object is only a dry run.
        keep = write.kind == "ServiceAccount"
        try:
            api.server.core.create(rtype, NAMESPACE, obj, dry_run=not keep)
        except ApiError as exc:
            if not (keep and exc.code == 409):  # the account of an earlier example of the same name
                raise AssertionError(f"{write.kind} {write.name} refused: {exc}\n{json.dumps(write.manifest)}") from exc
        except Exception as exc:
            raise AssertionError(f"{write.kind} {write.name} refused: {exc}\n{json.dumps(write.manifest)}") from exc
        Stats.checked_objects += 1


API = InProcessApi(T0)


def create_what_the_user_brings(api: InProcessApi, spec: dict[str, Any]) -> None:
    """The ServiceAccount and PriorityClasses the templates name are the user's to create; without them the
    API server refuses the pods (ServiceAccount and Priority admission), as the job's status then says."""
    for obj in named_objects(template_pod_specs(spec)):
        rtype = api.server.registry.by_kind(obj["apiVersion"], obj["kind"])
        assert rtype is not None
        with contextlib.suppress(ApiError):  # 409: made for an earlier example
            api.server.core.create(rtype, NAMESPACE if rtype.namespaced else "", obj)


def api_server_accepts(job: dict[str, Any]) -> bool:
    """Whether the API server (schema and CEL rules) takes the job; any refusal but 422 Invalid is a bug."""
    name = job["metadata"]["name"]
    try:
        API.request("POST", path(KIND, NAMESPACE), body={**job, "metadata": {"name": name, "namespace": NAMESPACE}})
    except KubeError as exc:
        if exc.status != 422:
            raise AssertionError(f"the API server answered {exc.status}: {exc.message}") from exc
        return False
    API.request("DELETE", path(KIND, NAMESPACE, name), body={"gracePeriodSeconds": 0})
    return True


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not EXPLORE,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(spec=SPECS, name=NAMES)
def test_the_planner_never_raises_and_asks_only_for_valid_objects(spec: dict[str, Any], name: str) -> None:
    Stats.generated += 1
    job = manifest(name, spec)
    api_accepts = api_server_accepts(job)
    if not api_accepts:
        Stats.api_refused += 1
    world = World(job)
    first = world.reconcile(T0)
    if invalid(first):
        Stats.invalid += 1
        assert not first.of_type(CreateChild)
        return
    if not api_accepts:
        Stats.models_laxer += (
            1  # a rule only the CRD states (reported, see test_the_models_refuse_what_the_crd_refuses)
        )
    create_what_the_user_brings(API, spec)
    accepted_by_the_api_server(API, first)
    # The pods run: the chief is elected, the job trains; a later pass (deadlines, TTL) still plans.
    world.observed.nodes.update({f"n-{i}": node(f"n-{i}", "on-demand") for i in range(4)})
    run_ps(world, f"{name}-ps-0-abc", node_name="n-0")
    for i, pod in enumerate(p for p in world.observed.pods if p["metadata"]["labels"].get("transient.training/slot")):
        run_pod(world, pod["metadata"]["name"], f"n-{i % 4}")
    world.reconcile(T0 + S)
    accepted_by_the_api_server(API, world.reconcile(T0 + 10**6 * S))


def test_the_generated_specs_reach_the_planner() -> None:
    """The property above is not vacuous: some generated specs are valid jobs that create children; and the
    models refuse what the CRD refuses (a cluster without CEL would otherwise run what the schema forbids)."""
    print(  # the figures of the closing note
        f"specs generated {Stats.generated}, Invalid {Stats.invalid}, refused by the API server {Stats.api_refused}, "
        f"planned although the API server refuses them {Stats.models_laxer}, children checked {Stats.checked_objects}"
    )
    if Stats.generated:
        assert Stats.checked_objects > 0
        assert Stats.models_laxer == 0
