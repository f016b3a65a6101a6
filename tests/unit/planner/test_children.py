"""The children a job makes, as tables compared whole (jobset's ``{name, input, want}``): each case gives the
job's spec and the whole manifest it must make; a failure shows one diff of the whole object."""

from __future__ import annotations

import copy
import difflib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.unit.planner.builders import job
from ttj.api.models import JobRef, TransientTrainingJobSpec
from ttj.planner import children
from ttj.planner.groups import group_worker_pod, groups_of


def tf_config(task: str) -> str:
    """TF_CONFIG of the job's first pod of ``task``: one PS, four worker slots (maxReplicas), stable DNS names."""
    workers = [f"mnist-worker-{slot}.mnist.ns.svc:2222" for slot in range(4)]
    cluster = {"ps": ["mnist-ps-0.mnist.ns.svc:2222"], "worker": workers}
    return json.dumps({"cluster": cluster, "task": {"type": task, "index": 0}}, separators=(",", ":"))


#: Every child is owned by the job (garbage-collected with it).
OWNED_BY_THE_JOB = [
    {
        "apiVersion": "transient.training/v1alpha1",
        "kind": "TransientTrainingJob",
        "name": "mnist",
        "uid": "job-uid",
        "controller": True,
        "blockOwnerDeletion": True,
    }
]


def trainer_container(task: str, resources: dict[str, Any]) -> dict[str, Any]:
    """The trainer container of the job's first pod of ``task`` (every pod of the job has one)."""
    return {
        "name": "trainer",
        "image": "ghcr.io/transient-training/ttj-trainer:0.1.0",
        "command": ["python", "-m", "ttj_trainer"],
        "env": [
            {
                "name": "TF_CONFIG",
                "value": tf_config(task),
            },
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "TTJ_JOB_NAME", "value": "mnist"},
            {"name": "TTJ_MODEL", "value": "small-cnn"},
            {"name": "TTJ_DATASET", "value": "synthetic"},
            {"name": "TTJ_TRAIN_STEPS", "value": "1000"},
            {"name": "TTJ_BATCH_SIZE", "value": "128"},
            {"name": "TTJ_LEARNING_RATE", "value": "0.1"},
            {"name": "TTJ_LEARNING_RATE_SCALING", "value": "activeWorkers"},
            {"name": "TTJ_CHECKPOINT_URI", "value": "/ckpt"},
            {"name": "TTJ_CHECKPOINT_INTERVAL_STEPS", "value": "500"},
            {"name": "TTJ_CHECKPOINT_INTERVAL_SECONDS", "value": "300"},
            {"name": "TTJ_DESIRED_WORKERS", "value": "3"},
        ],
        "ports": [
            {"name": "tf", "containerPort": 2222},
            *([{"name": "wire", "containerPort": 2223}] if task == "ps" else []),
            {"name": "metrics", "containerPort": 9090},
        ],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
        },
        "resources": resources,
        "volumeMounts": [
            {"name": "ttj-tmp", "mountPath": "/tmp"},
            {"name": "ttj-home", "mountPath": "/home/trainer"},
        ],
    }


WORKER: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "mnist-worker-0-1",
        "namespace": "ns",
        "labels": {
            "transient.training/job-name": "mnist",
            "transient.training/role": "worker",
            "transient.training/slot": "0",
        },
        "ownerReferences": OWNED_BY_THE_JOB,
        "finalizers": ["transient.training/accounting"],
    },
    "spec": {
        "hostname": "mnist-worker-0",
        "subdomain": "mnist",
        "serviceAccountName": "mnist-trainer",
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 10001,
            "runAsGroup": 10001,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "nodeSelector": {"cloud.google.com/gke-spot": "true", "cloud.google.com/gke-accelerator": "nvidia-tesla-t4"},
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
        ],
        "containers": [
            trainer_container(
                "worker", {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "1"}}
            )
        ],
        "volumes": [{"name": "ttj-tmp", "emptyDir": {}}, {"name": "ttj-home", "emptyDir": {}}],
    },
}

