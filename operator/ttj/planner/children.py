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
from typing import Any

from ttj.api.models import JobRef, TransientTrainingJobSpec
from ttj.api.podtemplate import PodTemplate
from ttj.planner.observed import Obj
from ttj.planner.template_merge import merged_under, worker_template
from ttj_contract import (
    ACCELERATOR_LABEL,
    ANNOTATION_ACTIVE_WORKERS,
    ANNOTATION_DESIRED_WORKERS,
    ANNOTATION_PS_TEMPLATE,
    API_VERSION,
    COMPUTE_CLASS_LABEL,
    CONTAINER_NAME,
    DATA_CACHE_PATH,
    DATA_CACHE_VOLUME,
    DATA_VOLUME,
    FINALIZER,
    GPU_RESOURCE,
    KIND,
    LABEL_JOB,
    LABEL_METRICS_SCRAPER,
    LABEL_PS_INDEX,
    LABEL_ROLE,
    LABEL_SLOT,
    METRICS_PORT,
    PREEMPTIBLE_LABEL,
    PROVISIONING_LABELS,
    SIGTERM_EXIT_MARGIN_SECONDS,
    SPOT_LABEL,
    TF_PORT,
    WIRE_PORT,
    Env,
    Provisioning,
    Role,
    TFConfig,
    dns_address,
    lease_name,
    ps_name,
    service_name,
    trainer_account_name,
    worker_hostname,
    worker_pod_name,
)

#: terminationGracePeriodSeconds of worker pods (or workers.preemptionGraceSeconds, when longer): the chief's time
#: to write its checkpoint after SIGTERM (the budget stops a job this long before the money runs out).
WORKER_TERMINATION_GRACE_SECONDS = 30
#: Requests of a worker's and a parameter server's container for what the spec leaves out: a namespace with a
#: ResourceQuota on cpu or memory refuses pods without them. A resource given only a limit requests the limit.
DEFAULT_WORKER_REQUESTS = {"cpu": "500m", "memory": "1Gi"}
DEFAULT_PS_REQUESTS = {"cpu": "250m", "memory": "512Mi"}
#: The user the trainer image runs as (its Dockerfile's USER), unless the pod template names another.
TRAINER_UID = 10001
#: Writable scratch directories on a read-only root filesystem: volume name → mount point. TensorFlow and
#: Python write temporary files to /tmp; Keras' dataset cache and other caches (~/.keras, ~/.cache) live
#: under the trainer image's HOME.
SCRATCH_VOLUMES = {"ttj-tmp": "/tmp", "ttj-home": "/home/trainer"}


