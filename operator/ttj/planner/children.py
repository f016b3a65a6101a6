"""The desired children of a job, as Kubernetes manifests (dicts), and the names they derive from the job's.

Names: Service ``NAME`` (headless), Deployments ``NAME-ps-<i>``, worker pods ``NAME-worker-<slot>-<n>``
(``n`` counts the pods a slot has had, so a replacement never waits for its predecessor to vanish),
Lease ``NAME-chief``, ServiceAccount/Role/RoleBinding ``NAME-trainer``. Every pod has hostname
``NAME-worker-<slot>`` or ``NAME-ps-<i>`` under subdomain ``NAME``, i.e. the stable DNS name
``<hostname>.NAME.<namespace>.svc``.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from ttj.api.models import TransientTrainingJobSpec
from ttj.planner.observed import Obj
from ttj_contract import (
    ACCELERATOR_LABEL,
    ANNOTATION_ACTIVE_WORKERS,
    ANNOTATION_DESIRED_WORKERS,
    ANNOTATION_PS_TEMPLATE,
    API_VERSION,
    CONTAINER_NAME,
    DATA_CACHE_PATH,
    DATA_CACHE_VOLUME,
    DATA_VOLUME,
    FINALIZER,
    GPU_RESOURCE,
    KIND,
    LABEL_JOB,
    LABEL_PS_INDEX,
    LABEL_ROLE,
    LABEL_SLOT,
    PREEMPTIBLE_LABEL,
    SPOT_LABEL,
    TF_PORT,
    Env,
    Provisioning,
    Role,
    dns_address,
    lease_name,
    ps_name,
    service_name,
    trainer_account_name,
    worker_hostname,
    worker_pod_name,
)

#: terminationGracePeriodSeconds of worker pods: the chief's time to write its checkpoint after SIGTERM
#: (the budget stops a job this long before the money runs out).
WORKER_TERMINATION_GRACE_SECONDS = 30
DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def name_problems(job: str, spec: TransientTrainingJobSpec) -> list[str]:
    """Why a job name cannot carry its derived child names (DNS-1035 labels of at most 63 characters)."""
    problems = []
    if not DNS_1035_LABEL.match(job):
        problems.append(
            f"metadata.name {job!r} must be a DNS-1035 label (lower-case letters, digits and '-', starting "
            "with a letter and ending with a letter or digit): it names the job's Service"
        )
    longest = max(
        [worker_hostname(job, spec.workers.slots - 1), ps_name(job, spec.parameter_servers.replicas - 1)], key=len
    )
    if len(longest) > 63:
        problems.append(
            f"metadata.name {job!r} is too long: the derived hostname {longest!r} has {len(longest)} characters, "
            f"over the limit of 63; shorten the name by {len(longest) - 63}"
        )
    return problems


def _owner(job: Obj) -> list[Obj]:
    metadata = job.get("metadata") or {}
    return [
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": metadata.get("name"),
            "uid": metadata.get("uid"),
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def _metadata(job: Obj, name: str, labels: dict[str, str] | None = None) -> Obj:
    metadata = job.get("metadata") or {}
    return {
        "name": name,
        "namespace": metadata.get("namespace"),
        "labels": {LABEL_JOB: metadata["name"], **(labels or {})},
        "ownerReferences": _owner(job),
    }


def tf_config(job: str, namespace: str, spec: TransientTrainingJobSpec, task_type: str, index: int) -> str:
    cluster = {
        Role.PS.value: [dns_address(job, namespace, ps_name(job, i)) for i in range(spec.parameter_servers.replicas)],
        Role.WORKER.value: [dns_address(job, namespace, worker_hostname(job, s)) for s in range(spec.workers.slots)],
    }
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}}, separators=(",", ":"))


def _env(job: str, namespace: str, spec: TransientTrainingJobSpec, task_type: str, index: int) -> list[Obj]:
    def field(path: str) -> Obj:
        return {"fieldRef": {"fieldPath": path}}

    settings: dict[Env, object] = {
        Env.JOB_NAME: job,
        Env.MODEL: spec.model,
        Env.DATASET: spec.dataset,
        Env.TRAIN_STEPS: spec.train_steps,
        Env.BATCH_SIZE: spec.batch_size,
        Env.LEARNING_RATE: spec.learning_rate,
        Env.LEARNING_RATE_SCALING: spec.learning_rate_scaling,
        Env.CHECKPOINT_URI: spec.checkpoint.uri,
        Env.CHECKPOINT_INTERVAL_STEPS: spec.checkpoint.interval_steps,
        Env.CHECKPOINT_INTERVAL_SECONDS: spec.checkpoint.interval_seconds,
        Env.DESIRED_WORKERS: spec.workers.replicas,
    }
    if spec.data is not None:
        settings[Env.DATA_URI] = spec.data.uri
    elif spec.dataset == "cifar10":
        settings[Env.DATA_CACHE] = DATA_CACHE_PATH
    return [
        {"name": Env.TF_CONFIG.value, "value": tf_config(job, namespace, spec, task_type, index)},
        {"name": Env.POD_NAME.value, "valueFrom": field("metadata.name")},
        {"name": Env.POD_NAMESPACE.value, "valueFrom": field("metadata.namespace")},
        {"name": Env.POD_IP.value, "valueFrom": field("status.podIP")},
        *({"name": key.value, "value": str(value)} for key, value in settings.items()),
    ]


def _resources(requirements: Any, gpus: int = 0) -> Obj:
    out: Obj = {}
    if requirements is not None:
        dumped = requirements.model_dump(by_alias=True, exclude_none=True)
        # Quantities as strings, as the API server returns them (clients parse "1", not 1).
        out = {k: {name: str(q) for name, q in v.items()} for k, v in dumped.items()}
    if gpus:
        out.setdefault("limits", {})[GPU_RESOURCE] = str(gpus)
    return out


def _container(image: str, env: list[Obj], resources: Obj, mounts: list[Obj]) -> Obj:
    container: Obj = {
        "name": CONTAINER_NAME,
        "image": image,
        "command": ["python", "-m", "ttj_trainer"],
        "env": env,
        "ports": [{"name": "tf", "containerPort": TF_PORT}],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if resources:
        container["resources"] = resources
    if mounts:
        container["volumeMounts"] = mounts
    return container


def _checkpoint_volume(spec: TransientTrainingJobSpec) -> tuple[list[Obj], list[Obj]]:
    claim = spec.checkpoint.volume_claim_name
    if not claim:
        return [], []
    return (
        [{"name": "checkpoints", "persistentVolumeClaim": {"claimName": claim}}],
        [{"name": "checkpoints", "mountPath": spec.checkpoint.uri}],
    )


def _data_volume(spec: TransientTrainingJobSpec) -> tuple[list[Obj], list[Obj]]:
    """The dataset: spec.data's claim mounted read-only at its path, or, for a dataset to download, a cache."""
    if spec.data is not None and spec.data.volume_claim_name:
        return (
            [
                {
                    "name": DATA_VOLUME,
                    "persistentVolumeClaim": {"claimName": spec.data.volume_claim_name, "readOnly": True},
                }
            ],
            [{"name": DATA_VOLUME, "mountPath": spec.data.uri, "readOnly": True}],
        )
    if spec.data is None and spec.dataset == "cifar10":
        return [{"name": DATA_CACHE_VOLUME, "emptyDir": {}}], [
            {"name": DATA_CACHE_VOLUME, "mountPath": DATA_CACHE_PATH}
        ]
    return [], []