PS_DEPLOYMENT: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {
        "name": "mnist-ps-0",
        "namespace": "ns",
        "labels": {
            "transient.training/job-name": "mnist",
            "transient.training/role": "ps",
            "transient.training/ps-index": "0",
        },
        "ownerReferences": OWNED_BY_THE_JOB,
        "annotations": {"transient.training/ps-template": "fb81f112bfed15e8"},
    },
    "spec": {
        "replicas": 1,
        "strategy": {"type": "Recreate"},
        "selector": {
            "matchLabels": {
                "transient.training/job-name": "mnist",
                "transient.training/role": "ps",
                "transient.training/ps-index": "0",
            }
        },
        "template": {
            "metadata": {
                "labels": {
                    "transient.training/job-name": "mnist",
                    "transient.training/role": "ps",
                    "transient.training/ps-index": "0",
                }
            },
            "spec": {
                "hostname": "mnist-ps-0",
                "subdomain": "mnist",
                "serviceAccountName": "mnist-trainer",
                "automountServiceAccountToken": False,
                "securityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": 10001,
                    "runAsGroup": 10001,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "cloud.google.com/gke-spot", "operator": "NotIn", "values": ["true"]},
                                        {
                                            "key": "cloud.google.com/gke-preemptible",
                                            "operator": "NotIn",
                                            "values": ["true"],
                                        },
                                    ]
                                }
                            ]
                        }
                    }
                },
                "containers": [trainer_container("ps", {"requests": {"cpu": "250m", "memory": "512Mi"}})],
                "volumes": [{"name": "ttj-tmp", "emptyDir": {}}, {"name": "ttj-home", "emptyDir": {}}],
            },
        },
    },
}

SERVICE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {
        "name": "mnist",
        "namespace": "ns",
        "labels": {"transient.training/job-name": "mnist"},
        "ownerReferences": OWNED_BY_THE_JOB,
    },
    "spec": {
        "clusterIP": "None",
        "publishNotReadyAddresses": True,
        "selector": {"transient.training/job-name": "mnist"},
        "ports": [{"name": "tf", "port": 2222, "targetPort": 2222}],
    },
}

NETWORK_POLICY: dict[str, Any] = {
    "apiVersion": "networking.k8s.io/v1",
    "kind": "NetworkPolicy",
    "metadata": {
        "name": "mnist",
        "namespace": "ns",
        "labels": {"transient.training/job-name": "mnist"},
        "ownerReferences": OWNED_BY_THE_JOB,
    },
    "spec": {
        "podSelector": {"matchLabels": {"transient.training/job-name": "mnist"}},
        "policyTypes": ["Ingress"],
        "ingress": [
            {
                "from": [{"podSelector": {"matchLabels": {"transient.training/job-name": "mnist"}}}],
                "ports": [{"protocol": "TCP", "port": 2222}, {"protocol": "TCP", "port": 2223}],
            },
            {
                "from": [{"namespaceSelector": {"matchLabels": {"transient.training/metrics-scraper": "true"}}}],
                "ports": [{"protocol": "TCP", "port": 9090}],
            },
        ],
    },
}

LEASE: dict[str, Any] = {
    "apiVersion": "coordination.k8s.io/v1",
    "kind": "Lease",
    "metadata": {
        "name": "mnist-chief",
        "namespace": "ns",
        "labels": {"transient.training/job-name": "mnist"},
        "ownerReferences": OWNED_BY_THE_JOB,
        "annotations": {"transient.training/active-workers": "2", "transient.training/desired-workers": "3"},
    },
    "spec": {"leaseDurationSeconds": 30, "leaseTransitions": 0},
}

TRAINER_METADATA = {
    "name": "mnist-trainer",
    "namespace": "ns",
    "labels": {"transient.training/job-name": "mnist"},
    "ownerReferences": OWNED_BY_THE_JOB,
}
TRAINER_RBAC: list[dict[str, Any]] = [
    {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": TRAINER_METADATA,
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": TRAINER_METADATA,
        "rules": [
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": ["mnist-chief"],
                "verbs": ["get", "watch", "patch"],
            }
        ],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": TRAINER_METADATA,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "mnist-trainer"},
        "subjects": [{"kind": "ServiceAccount", "name": "mnist-trainer", "namespace": "ns"}],
    },
]