def _owner(job: JobRef) -> list[Obj]:
    return [
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": job.name,
            "uid": job.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def _metadata(job: JobRef, name: str, labels: dict[str, str] | None = None) -> Obj:
    return {
        "name": name,
        "namespace": job.namespace,
        "labels": {LABEL_JOB: job.name, **(labels or {})},
        "ownerReferences": _owner(job),
    }


def tf_config(job: str, namespace: str, spec: TransientTrainingJobSpec, task_type: str, index: int) -> str:
    return TFConfig(
        ps=tuple(dns_address(job, namespace, ps_name(job, i)) for i in range(spec.parameter_servers.replicas)),
        worker=tuple(dns_address(job, namespace, worker_hostname(job, s)) for s in range(spec.workers.slots)),
        task_type=Role(task_type),
        task_index=index,
    ).to_json()


def _env(
    job: str,
    namespace: str,
    spec: TransientTrainingJobSpec,
    task_type: str,
    index: int,
    *,
    job_batch_size: int | None = None,
) -> list[Obj]:
    """The trainer's environment. ``job_batch_size``: the job's batch size, for a worker of a group with its
    own (``spec`` is the group's view, its batchSize the group's): what ``updateShare`` scales by."""

    def field(path: str) -> Obj:
        return {"fieldRef": {"fieldPath": path}}

    settings: dict[Env, object] = {Env.JOB_NAME: job}
    if spec.program is not None:
        settings[Env.PROGRAM] = spec.program.entrypoint
        settings[Env.PROGRAM_ARGS] = json.dumps(spec.program.args, sort_keys=True, separators=(",", ":"))
    else:
        settings[Env.MODEL] = spec.built_in_model
        settings[Env.DATASET] = spec.built_in_dataset
    settings |= {
        Env.TRAIN_STEPS: spec.train_steps,
        Env.BATCH_SIZE: spec.batch_size,
        Env.LEARNING_RATE: spec.learning_rate,
        Env.LEARNING_RATE_SCALING: spec.learning_rate_scaling,
        Env.CHECKPOINT_URI: spec.checkpoint.uri,
        Env.CHECKPOINT_INTERVAL_STEPS: spec.checkpoint.interval_steps,
        Env.CHECKPOINT_INTERVAL_SECONDS: spec.checkpoint.interval_seconds,
        Env.DESIRED_WORKERS: spec.workers.replicas,
    }
    if job_batch_size is not None:
        settings[Env.JOB_BATCH_SIZE] = job_batch_size
    if task_type == Role.WORKER and spec.workers.preemption_grace_seconds is not None:
        settings[Env.TERMINATION_GRACE_SECONDS] = spec.workers.preemption_grace_seconds - SIGTERM_EXIT_MARGIN_SECONDS
    if spec.data is not None:
        settings[Env.DATA_URI] = spec.data.uri
    elif spec.program is None and spec.built_in_dataset == "cifar10":
        settings[Env.DATA_CACHE] = DATA_CACHE_PATH
    return [
        {"name": Env.TF_CONFIG.value, "value": tf_config(job, namespace, spec, task_type, index)},
        {"name": Env.POD_NAME.value, "valueFrom": field("metadata.name")},
        {"name": Env.POD_NAMESPACE.value, "valueFrom": field("metadata.namespace")},
        {"name": Env.POD_IP.value, "valueFrom": field("status.podIP")},
        *({"name": key.value, "value": str(value)} for key, value in settings.items()),
    ]


def _resources(requirements: Any, gpus: int = 0, default_requests: dict[str, str] | None = None) -> Obj:
    out: Obj = {}
    if requirements is not None:
        dumped = requirements.model_dump(by_alias=True, exclude_none=True)
        # Quantities as strings, as the API server returns them (clients parse "1", not 1).
        out = {k: {name: str(q) for name, q in v.items()} for k, v in dumped.items()}
    for name, quantity in (default_requests or {}).items():
        if name not in out.get("requests", {}) and name not in out.get("limits", {}):
            out.setdefault("requests", {})[name] = quantity
    if gpus:
        out.setdefault("limits", {})[GPU_RESOURCE] = str(gpus)
    return out


def _container(image: str, env: list[Obj], resources: Obj, mounts: list[Obj], role: Role) -> Obj:
    # A parameter server also serves the workers' exchanges on its wire.
    wire = [{"name": "wire", "containerPort": WIRE_PORT}] if role == Role.PS else []
    container: Obj = {
        "name": CONTAINER_NAME,
        "image": image,
        "command": ["python", "-m", "ttj_trainer"],
        "env": env,
        "ports": [{"name": "tf", "containerPort": TF_PORT}, *wire, {"name": "metrics", "containerPort": METRICS_PORT}],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": _container_security(),
    }
    if resources:
        container["resources"] = resources
    if mounts:
        container["volumeMounts"] = mounts
    return container


def _container_security() -> Obj:
    """The container half of Pod Security's restricted profile, with a read-only root filesystem."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
    }


def _pod_security(template: PodTemplate | None) -> Obj:
    """The pod half of the restricted profile; the template may choose the UIDs and GIDs (never root)."""
    context: Obj = {
        "runAsNonRoot": True,
        "runAsUser": TRAINER_UID,
        "runAsGroup": TRAINER_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    ids = template.spec.security_context if template is not None and template.spec is not None else None
    if ids is not None:
        context.update(ids.model_dump(by_alias=True, exclude_none=True))
    return context


def _scratch_volumes() -> tuple[list[Obj], list[Obj]]:
    return (
        [{"name": name, "emptyDir": {}} for name in SCRATCH_VOLUMES],
        [{"name": name, "mountPath": path} for name, path in SCRATCH_VOLUMES.items()],
    )


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
    if spec.data is None and spec.program is None and spec.built_in_dataset == "cifar10":
        return [{"name": DATA_CACHE_VOLUME, "emptyDir": {}}], [
            {"name": DATA_CACHE_VOLUME, "mountPath": DATA_CACHE_PATH}
        ]
    return [], []


def worker_pod(
    job: JobRef,
    spec: TransientTrainingJobSpec,
    slot: int,
    incarnation: int,
    *,
    compute_class: str | None = None,
    job_batch_size: int | None = None,
) -> Obj:
    """Worker pod ``incarnation`` of ``slot``: ttj's pod with the workers' template (``workers.template`` with
    ``workers.nodeSelector`` and ``tolerations``) merged under it. With ``compute_class`` the pod selects that
    GKE compute class instead of ttj's provisioning and accelerator labels; with ``job_batch_size`` (a group
    with its own batch size) the trainer gets the job's batch size as ``TTJ_JOB_BATCH_SIZE``."""
    bare = bare_worker_pod(job, spec, slot, incarnation, compute_class=compute_class, job_batch_size=job_batch_size)
    return merged_under(bare, worker_template(spec.workers))