def worker_pod(job: Obj, spec: TransientTrainingJobSpec, slot: int, incarnation: int) -> Obj:
    name = job["metadata"]["name"]
    namespace = job["metadata"].get("namespace") or "default"
    workers = spec.workers
    node_selector: dict[str, str] = {}
    tolerations: list[Obj] = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    if workers.provisioning == Provisioning.SPOT:
        node_selector[SPOT_LABEL] = "true"
        tolerations.append({"key": SPOT_LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"})
    elif workers.provisioning == Provisioning.PREEMPTIBLE:
        node_selector[PREEMPTIBLE_LABEL] = "true"
        tolerations.append({"key": PREEMPTIBLE_LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"})
    if workers.gpus_per_worker > 0:
        node_selector[ACCELERATOR_LABEL] = workers.accelerator_type
    node_selector.update(workers.node_selector or {})
    tolerations += [t.model_dump(by_alias=True, exclude_none=True) for t in workers.tolerations or []]
    volumes, mounts = _checkpoint_volume(spec)
    data_volumes, data_mounts = _data_volume(spec)
    volumes, mounts = volumes + data_volumes, mounts + data_mounts
    pod_spec: Obj = {
        "hostname": worker_hostname(name, slot),
        "subdomain": service_name(name),
        "serviceAccountName": trainer_account_name(name),
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": WORKER_TERMINATION_GRACE_SECONDS,
        "nodeSelector": node_selector,
        "tolerations": tolerations,
        "containers": [
            _container(
                spec.image,
                _env(name, namespace, spec, Role.WORKER, slot),
                _resources(workers.resources, workers.gpus_per_worker),
                mounts,
            )
        ],
    }
    if workers.provisioning == Provisioning.ON_DEMAND:
        pod_spec["affinity"] = _on_demand_affinity()
    if volumes:
        pod_spec["volumes"] = volumes
    metadata = _metadata(
        job, worker_pod_name(name, slot, incarnation), {LABEL_ROLE: Role.WORKER.value, LABEL_SLOT: str(slot)}
    )
    metadata["finalizers"] = [FINALIZER]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def _on_demand_affinity() -> Obj:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": SPOT_LABEL, "operator": "NotIn", "values": ["true"]},
                            {"key": PREEMPTIBLE_LABEL, "operator": "NotIn", "values": ["true"]},
                        ]
                    }
                ]
            }
        }
    }