def changed(base: dict[str, Any], *edits: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """A copy of ``base`` with ``edits`` applied: a case's whole wanted object, written as its difference."""
    want = copy.deepcopy(base)
    for edit in edits:
        edit(want)
    return want


def worker_spec(want: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = want["spec"]
    return spec


def ps_spec(want: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = want["spec"]["template"]["spec"]
    return spec


def trainer(pod_spec: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = pod_spec["containers"][0]
    return container


def assert_whole(got: Any, want: Any) -> None:
    """One diff of the whole object."""
    if got != want:
        lines = difflib.unified_diff(
            json.dumps(want, indent=1, sort_keys=True).splitlines(),
            json.dumps(got, indent=1, sort_keys=True).splitlines(),
            "want",
            "got",
            lineterm="",
        )
        pytest.fail("\n".join(lines))


SPOT_TOLERATION = {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
ON_DEMAND = PS_DEPLOYMENT["spec"]["template"]["spec"]["affinity"]


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """An edit that sets the key at ``path`` (dot-separated; a number indexes a list)."""

    def edit(want: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = want
        for key in parents:
            node = node[int(key)] if key.isdigit() else node[key]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value

    return edit


_DELETE = object()


@dataclass(frozen=True)
class Case:
    name: str
    #: The job's spec fields (over the builders' job()).
    given: dict[str, Any]
    want: Any
    build: Callable[[dict[str, Any], TransientTrainingJobSpec], Any] = field(
        default=lambda j, s: children.worker_pod(JobRef.of(j), s, 0, 1)
    )


def ps(j: dict[str, Any], s: TransientTrainingJobSpec) -> Any:
    return children.ps_deployment(JobRef.of(j), s, 0)


def first_group_worker(j: dict[str, Any], s: TransientTrainingJobSpec) -> Any:
    return group_worker_pod(JobRef.of(j), groups_of(s)[0], 0, 1)


def batch_sizes(own: int, job_: int) -> Callable[[dict[str, Any]], None]:
    """An edit for a group with its own batch size: TTJ_BATCH_SIZE the group's, TTJ_JOB_BATCH_SIZE the job's
    (after ttj's other settings)."""

    def edit(want: dict[str, Any]) -> None:
        env = trainer(want["spec"])["env"]
        names = [e["name"] for e in env]
        env[names.index("TTJ_BATCH_SIZE")] = {"name": "TTJ_BATCH_SIZE", "value": str(own)}
        env.insert(names.index("TTJ_DESIRED_WORKERS") + 1, {"name": "TTJ_JOB_BATCH_SIZE", "value": str(job_)})

    return edit


def trainer_exits_after(seconds: int) -> Callable[[dict[str, Any]], None]:
    """An edit for workers.preemptionGraceSeconds: the trainer's own deadline after SIGTERM, after ttj's other
    settings."""

    def edit(want: dict[str, Any]) -> None:
        trainer(want["spec"])["env"].append({"name": "TTJ_TERMINATION_GRACE_SECONDS", "value": str(seconds)})

    return edit


GROUP_LABELS = {**WORKER["metadata"]["labels"], "transient.training/worker-group": "l4"}


TEAM_TOLERATION = {"key": "team", "operator": "Equal", "value": "vision", "effect": "NoSchedule"}
ZONE_A = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
ZONE_B = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}
TTJ_ON_DEMAND_TERM = ON_DEMAND["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
NODE_TEMPLATE = {
    "metadata": {"labels": {"team": "vision"}, "annotations": {"a.io/b": "c"}},
    "spec": {
        "serviceAccountName": "team-vision",
        "priorityClassName": "batch-low",
        "imagePullSecrets": [{"name": "registry"}],
        "nodeSelector": {"cloud.google.com/gke-nodepool": "t4-spot"},
        "tolerations": [TEAM_TOLERATION],
        "securityContext": {"runAsUser": 1000},
        "volumes": [{"name": "config", "configMap": {"name": "train-config"}}],
        "containers": [
            {
                "name": "trainer",
                "env": [{"name": "WANDB_PROJECT", "value": "vision"}],
                "envFrom": [{"configMapRef": {"name": "train-env"}}],
                "volumeMounts": [{"name": "config", "mountPath": "/etc/train", "readOnly": True}],
            }
        ],
    },
}
TEMPLATE_AFFINITY = {
    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [ZONE_A, ZONE_B]}}
}

CASES = [
    Case("a spot worker", {}, WORKER),
    Case(
        "a worker whose nodes give 60 s after SIGTERM: the trainer exits 3 s before, the pod's grace is 60 s",
        {"workers": {"preemptionGraceSeconds": 60}},
        changed(WORKER, _set("spec.terminationGracePeriodSeconds", 60), trainer_exits_after(57)),
    ),
    Case(
        "a worker whose nodes give 20 s: the trainer exits at 17 s, the pod keeps 30 s for a deliberate stop",
        {"workers": {"preemptionGraceSeconds": 20}},
        changed(WORKER, trainer_exits_after(17)),
    ),
    Case(
        "a preemptible worker: its label selected and tolerated",
        {"workers": {"provisioning": "preemptible"}},
        changed(
            WORKER,
            _set(
                "spec.nodeSelector",
                {
                    "cloud.google.com/gke-preemptible": "true",
                    "cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
                },
            ),
            _set("spec.tolerations", [GPU_TOLERATION, {**SPOT_TOLERATION, "key": "cloud.google.com/gke-preemptible"}]),
        ),
    ),
    Case(
        "an on-demand worker: kept off spot and preemptible nodes",
        {"workers": {"provisioning": "on-demand"}},
        changed(
            WORKER,
            _set("spec.nodeSelector", {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}),
            _set("spec.tolerations", [GPU_TOLERATION]),
            _set("spec.affinity", ON_DEMAND),
        ),
    ),
    Case(
        "a worker without a GPU: no accelerator selector, no GPU limit",
        {"workers": {"gpusPerWorker": 0}},
        changed(
            WORKER,
            _set("spec.nodeSelector", {"cloud.google.com/gke-spot": "true"}),
            _set("spec.containers.0.resources", {"requests": {"cpu": "500m", "memory": "1Gi"}}),
        ),
    ),
    Case(
        "given requests win over the defaults, the rest defaulted",
        {"workers": {"resources": {"requests": {"cpu": "3"}}}},
        changed(WORKER, _set("spec.containers.0.resources.requests", {"cpu": "3", "memory": "1Gi"})),
    ),
    Case(
        "a limit alone is the request: no default beside it",
        {"workers": {"resources": {"limits": {"cpu": "100m", "memory": "64Mi"}}}},
        changed(
            WORKER,
            _set("spec.containers.0.resources", {"limits": {"cpu": "100m", "memory": "64Mi", "nvidia.com/gpu": "1"}}),
        ),
    ),
    Case(
        "the template merged under what ttj owns",
        {"workers": {"template": NODE_TEMPLATE}},
        changed(
            WORKER,
            _set("metadata.labels", {"team": "vision", **WORKER["metadata"]["labels"]}),
            _set("metadata.annotations", {"a.io/b": "c"}),
            _set("spec.serviceAccountName", "team-vision"),
            _set("spec.priorityClassName", "batch-low"),
            _set("spec.imagePullSecrets", [{"name": "registry"}]),
            _set("spec.securityContext.runAsUser", 1000),
            _set("spec.nodeSelector", {"cloud.google.com/gke-nodepool": "t4-spot", **WORKER["spec"]["nodeSelector"]}),
            _set("spec.tolerations", [*WORKER["spec"]["tolerations"], TEAM_TOLERATION]),
            _set(
                "spec.volumes", [*WORKER["spec"]["volumes"], {"name": "config", "configMap": {"name": "train-config"}}]
            ),
            _set(
                "spec.containers.0.env", [*trainer(WORKER["spec"])["env"], {"name": "WANDB_PROJECT", "value": "vision"}]
            ),
            _set("spec.containers.0.envFrom", [{"configMapRef": {"name": "train-env"}}]),
            _set(
                "spec.containers.0.volumeMounts",
                [
                    *trainer(WORKER["spec"])["volumeMounts"],
                    {"name": "config", "mountPath": "/etc/train", "readOnly": True},
                ],
            ),
        ),
    ),
    Case(
        "workers.nodeSelector and tolerations merged with the template's, once: its keys win, its tolerations first",
        {
            "workers": {
                "nodeSelector": {"pool": "a", "zone": "z1"},
                "tolerations": [TEAM_TOLERATION],
                "template": {"spec": {"nodeSelector": {"zone": "z2", "disk": "ssd"}, "tolerations": [GPU_TOLERATION]}},
            }
        },
        changed(
            WORKER,
            _set(
                "spec.nodeSelector",
                {"zone": "z1", "disk": "ssd", "pool": "a", **WORKER["spec"]["nodeSelector"]},
            ),
            _set("spec.tolerations", [*WORKER["spec"]["tolerations"], TEAM_TOLERATION, GPU_TOLERATION]),
        ),
    ),
    Case(
        "a worker of a group without its own batch size: the job's pod with the group label",
        {"workers": {"groups": [{"name": "l4"}]}},
        changed(WORKER, _set("metadata.labels", GROUP_LABELS)),
        first_group_worker,
    ),
    Case(
        "a worker of a group with its own batch size: its batch size, and the job's for updateShare",
        {"workers": {"groups": [{"name": "l4", "batchSize": 256}]}},
        changed(
            WORKER,
            _set("metadata.labels", GROUP_LABELS),
            batch_sizes(256, 128),
        ),
        first_group_worker,
    ),
    Case(
        "the template's env after all of ttj's, the job's batch size included",
        {"workers": {"groups": [{"name": "l4", "batchSize": 256}], "template": {"spec": NODE_TEMPLATE["spec"]}}},
        changed(
            WORKER,
            _set("metadata.labels", GROUP_LABELS),
            batch_sizes(256, 128),
            lambda want: trainer(want["spec"])["env"].append({"name": "WANDB_PROJECT", "value": "vision"}),
            _set("spec.serviceAccountName", "team-vision"),
            _set("spec.priorityClassName", "batch-low"),
            _set("spec.imagePullSecrets", [{"name": "registry"}]),
            _set("spec.securityContext.runAsUser", 1000),
            _set("spec.nodeSelector", {"cloud.google.com/gke-nodepool": "t4-spot", **WORKER["spec"]["nodeSelector"]}),
            _set("spec.tolerations", [*WORKER["spec"]["tolerations"], TEAM_TOLERATION]),
            _set(
                "spec.volumes", [*WORKER["spec"]["volumes"], {"name": "config", "configMap": {"name": "train-config"}}]
            ),
            _set("spec.containers.0.envFrom", [{"configMapRef": {"name": "train-env"}}]),
            _set(
                "spec.containers.0.volumeMounts",
                [
                    *trainer(WORKER["spec"])["volumeMounts"],
                    {"name": "config", "mountPath": "/etc/train", "readOnly": True},
                ],
            ),
        ),
        first_group_worker,
    ),
    Case("a parameter server's Deployment", {}, PS_DEPLOYMENT, ps),
    Case(
        "a parameter server's template affinity: ttj's placement ANDed into each of its terms",
        {"parameterServers": {"template": {"spec": {"affinity": TEMPLATE_AFFINITY}}}},
        changed(
            PS_DEPLOYMENT,
            _set(
                "metadata.annotations",
                {
                    "transient.training/ps-template": children.ps_template_fingerprint(
                        TransientTrainingJobSpec.model_validate(
                            job(parameterServers={"template": {"spec": {"affinity": TEMPLATE_AFFINITY}}})["spec"]
                        )
                    )
                },
            ),
            _set(
                "spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
                [
                    {"matchExpressions": [*term["matchExpressions"], *TTJ_ON_DEMAND_TERM["matchExpressions"]]}
                    for term in (ZONE_A, ZONE_B)
                ],
            ),
        ),
        ps,
    ),
    Case("the headless Service", {}, SERVICE, lambda j, s: children.headless_service(JobRef.of(j))),
    Case(
        "the NetworkPolicy: only the job's pods reach the TensorFlow port, scrapers the metrics port",
        {},
        NETWORK_POLICY,
        lambda j, s: children.network_policy(JobRef.of(j)),
    ),
    Case("the chief's Lease", {}, LEASE, lambda j, s: children.lease(JobRef.of(j), 30, 2, 3)),
    Case(
        "the trainers' account, Role and binding", {}, TRAINER_RBAC, lambda j, s: children.trainer_rbac(JobRef.of(j), s)
    ),
    Case(
        "the workers' own service account bound to the Lease Role too",
        {"workers": {"template": {"spec": {"serviceAccountName": "team-vision"}}}},
        [
            *TRAINER_RBAC[:2],
            changed(
                TRAINER_RBAC[2],
                _set(
                    "subjects",
                    [
                        *TRAINER_RBAC[2]["subjects"],
                        {"kind": "ServiceAccount", "name": "team-vision", "namespace": "ns"},
                    ],
                ),
            ),
        ],
        lambda j, s: children.trainer_rbac(JobRef.of(j), s),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_children_a_spec_makes(case: Case) -> None:
    manifest = job(**copy.deepcopy(case.given))
    got = case.build(manifest, TransientTrainingJobSpec.model_validate(manifest["spec"]))
    assert_whole(got, case.want)