def _placement(spec: TransientTrainingJobSpec, compute_class: str | None) -> tuple[dict[str, str], list[Obj]]:
    """A worker's nodeSelector and tolerations: its compute class's (the class's priorities choose spot or not
    and the GPU), else the labels of its provisioning and accelerator type."""
    workers = spec.workers
    tolerations: list[Obj] = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    if compute_class is not None:
        # GKE taints a class's nodes with its name; its webhook adds this toleration too, other clusters do not.
        tolerations.append(
            {"key": COMPUTE_CLASS_LABEL, "operator": "Equal", "value": compute_class, "effect": "NoSchedule"}
        )
        return {COMPUTE_CLASS_LABEL: compute_class}, tolerations
    node_selector: dict[str, str] = {}
    transient = PROVISIONING_LABELS.get(Provisioning(workers.provisioning))
    if transient is not None:
        node_selector[transient] = "true"
        tolerations.append({"key": transient, "operator": "Equal", "value": "true", "effect": "NoSchedule"})
    if workers.gpus_per_worker > 0:
        node_selector[ACCELERATOR_LABEL] = workers.accelerator_type
    return node_selector, tolerations


def bare_worker_pod(
    job: JobRef,
    spec: TransientTrainingJobSpec,
    slot: int,
    incarnation: int,
    *,
    compute_class: str | None = None,
    job_batch_size: int | None = None,
) -> Obj:
    """What ttj owns of a worker pod."""
    name, namespace = job.name, job.dns_namespace
    workers = spec.workers
    node_selector, tolerations = _placement(spec, compute_class)
    volumes, mounts = _checkpoint_volume(spec)
    scratch, scratch_mounts = _scratch_volumes()
    data_volumes, data_mounts = _data_volume(spec)
    volumes, mounts = volumes + data_volumes, mounts + data_mounts
    pod_spec: Obj = {
        "hostname": worker_hostname(name, slot),
        "subdomain": service_name(name),
        "serviceAccountName": trainer_account_name(name),
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": max(WORKER_TERMINATION_GRACE_SECONDS, workers.preemption_grace_seconds or 0),
        "securityContext": _pod_security(workers.template),
        "nodeSelector": node_selector,
        "tolerations": tolerations,
        "containers": [
            _container(
                spec.image,
                _env(name, namespace, spec, Role.WORKER, slot, job_batch_size=job_batch_size),
                _resources(workers.resources, workers.gpus_per_worker, DEFAULT_WORKER_REQUESTS),
                [*mounts, *scratch_mounts],
                Role.WORKER,
            )
        ],
        "volumes": [*volumes, *scratch],
    }
    if workers.provisioning == Provisioning.ON_DEMAND and compute_class is None:
        pod_spec["affinity"] = _on_demand_affinity()
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
    """What a spec change may alter in a PS pod template and that warrants a new PS pod: the image,
    ``parameterServers.resources`` and ``parameterServers.template``. Other settings (worker counts, steps) do
    not restart a PS: its model state is worth more than a stale environment variable it does not read."""
    relevant: Obj = {"image": spec.image, "resources": _resources(spec.parameter_servers.resources)}
    if spec.parameter_servers.template is not None:
        relevant["template"] = spec.parameter_servers.template.model_dump(by_alias=True, exclude_none=True)
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]