def ps_template_fingerprint(spec: TransientTrainingJobSpec) -> str:
    """What a spec change may alter in a PS pod template and that warrants a new PS pod: the image and
    ``parameterServers.resources``. Other settings (worker counts, steps) do not restart a PS: its model
    state is worth more than a stale environment variable it does not read."""
    relevant = {"image": spec.image, "resources": _resources(spec.parameter_servers.resources)}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]


def ps_deployment(job: Obj, spec: TransientTrainingJobSpec, index: int) -> Obj:
    name = job["metadata"]["name"]
    namespace = job["metadata"].get("namespace") or "default"
    labels = {LABEL_JOB: name, LABEL_ROLE: Role.PS.value, LABEL_PS_INDEX: str(index)}
    template_spec: Obj = {
        "hostname": ps_name(name, index),
        "subdomain": service_name(name),
        "serviceAccountName": trainer_account_name(name),
        "affinity": _on_demand_affinity(),
        "containers": [
            _container(
                spec.image,
                _env(name, namespace, spec, Role.PS, index),
                _resources(spec.parameter_servers.resources),
                [],
            )
        ],
    }
    metadata = _metadata(job, ps_name(name, index), {LABEL_ROLE: Role.PS.value, LABEL_PS_INDEX: str(index)})
    metadata["annotations"] = {ANNOTATION_PS_TEMPLATE: ps_template_fingerprint(spec)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": 1,
            # Recreate: never two pods of one PS index (one hostname, one model shard).
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": template_spec},
        },
    }


def headless_service(job: Obj) -> Obj:
    name = job["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(job, service_name(name)),
        "spec": {
            "clusterIP": "None",
            # Peers must resolve each other while TensorFlow is still starting (not yet Ready).
            "publishNotReadyAddresses": True,
            "selector": {LABEL_JOB: name},
            "ports": [{"name": "tf", "port": TF_PORT, "targetPort": TF_PORT}],
        },
    }


def lease(job: Obj, duration_seconds: int, active_workers: int, desired_workers: int) -> Obj:
    name = job["metadata"]["name"]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            **_metadata(job, lease_name(name)),
            "annotations": {
                ANNOTATION_ACTIVE_WORKERS: str(active_workers),
                ANNOTATION_DESIRED_WORKERS: str(desired_workers),
            },
        },
        "spec": {"leaseDurationSeconds": duration_seconds, "leaseTransitions": 0},
    }


def trainer_rbac(job: Obj) -> list[Obj]:
    """A ServiceAccount that may get, watch and patch the job's Lease and nothing else."""
    name = job["metadata"]["name"]
    account = trainer_account_name(name)
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(job, account)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _metadata(job, account),
            "rules": [
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "resourceNames": [lease_name(name)],
                    "verbs": ["get", "watch", "patch"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _metadata(job, account),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
            "subjects": [
                {"kind": "ServiceAccount", "name": account, "namespace": job["metadata"].get("namespace") or "default"}
            ],
        },
    ]
