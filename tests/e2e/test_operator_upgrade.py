"""docs/install.md's upgrade and uninstall, end to end on the local cluster: the operator stopped as a rollout
stops it and another started in its place leaves a running job exactly as it was (no pod replaced, no count
moved, the same chief at the same epoch); a job deleted while the operator runs goes with its pods."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from tests.e2e import test_operator_recovery as recovery
from tests.e2e.operator_support import wait_for
from tests.e2e.test_operator_recovery import create_job, job_status, running, workers

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

JOBS = ("transient.training", "v1alpha1")
# The recovery suite's cluster, operator and per-test namespace, as fixtures of this module too.
stack = recovery.stack
env = recovery.env


def _generation_seen(env: dict[str, Any], generation: int) -> bool:
    return job_status(env).get("observedGeneration") == generation


def test_an_operator_upgrade_loses_nothing_of_a_running_job(env: dict[str, Any]) -> None:
    create_job(env)
    before = running(env, epoch=1)
    pods = sorted((p.metadata.name, p.metadata.uid) for p in workers(env))
    env["operator"].stop()  # the old replica leaves...
    env["operator"].start()  # ...and the new one takes over
    # a spec change the new operator must act on: its status write shows it has taken the job over
    custom = client.CustomObjectsApi(env["api"])
    custom.patch_namespaced_custom_object(
        *JOBS, env["ns"], "transienttrainingjobs", "train", {"spec": {"trainSteps": 200}}
    )
    wait_for("the new operator to act on the job", lambda: _generation_seen(env, 2))
    after = running(env, epoch=1)
    assert sorted((p.metadata.name, p.metadata.uid) for p in workers(env)) == pods
    assert after["chief"]["pod"] == before["chief"]["pod"]
    counts = ("preemptions", "replacements", "failures", "chiefElections")
    assert {k: after.get(k) for k in counts} == {k: before.get(k) for k in counts}


def test_a_job_deleted_while_the_operator_runs_goes_with_its_pods(env: dict[str, Any]) -> None:
    create_job(env)
    running(env, epoch=1)
    custom = client.CustomObjectsApi(env["api"])
    custom.delete_namespaced_custom_object(*JOBS, env["ns"], "transienttrainingjobs", "train")
    wait_for(
        "the job gone",
        lambda: not custom.list_namespaced_custom_object(*JOBS, env["ns"], "transienttrainingjobs")["items"],
    )
    wait_for("its pods gone", lambda: not env["core"].list_namespaced_pod(env["ns"]).items)