def ps_deployment(
    job: JobRef, spec: TransientTrainingJobSpec, index: int, *, with_template: bool = True, replicas: int = 1
) -> Obj:
    """The Deployment of parameter server ``index``, ``parameterServers.template`` merged under ttj's pod;
    ``replicas`` 0 while the job is suspended."""
    name, namespace = job.name, job.dns_namespace
    labels = {LABEL_JOB: name, LABEL_ROLE: Role.PS.value, LABEL_PS_INDEX: str(index)}
    template = spec.parameter_servers.template
    scratch, scratch_mounts = _scratch_volumes()
    template_spec: Obj = {
        "hostname": ps_name(name, index),
        "subdomain": service_name(name),
        "serviceAccountName": trainer_account_name(name),
        # A parameter server never calls the API: no token in its filesystem.
        "automountServiceAccountToken": False,
        "securityContext": _pod_security(template),
        "affinity": _on_demand_affinity(),
        "containers": [
            _container(
                spec.image,
                _env(name, namespace, spec, Role.PS, index),
                _resources(spec.parameter_servers.resources, default_requests=DEFAULT_PS_REQUESTS),
                scratch_mounts,
                Role.PS,
            )
        ],
        "volumes": scratch,
    }
    pod = {"metadata": {"labels": dict(labels)}, "spec": template_spec}
    if with_template:
        pod = merged_under(pod, template)
    metadata = _metadata(job, ps_name(name, index), {LABEL_ROLE: Role.PS.value, LABEL_PS_INDEX: str(index)})
    metadata["annotations"] = {ANNOTATION_PS_TEMPLATE: ps_template_fingerprint(spec)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": replicas,
            # Recreate: never two pods of one PS index (one hostname, one model shard).
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": labels},
            "template": pod,
        },
    }


def headless_service(job: JobRef) -> Obj:
    name = job.name
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


def network_policy(job: JobRef) -> Obj:
    """Only the job's own pods may reach its pods' TensorFlow port and its parameter servers' wire (both run
    whatever graph a client sends); the metrics port is open to pods of namespaces labelled
    ``LABEL_METRICS_SCRAPER=true``; nothing else gets in. Egress stays open (GCS, the API server, DNS)."""
    name = job.name
    own_pods = {"matchLabels": {LABEL_JOB: name}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(job, service_name(name)),
        "spec": {
            "podSelector": own_pods,
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"podSelector": own_pods}],
                    "ports": [{"protocol": "TCP", "port": TF_PORT}, {"protocol": "TCP", "port": WIRE_PORT}],
                },
                {
                    "from": [{"namespaceSelector": {"matchLabels": {LABEL_METRICS_SCRAPER: "true"}}}],
                    "ports": [{"protocol": "TCP", "port": METRICS_PORT}],
                },
            ],
        },
    }


def lease(job: JobRef, duration_seconds: int, active_workers: int, desired_workers: int) -> Obj:
    name = job.name
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


def trainer_rbac(job: JobRef, spec: TransientTrainingJobSpec | None = None) -> list[Obj]:
    """A ServiceAccount that may get, watch and patch the job's Lease and nothing else; the workers' own
    service account (``workers.template.spec.serviceAccountName``) is bound to the same Role."""
    name = job.name
    account = trainer_account_name(name)
    namespace = job.dns_namespace
    subjects = [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]
    template = spec.workers.template if spec is not None else None
    own = template.spec.service_account_name if template is not None and template.spec is not None else None
    if own and own != account:
        subjects.append({"kind": "ServiceAccount", "name": own, "namespace": namespace})
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
            "subjects": subjects,
        },
    ]
