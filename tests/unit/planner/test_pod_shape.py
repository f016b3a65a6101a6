"""The pods a job's spec makes: the restricted profile, and what the per-role pod template may not override
(the manifests themselves are compared whole in test_children)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.test_pod_template import TEMPLATE
from tests.unit.planner.builders import T0, job
from tests.unit.planner.pod_security import restricted_violations
from ttj.api.models import JobRef, TransientTrainingJobSpec
from ttj.planner import CreateChild, Observed, children, plan


def spec_of(**fields: Any) -> TransientTrainingJobSpec:
    return TransientTrainingJobSpec.model_validate(job(**fields)["spec"])


def worker(**fields: Any) -> dict[str, Any]:
    return children.worker_pod(JobRef.of(job(**fields)), spec_of(**fields), 0, 1)


def ps_pod_spec(**fields: Any) -> dict[str, Any]:
    spec: dict[str, Any] = children.ps_deployment(JobRef.of(job(**fields)), spec_of(**fields), 0)["spec"]["template"][
        "spec"
    ]
    return spec


def trainer(pod_spec: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = pod_spec["containers"][0]
    return container


# -- Pod Security restricted -----------------------------------------------------------------------
@pytest.mark.parametrize("provisioning", ["spot", "preemptible", "on-demand"])
def test_workers_pass_the_restricted_profile(provisioning: str) -> None:
    fields = {"workers": {"provisioning": provisioning, "template": TEMPLATE}}
    for pod_spec in (worker()["spec"], worker(**fields)["spec"]):
        assert restricted_violations(pod_spec) == []


def test_parameter_servers_pass_the_restricted_profile_and_mount_no_token() -> None:
    for pod_spec in (ps_pod_spec(), ps_pod_spec(parameterServers={"template": TEMPLATE})):
        assert restricted_violations(pod_spec) == []
        assert pod_spec["automountServiceAccountToken"] is False


def test_the_root_filesystem_is_read_only_with_writable_scratch_directories() -> None:
    for pod_spec in (worker()["spec"], ps_pod_spec()):
        container = trainer(pod_spec)
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        empty_dirs = {v["name"] for v in pod_spec["volumes"] if "emptyDir" in v}
        assert {"/tmp", "/home/trainer"} <= set(mounts)
        assert {mounts["/tmp"], mounts["/home/trainer"]} <= empty_dirs


def test_the_check_finds_what_the_profile_forbids() -> None:
    """The restricted check itself: a pod that breaks each control is named for it."""
    bad = {
        "hostNetwork": True,
        "securityContext": {"runAsUser": 0, "seccompProfile": {"type": "Unconfined"}},
        "volumes": [{"name": "h", "hostPath": {"path": "/"}}],
        "containers": [
            {
                "name": "c",
                "ports": [{"containerPort": 80, "hostPort": 80}],
                "securityContext": {"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}},
            }
        ],
    }
    found = " | ".join(restricted_violations(bad))
    for control in (
        "host namespaces",
        "runAsUser=0",
        "hostPath",
        "hostPort",
        "privileged",
        "non-default capabilities",
        "allowPrivilegeEscalation",
        "runAsNonRoot",
        "seccompProfile",
        "must drop ALL",
        "restricted volume types",
    ):
        assert control in found


# -- the pod template ------------------------------------------------------------------------------
def test_the_workers_service_account_gets_the_lease() -> None:
    manifest = job(workers={"template": {"spec": {"serviceAccountName": "team-vision"}}})
    result = plan(manifest, Observed(), T0)
    [binding] = [w.manifest for w in result.of_type(CreateChild) if w.kind == "RoleBinding"]
    assert {s["name"] for s in binding["subjects"]} == {"mnist-trainer", "team-vision"}


OVERRIDES = {
    "ttj label": ({"metadata": {"labels": {"transient.training/role": "ps"}}}, "transient.training/role"),
    "ttj annotation": ({"metadata": {"annotations": {"x.transient.training/y": "1"}}}, "x.transient.training/y"),
    "TF_CONFIG": (
        {"spec": {"containers": [{"name": "trainer", "env": [{"name": "TF_CONFIG", "value": "{}"}]}]}},
        "TF_CONFIG",
    ),
    "POD_NAME": (
        {"spec": {"containers": [{"name": "trainer", "env": [{"name": "POD_NAME", "value": "x"}]}]}},
        "POD_NAME",
    ),
    "ttj volume": ({"spec": {"volumes": [{"name": "ttj-tmp", "emptyDir": {}}]}}, "ttj-tmp"),
    "ttj mount": (
        {
            "spec": {
                "volumes": [{"name": "mine", "emptyDir": {}}],
                "containers": [{"name": "trainer", "volumeMounts": [{"name": "mine", "mountPath": "/tmp"}]}],
            }
        },
        "/tmp",
    ),
    "spot selector": ({"spec": {"nodeSelector": {"cloud.google.com/gke-spot": "false"}}}, "gke-spot"),
    "accelerator affinity": (
        {
            "spec": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "cloud.google.com/gke-accelerator", "operator": "Exists"}
                                    ]
                                }
                            ]
                        }
                    }
                }
            }
        },
        "gke-accelerator",
    ),
}


@pytest.mark.parametrize("role", ["workers", "parameterServers"])
@pytest.mark.parametrize(("template", "named"), list(OVERRIDES.values()), ids=list(OVERRIDES))
def test_an_override_of_what_ttj_owns_makes_the_job_invalid(role: str, template: dict[str, Any], named: str) -> None:
    result = plan(job(**{role: {"template": template}}), Observed(), T0)
    [invalid] = [c for c in result.status["conditions"] if c["type"] == "Invalid"]
    assert invalid["status"] == "True"
    assert f"{role}.template" in invalid["message"]
    assert named in invalid["message"]
    assert not result.of_type(CreateChild)


def test_the_workers_template_may_not_set_the_jobs_batch_size_once_a_group_with_its_own_gets_it() -> None:
    template = {"spec": {"containers": [{"name": "trainer", "env": [{"name": "TTJ_JOB_BATCH_SIZE", "value": "1"}]}]}}
    own = [{"name": "l4", "batchSize": 256}, {"name": "t4"}]
    refused = plan(job(workers={"template": template, "groups": own}), Observed(), T0)
    [invalid] = [c for c in refused.status["conditions"] if c["type"] == "Invalid"]
    assert (invalid["status"], invalid["message"]) == (
        "True",
        "workers.template: spec.containers[0].env may not set TTJ_JOB_BATCH_SIZE: ttj sets it",
    )
    # no group sets its own: ttj sets no TTJ_JOB_BATCH_SIZE, the template may
    for groups in (None, [{"name": "l4"}, {"name": "t4"}]):
        manifest = job(workers={"template": template} | ({"groups": groups} if groups else {}))
        kept = plan(manifest, Observed(), T0)
        assert [c for c in kept.status["conditions"] if c["type"] == "Invalid" and c["status"] == "True"] == []
        assert kept.of_type(CreateChild)


def test_workers_node_selector_may_not_move_the_workers_off_their_provisioning() -> None:
    result = plan(job(workers={"nodeSelector": {"cloud.google.com/gke-spot": "false"}}), Observed(), T0)
    [invalid] = [c for c in result.status["conditions"] if c["type"] == "Invalid"]
    assert "workers.nodeSelector" in invalid["message"]
