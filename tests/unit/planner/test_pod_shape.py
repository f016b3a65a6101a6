"""The pods a job's spec makes: default requests, the per-role pod template, the restricted profile."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.test_pod_template import TEMPLATE
from tests.unit.planner.builders import T0, job
from tests.unit.planner.pod_security import restricted_violations
from ttj.api.models import TransientTrainingJobSpec
from ttj.planner import CreateChild, Observed, children, plan
from ttj_contract import LABEL_JOB, LABEL_METRICS_SCRAPER, METRICS_PORT, TF_PORT


def spec_of(**fields: Any) -> TransientTrainingJobSpec:
    return TransientTrainingJobSpec.model_validate(job(**fields)["spec"])


def worker(**fields: Any) -> dict[str, Any]:
    return children.worker_pod(job(**fields), spec_of(**fields), 0, 1)


def ps_pod_spec(**fields: Any) -> dict[str, Any]:
    spec: dict[str, Any] = children.ps_deployment(job(**fields), spec_of(**fields), 0)["spec"]["template"]["spec"]
    return spec


def trainer(pod_spec: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = pod_spec["containers"][0]
    return container


# -- default requests: namespaces with a ResourceQuota on cpu/memory accept the pods ----------------
def test_workers_and_parameter_servers_request_cpu_and_memory_by_default() -> None:
    for pod_spec in (worker()["spec"], ps_pod_spec()):
        requests = trainer(pod_spec)["resources"]["requests"]
        assert set(requests) >= {"cpu", "memory"}


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        ({"requests": {"cpu": "3"}}, {"cpu": "3", "memory": children.DEFAULT_WORKER_REQUESTS["memory"]}),
        # a limit alone is also the request (the API server defaults it so): no default may exceed it
        ({"limits": {"cpu": "100m", "memory": "64Mi"}}, None),
    ],
)
def test_given_resources_win_over_the_defaults(resources: dict[str, Any], expected: dict[str, str] | None) -> None:
    container = trainer(worker(workers={"resources": resources})["spec"])
    assert container["resources"].get("requests") == expected


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
def test_the_template_is_merged_under_what_ttj_owns() -> None:
    pod = worker(workers={"template": TEMPLATE})
    spec, container = pod["spec"], trainer(pod["spec"])
    assert pod["metadata"]["labels"]["team"] == "vision"
    assert pod["metadata"]["labels"]["transient.training/role"] == "worker"
    assert pod["metadata"]["annotations"] == {"a.io/b": "c"}
    assert spec["serviceAccountName"] == "team-vision"
    assert spec["priorityClassName"] == "batch-low"
    assert spec["imagePullSecrets"] == [{"name": "registry"}]
    assert spec["nodeSelector"]["cloud.google.com/gke-nodepool"] == "t4-spot"
    assert spec["nodeSelector"]["cloud.google.com/gke-spot"] == "true"
    assert {"key": "team", "operator": "Equal", "value": "vision", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["securityContext"]["runAsUser"] == 1000
    names = [e["name"] for e in container["env"]]
    assert names[0] == "TF_CONFIG"
    assert "WANDB_PROJECT" in names
    assert container["envFrom"] == [{"configMapRef": {"name": "train-env"}}]
    assert {"name": "config", "mountPath": "/etc/train", "readOnly": True} in container["volumeMounts"]
    assert {"name": "config", "configMap": {"name": "train-config"}} in spec["volumes"]


def test_the_template_affinity_is_combined_with_ttjs_placement() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                ]
            }
        }
    }
    spec = ps_pod_spec(parameterServers={"template": {"spec": {"affinity": affinity}}})
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert len(terms) == 2
    for term in terms:
        keys = {(e["key"], e["operator"]) for e in term["matchExpressions"]}
        assert ("cloud.google.com/gke-spot", "NotIn") in keys  # still never on spot nodes
        assert ("zone", "In") in keys


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


def test_workers_node_selector_may_not_move_the_workers_off_their_provisioning() -> None:
    result = plan(job(workers={"nodeSelector": {"cloud.google.com/gke-spot": "false"}}), Observed(), T0)
    [invalid] = [c for c in result.status["conditions"] if c["type"] == "Invalid"]
    assert "workers.nodeSelector" in invalid["message"]


# -- NetworkPolicy -----------------------------------------------------------------------------------
def test_only_the_jobs_own_pods_reach_its_tensorflow_port() -> None:
    policy = children.network_policy(job())
    spec = policy["spec"]
    own = {"matchLabels": {LABEL_JOB: "mnist"}}
    assert spec["podSelector"] == own
    assert spec["policyTypes"] == ["Ingress"]  # egress (GCS, the API server, DNS) stays open
    tf, metrics = spec["ingress"]
    assert tf == {"from": [{"podSelector": own}], "ports": [{"protocol": "TCP", "port": TF_PORT}]}
    assert metrics["from"] == [{"namespaceSelector": {"matchLabels": {LABEL_METRICS_SCRAPER: "true"}}}]
    assert metrics["ports"] == [{"protocol": "TCP", "port": METRICS_PORT}]
    # every pod of the job serves both ports and carries the selected label
    for pod_spec, labels in ((worker()["spec"], worker()["metadata"]["labels"]), (ps_pod_spec(), {LABEL_JOB: "mnist"})):
        ports = {p["containerPort"] for p in trainer(pod_spec)["ports"]}
        assert ports == {TF_PORT, METRICS_PORT}
        assert labels[LABEL_JOB] == "mnist"
