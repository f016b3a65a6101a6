"""The TransientTrainingJob API: the single source of truth for the CRD in ``crds/``.

Field descriptions become ``kubectl explain`` text, so they are written for users. Rules the
OpenAPI schema can state (ranges, enums, patterns) are stated on the fields; cross-field rules are
both CEL rules in the schema (``x-kubernetes-validations``, on by default since Kubernetes 1.25)
and model validators here, so the operator refuses them too when a cluster let them through.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, model_validator
from pydantic.alias_generators import to_camel

from ttj.api.objects import JobStatusBody
from ttj.api.podtemplate import (
    DNS_1123_LABEL,
    DNS_1123_SUBDOMAIN,
    LABEL_VALUE,
    NodeSelector,
    PodTemplate,
    ResourceRequirements,
    Toleration,
)
from ttj.deadline.policy import DeadlineState
from ttj_contract import (
    API_VERSION,
    BUILTIN_DATASETS,
    BUILTIN_MODELS,
    COMPUTE_CLASS_LABEL,
    DEFAULT_BUILTIN_DATASET,
    DEFAULT_BUILTIN_MODEL,
    DEFAULT_PREEMPTION_GRACE_SECONDS,
    KIND,
    MAX_PREEMPTION_GRACE_SECONDS,
    SIGTERM_EXIT_MARGIN_SECONDS,
    LearningRateScaling,
    Provisioning,
    parse_time,
)

DEFAULT_TRAINER_IMAGE = "ghcr.io/transient-training/ttj-trainer:0.1.0"
DEFAULT_ACCELERATOR = "nvidia-tesla-t4"
#: Bounds of counts and durations: what Kubernetes stores as int32 (about 68 years of seconds), and the largest
#: integer JSON carries exactly; datetimes and CEL's int64 never overflow within them.
MAX_INT32 = 2**31 - 1
MAX_SAFE_INTEGER = 2**53

#: status.progress.evaluation holds at most this many metrics, each named in at most this many characters.
MAX_EVALUATION_METRICS = 32
MAX_METRIC_NAME_LENGTH = 63
#: The longest path the chief may report (Linux's PATH_MAX; a Cloud Storage object name is shorter still).
MAX_PATH_LENGTH = 4096

#: Where checkpoints may go: a Cloud Storage URI or an absolute path inside the container.
CHECKPOINT_URI_PATTERN = r"^(gs://[a-z0-9][-a-z0-9_.]{1,220}[a-z0-9](/.*)?|/.*)$"


def _cel(*rules: tuple[str, str]) -> dict[str, Any]:
    """CEL rules for ``x-kubernetes-validations``, each with the message users see."""
    return {"x-kubernetes-validations": [{"rule": rule, "message": message} for rule, message in rules]}


class _Model(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields are errors, as in the schema."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=True,
    )


class CleanPodPolicy(StrEnum):
    """Which pods are deleted when the job finishes."""

    ALL = "All"
    RUNNING = "Running"
    NONE = "None"


class Phase(StrEnum):
    """The job's lifecycle phase."""

    PENDING = "Pending"
    RUNNING = "Running"
    RECOVERING = "Recovering"
    #: spec.suspend is true: the workers stop (the chief checkpoints), then the parameter servers scale to 0.
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class ConditionType(StrEnum):
    """Condition types the operator sets; ``Invalid`` marks a spec the schema could not refuse."""

    CREATED = "Created"
    RUNNING = "Running"
    RECOVERING = "Recovering"
    CHIEF_ELECTED = "ChiefElected"
    BUDGET_EXCEEDED = "BudgetExceeded"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    INVALID = "Invalid"
    #: A write the API refused (a ResourceQuota, Pod Security admission, an invalid pod), as a ReplicaSet says it.
    REPLICA_FAILURE = "ReplicaFailure"
    STALLED = "Stalled"
    #: spec.suspend (True while suspended, False once resumed), as a batch/v1 Job's ``Suspended``.
    SUSPENDED = "Suspended"
    #: True while new workers skip a group for want of capacity, or a worker (the chief aside) runs in a less
    #: preferred group than one with room.
    CAPACITY_FALLBACK = "CapacityFallback"
    #: With spec.deadline: True while the job is behind the uniform line or cannot finish in time.
    DEADLINE_AT_RISK = "DeadlineAtRisk"


class Reason(StrEnum):
    """Why a condition has its status (its ``reason``); the values are public (docs/contract.md)."""

    CHILDREN_CREATED = "ChildrenCreated"
    TRAINING = "Training"
    WAITING_FOR_WORKERS = "WaitingForWorkers"
    WORKERS_UNSCHEDULABLE = "WorkersUnschedulable"
    BELOW_MIN_REPLICAS = "BelowMinReplicas"
    WAITING_FOR_CHIEF = "WaitingForChief"
    WAITING_FOR_PARAMETER_SERVERS = "WaitingForParameterServers"
    PARAMETER_SERVER_LOST = "ParameterServerLost"
    CHIEF_LOST = "ChiefLost"
    WORKERS_LOST = "WorkersLost"
    STARTING = "Starting"
    AT_DESIRED_WORKERS = "AtDesiredWorkers"
    ELECTED = "Elected"
    NO_RUNNING_WORKERS = "NoRunningWorkers"
    BUDGET_EXCEEDED = "BudgetExceeded"
    SCALE_OUT_LIMITED = "ScaleOutLimited"
    WITHIN_BUDGET = "WithinBudget"
    INVALID_SPEC = "InvalidSpec"
    TRAINING_COMPLETE = "TrainingComplete"
    BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    FAILED_CREATE = "FailedCreate"
    FAILED_UPDATE = "FailedUpdate"
    FAILED_DELETE = "FailedDelete"
    PROGRESS_STALLED = "ProgressStalled"
    PROGRESSING = "Progressing"
    SUSPENDED = "Suspended"
    RESUMED = "Resumed"
    DATA_UNAVAILABLE = "DataUnavailable"
    CHECKPOINT_INDEX_CORRUPT = "CheckpointIndexCorrupt"
    CHECKPOINT_LOCATION_TAKEN = "CheckpointLocationTaken"
    TRAINER_MISCONFIGURED = "TrainerMisconfigured"
    PROGRAM_INVALID = "ProgramInvalid"
    LOSS_NOT_FINITE = "LossNotFinite"
    GROUP_CAPACITY_UNAVAILABLE = "GroupCapacityUnavailable"
    PREFERRED_GROUPS = "PreferredGroups"
    #: CapacityFallback True: no group is skipped, but workers still run in a less preferred group than one with
    #: room (they move back one at a time, make-before-break).
    FALLBACK_WORKERS = "FallbackWorkers"
    #: DeadlineAtRisk, by the deadline's state (:class:`ttj.deadline.policy.DeadlineState`).
    BEHIND_UNIFORM_PROGRESS = "BehindUniformProgress"
    DEADLINE_INFEASIBLE = "DeadlineInfeasible"
    ON_TRACK = "OnTrack"
    DEADLINE_MET = "DeadlineMet"
    DEADLINE_MISSED = "DeadlineMissed"


# The names are the contract's (the trainer reads the same tuples); the schema lists them as an enum.
if TYPE_CHECKING:
    ModelName = str
    DatasetName = str
else:
    ModelName = Literal[BUILTIN_MODELS]
    DatasetName = Literal[BUILTIN_DATASETS]
DEFAULT_MODEL: ModelName = DEFAULT_BUILTIN_MODEL
DEFAULT_DATASET: DatasetName = DEFAULT_BUILTIN_DATASET


class CheckpointSpec(_Model):
    """Where and how often the chief writes checkpoints."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "!has(self.volumeClaimName) || self.uri.startsWith('/')",
                "checkpoint.volumeClaimName needs checkpoint.uri to be an absolute path (the mount point)",
            ),
            (
                "!has(self.minIntervalSeconds) || !has(self.maxIntervalSeconds) || "
                "self.minIntervalSeconds <= self.maxIntervalSeconds",
                "checkpoint.minIntervalSeconds must not exceed checkpoint.maxIntervalSeconds",
            ),
        )
    )

    uri: str = Field(
        pattern=CHECKPOINT_URI_PATTERN,
        max_length=1024,
        description="Where checkpoints go: a Cloud Storage URI (gs://bucket/path) or an absolute path "
        "as the trainer container sees it.",
    )
    volume_claim_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=DNS_1123_SUBDOMAIN,
        description="Optional ReadWriteMany PersistentVolumeClaim mounted at uri in every pod. Without "
        "it an absolute path is used as the container sees it, which suits only the local cluster.",
    )
    interval_steps: int = Field(
        default=500,
        ge=0,
        le=MAX_INT32,
        description="Write a checkpoint every this many global steps; 0 turns the step interval off.",
    )
    interval_seconds: int = Field(
        default=300,
        ge=0,
        le=MAX_INT32,
        description="Write a checkpoint every this many seconds; 0 turns the time interval off. "
        "Whichever interval comes first triggers a checkpoint.",
    )
    adaptive: bool = Field(
        default=False,
        description="Let the operator choose the time between checkpoints from the preemption hazard of the "
        "chief's node (its GPU type, provisioning and age) and the chief's measured write time, as the "
        "Young-Daly optimum sqrt(2 x write time x mean time to preemption), within "
        "[minIntervalSeconds, maxIntervalSeconds]. It replaces intervalSteps and intervalSeconds once the "
        "chief has measured a write; status.checkpointInterval shows the choice.",
    )
    min_interval_seconds: int = Field(
        default=30, ge=1, le=MAX_INT32, description="With adaptive: never checkpoint more often than this."
    )
    max_interval_seconds: int = Field(
        default=3600, ge=1, le=MAX_INT32, description="With adaptive: never checkpoint less often than this."
    )

    @model_validator(mode="after")
    def _interval_bounds(self) -> CheckpointSpec:
        if self.min_interval_seconds > self.max_interval_seconds:
            raise ValueError(
                f"checkpoint.minIntervalSeconds ({self.min_interval_seconds}) must not exceed "
                f"checkpoint.maxIntervalSeconds ({self.max_interval_seconds})"
            )
        return self

    @model_validator(mode="after")
    def _claim_needs_a_path(self) -> CheckpointSpec:
        if self.volume_claim_name is not None and not self.uri.startswith("/"):
            raise ValueError("checkpoint.volumeClaimName needs checkpoint.uri to be an absolute path (the mount point)")
        return self


class ParameterServerSpec(_Model):
    """The parameter servers: a Deployment on on-demand nodes, never on spot or preemptible ones."""

    replicas: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Number of parameter servers; model variables are spread over all of them.",
    )
    resources: ResourceRequirements | None = Field(
        default=None, description="Compute resources of each parameter server container."
    )
    template: PodTemplate | None = Field(
        default=None,
        description="Additions to the parameter server pods, shaped like a PodTemplateSpec: labels, annotations, "
        "service account, env, volumes, priority class, pull secrets, placement extras. What ttj owns (its labels, "
        "TF_CONFIG and its env, its volumes, on-demand placement, the security context) cannot be overridden.",
    )


#: The most worker groups a job may list: each is a fallback step, and CEL rules over the list are priced per item.
MAX_WORKER_GROUPS = 8
#: The node label naming a node's zone (well-known, set by every cloud provider).
ZONE_LABEL = "topology.kubernetes.io/zone"
#: How long a worker may stay unschedulable before its slot is filled from the next group, without
#: ``workers.fallbackAfterSeconds``.
DEFAULT_FALLBACK_AFTER_SECONDS = 600
#: How long new workers skip a group whose capacity was found out, unless one of its workers runs sooner, without
#: ``workers.capacityRetrySeconds``: spot stock-outs in a zone last from minutes to hours.
DEFAULT_CAPACITY_RETRY_SECONDS = 1800


def _or_default(path: str, default: object) -> str:
    """CEL: the field at ``path`` (under self and oldSelf alike), or its schema default when unset."""
    parts = path.split(".")
    present = " && ".join(f"has(self.{'.'.join(parts[: i + 1])})" for i in range(len(parts)))
    literal = f"'{default}'" if isinstance(default, str) else str(default)
    return f"({present} ? self.{path} : {literal})"


#: The schema defaults of workers.replicas and workers.minReplicas, which the CEL rules also fall back on.
_DEFAULT_REPLICAS = 4
_DEFAULT_MIN_REPLICAS = 1


def _preemption_grace_field(who: str, default: str = "") -> Any:
    """workers.preemptionGraceSeconds, and a group's own."""
    return Field(
        default=None,
        ge=SIGTERM_EXIT_MARGIN_SECONDS + 1,
        le=MAX_PREEMPTION_GRACE_SECONDS,
        description=f"Seconds {who} gets between SIGTERM and SIGKILL when its node is preempted: GKE gives "
        f"{DEFAULT_PREEMPTION_GRACE_SECONDS} (the default); a node pool or compute class whose graceful termination "
        f"is lengthened (up to 120 s after the notice, the last 15 for system pods) gives up to "
        f"{MAX_PREEMPTION_GRACE_SECONDS}. The chief finishes its checkpoint and the trainer exits "
        f"{SIGTERM_EXIT_MARGIN_SECONDS} s before it ends; worker pods get a terminationGracePeriodSeconds of at least "
        f"it.{' ' + default if default else ''}",
    )


class WorkerGroupSpec(_Model):
    """One kind of worker node; a field left unset takes the value of spec.workers' field (batchSize: spec's)."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                f"!has(self.zone) || !has(self.nodeSelector) || !('{ZONE_LABEL}' in self.nodeSelector)",
                f"a group with zone may not also set {ZONE_LABEL} in its nodeSelector",
            ),
            (
                "!has(self.computeClass) || (!has(self.acceleratorType) && !has(self.provisioning))",
                "a group with computeClass may not also set acceleratorType or provisioning: its compute class "
                "chooses the nodes",
            ),
        )
    )

    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=DNS_1123_LABEL,
        description="The group's name, unique in the job (a DNS label); worker pods carry it in the label "
        "transient.training/worker-group.",
    )
    accelerator_type: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        pattern=LABEL_VALUE,
        description="GPU type of the group's nodes (the node label cloud.google.com/gke-accelerator); "
        "default: workers.acceleratorType.",
    )
    gpus_per_worker: int | None = Field(
        default=None, ge=0, le=16, description="nvidia.com/gpu limit of each worker; default: workers.gpusPerWorker."
    )
    provisioning: Provisioning | None = Field(
        default=None,
        description="How the group's nodes are bought: spot, preemptible or on-demand; default: workers.provisioning.",
    )
    max_replicas: int | None = Field(
        default=None,
        ge=0,
        le=256,
        description="The most worker slots this group may hold at once (e.g. a cap on on-demand workers); "
        "unset: as many as the job has.",
    )
    resources: ResourceRequirements | None = Field(
        default=None,
        description="Compute resources of each of the group's worker containers, besides GPUs; default: "
        "workers.resources.",
    )
    node_selector: NodeSelector | None = Field(
        default=None,
        description="Extra node labels the group's nodes must carry, added over workers.nodeSelector's; "
        "ttj's own (spot, preemptible, accelerator) are refused.",
    )
    tolerations: Annotated[list[Toleration], Field(max_length=32)] | None = Field(
        default=None, description="Extra tolerations of the group's worker pods, before workers.tolerations."
    )
    batch_size: int | None = Field(
        default=None, ge=1, le=65536, description="Per-worker batch size of the group's workers; default: batchSize."
    )
    preemption_grace_seconds: int | None = _preemption_grace_field(
        "a worker of the group", "Default: workers.preemptionGraceSeconds."
    )
    zone: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        pattern=LABEL_VALUE,
        description=f"Pin the group to one zone (the node label {ZONE_LABEL}), e.g. to fall back to another "
        "zone's spot capacity; unset: any zone.",
    )
    compute_class: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        pattern=LABEL_VALUE,
        description=f"A GKE custom compute class the group's workers select (nodeSelector {COMPUTE_CLASS_LABEL}, "
        "with a toleration of the class's taint) instead of ttj's accelerator and provisioning labels: the "
        "class's priorities choose the machine, each worker is priced by the node it landed on, and a worker "
        "the class's active migration drains away is replaced as a planned handover, not counted as a "
        "preemption. Excludes acceleratorType and provisioning.",
    )

    @model_validator(mode="after")
    def _zone_once(self) -> WorkerGroupSpec:
        if self.zone is not None and ZONE_LABEL in (self.node_selector or {}):
            raise ValueError(f"a group with zone may not also set {ZONE_LABEL} in its nodeSelector")
        return self

    @model_validator(mode="after")
    def _class_chooses_nodes(self) -> WorkerGroupSpec:
        if self.compute_class is not None and (self.accelerator_type is not None or self.provisioning is not None):
            raise ValueError(
                "a group with computeClass may not also set acceleratorType or provisioning: its compute class "
                "chooses the nodes"
            )
        return self


class WorkerSpec(_Model):
    """The workers: bare pods, one per active slot, on GPU nodes bought as `provisioning` says."""

    # Every field a rule reads through _or_default: `kubectl scale` of a job written without `workers` makes
    # `workers: {replicas: N}`, and kube-apiserver validates that before any default fills it in.
    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                f"{_or_default('minReplicas', _DEFAULT_MIN_REPLICAS)} <= {_or_default('replicas', _DEFAULT_REPLICAS)}",
                "workers.minReplicas must not exceed workers.replicas",
            ),
            (
                f"!has(self.maxReplicas) || {_or_default('replicas', _DEFAULT_REPLICAS)} <= self.maxReplicas",
                "workers.replicas must not exceed workers.maxReplicas",
            ),
            (
                "!has(self.groups) || self.groups.all(g, self.groups.exists_one(h, h.name == g.name))",
                "workers.groups: each group needs a name of its own",
            ),
        )
    )

    replicas: int = Field(
        default=_DEFAULT_REPLICAS,
        ge=1,
        le=256,
        description="Desired number of workers. `kubectl scale ttj/NAME --replicas=N` changes it "
        "within [minReplicas, maxReplicas].",
    )
    min_replicas: int = Field(
        default=_DEFAULT_MIN_REPLICAS,
        ge=1,
        le=256,
        description="Fewest active workers that keep training going; below it the job waits in Recovering.",
    )
    max_replicas: int | None = Field(
        default=None,
        ge=1,
        le=256,
        description="Number of worker slots (the paper's sparse mapping): the most workers the job "
        "can ever have, and the length of TF_CONFIG's worker list. Defaults to replicas.",
    )
    accelerator_type: str = Field(
        default=DEFAULT_ACCELERATOR,
        min_length=1,
        max_length=63,
        pattern=LABEL_VALUE,
        description="GPU type, as in the node label cloud.google.com/gke-accelerator "
        "(e.g. nvidia-tesla-t4, nvidia-l4, nvidia-tesla-v100).",
    )
    gpus_per_worker: int = Field(
        default=1,
        ge=0,
        le=16,
        description="nvidia.com/gpu limit of each worker; 0 runs workers without a GPU.",
    )
    provisioning: Provisioning = Field(
        default=Provisioning.SPOT,
        description="How worker nodes are bought: spot, preemptible or on-demand.",
    )
    resources: ResourceRequirements | None = Field(
        default=None, description="Compute resources of each worker container, besides its GPUs."
    )
    node_selector: NodeSelector | None = Field(
        default=None,
        description="Extra node labels a worker's node must carry; ttj's own (spot, preemptible, accelerator) are "
        "refused.",
    )
    tolerations: Annotated[list[Toleration], Field(max_length=32)] | None = Field(
        default=None,
        description="Extra tolerations for worker pods (the nvidia.com/gpu toleration is always added).",
    )
    template: PodTemplate | None = Field(
        default=None,
        description="Additions to the worker pods, shaped like a PodTemplateSpec: labels, annotations, service "
        "account, env, volumes, priority class, pull secrets, placement extras. What ttj owns (its labels, TF_CONFIG "
        "and its env, the Lease access, its volumes, GPU and spot/preemptible placement, the security context) "
        "cannot be overridden.",
    )
    groups: Annotated[list[WorkerGroupSpec], Field(min_length=1, max_length=MAX_WORKER_GROUPS)] | None = Field(
        default=None,
        description="Kinds of worker nodes in order of preference (at most 8), e.g. spot L4, else spot T4, else "
        "on-demand T4. A new worker goes to the first group with room whose capacity is not known to be out; a "
        "worker unschedulable for fallbackAfterSeconds moves to the next group. replicas, minReplicas and "
        "maxReplicas count the workers of all groups together. Without groups the job has one group, made of "
        "the fields above.",
    )
    preemption_grace_seconds: int | None = _preemption_grace_field("a worker")
    fallback_after_seconds: int | None = Field(
        default=None,
        ge=1,
        le=MAX_INT32,
        description="With groups: how long a worker may stay unschedulable (no node can take it, none is being "
        f"added) before its slot is filled from the next group; default {DEFAULT_FALLBACK_AFTER_SECONDS}.",
    )
    capacity_retry_seconds: int | None = Field(
        default=None,
        ge=1,
        le=MAX_INT32,
        description="With groups: how long new workers skip a group found out of capacity (a worker of it "
        "unschedulable for fallbackAfterSeconds) before they try it again and workers in less preferred groups move "
        "back to it, unless one of its workers runs sooner; default "
        f"{DEFAULT_CAPACITY_RETRY_SECONDS}. A retry that finds the group still out costs one worker pending for "
        "fallbackAfterSeconds.",
    )

    @property
    def slots(self) -> int:
        """The number of worker slots, the length of TF_CONFIG's worker list."""
        return self.max_replicas if self.max_replicas is not None else self.replicas

    @model_validator(mode="after")
    def _replica_bounds(self) -> WorkerSpec:
        if self.min_replicas > self.replicas:
            raise ValueError(
                f"workers.minReplicas ({self.min_replicas}) must not exceed workers.replicas ({self.replicas})"
            )
        if self.max_replicas is not None and self.replicas > self.max_replicas:
            raise ValueError(
                f"workers.replicas ({self.replicas}) must not exceed workers.maxReplicas ({self.max_replicas})"
            )
        return self

    @model_validator(mode="after")
    def _group_names_unique(self) -> WorkerSpec:
        names = [g.name for g in self.groups or []]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"workers.groups: each group needs a name of its own ({', '.join(repeated)} repeated)")
        return self


#: ``module:function``, each a dotted Python name.
PROGRAM_ENTRYPOINT_PATTERN = (
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
)


class ProgramSpec(_Model):
    """The user's own training program, in the trainer image: ``program(args) -> ttj_trainer.program.Program``."""

    entrypoint: str = Field(
        min_length=3,
        max_length=256,
        pattern=PROGRAM_ENTRYPOINT_PATTERN,
        description="The function that returns the program, as module:function (e.g. my_pkg.train:program); "
        "its module must be importable in the trainer image (or on PYTHONPATH).",
    )
    args: dict[str, Annotated[str, Field(max_length=1024)]] = Field(
        default_factory=dict,
        max_length=64,
        description="Arguments passed to the function, as strings (at most 64, each up to 1024 characters).",
    )


class DataSpec(_Model):
    """Where the dataset is. Without it, dataset cifar10 is downloaded once per pod into a cache volume."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "!has(self.volumeClaimName) || self.uri.startsWith('/')",
                "data.volumeClaimName needs data.uri to be an absolute path (the mount point)",
            )
        )
    )

    uri: str = Field(
        pattern=CHECKPOINT_URI_PATTERN,
        max_length=1024,
        description="Where the dataset's files are: a Cloud Storage URI (gs://bucket/path) or an absolute "
        "path as the trainer container sees it. For cifar10: the python (data_batch_1..5) or binary "
        "(data_batch_1..5.bin) files of the CIFAR-10 archive, directly there or in the archive's folder.",
    )
    volume_claim_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=DNS_1123_SUBDOMAIN,
        description="Optional PersistentVolumeClaim holding the dataset, mounted read-only at uri in every worker.",
    )

    @model_validator(mode="after")
    def _claim_needs_a_path(self) -> DataSpec:
        if self.volume_claim_name is not None and not self.uri.startswith("/"):
            raise ValueError("data.volumeClaimName needs data.uri to be an absolute path (the mount point)")
        return self


class ProgressSpec(_Model):
    """When a job that does not advance counts as stalled."""

    stall_timeout_seconds: int = Field(
        default=900,
        ge=0,
        le=MAX_INT32,
        description="Mark the job Stalled (condition and Warning event, with the chief's last error) and elect "
        "another chief when the global step has not advanced for this many seconds while a chief runs; 0 "
        "turns stall detection off. A stall is not counted as a preemption or a failure.",
    )


class BudgetSpec(_Model):
    """A cost ceiling for the job."""

    max_cost_usd: float | None = Field(
        default=None,
        gt=0,
        le=1e12,
        alias="maxCostUSD",
        description="Stop adding workers when the projected cost would pass this many US dollars; when "
        "the cost reaches it, checkpoint and stop the job with the BudgetExceeded condition.",
    )


#: The implicit catch-up group of a job with a deadline and no on-demand group to catch up with.
IMPLICIT_CATCH_UP_GROUP = "catch-up"


def _rfc3339(value: str) -> str:
    if parse_time(value) is None:
        raise ValueError("must be an RFC 3339 date-time")
    return value


class DeadlineSpec(_Model):
    """When the job must be done by, and the on-demand workers it may add to get there."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "has(self.completeBy) || has(self.completeWithinSeconds)",
                "deadline needs completeBy or completeWithinSeconds",
            )
        )
    )

    complete_by: Annotated[str, AfterValidator(_rfc3339)] | None = Field(
        default=None,
        max_length=64,
        description="Finish training by this time (RFC 3339, e.g. 2026-12-04T09:00:00Z). With "
        "completeWithinSeconds too, the earlier of the two counts.",
        json_schema_extra={"format": "date-time"},
    )
    complete_within_seconds: int | None = Field(
        default=None,
        ge=1,
        le=MAX_INT32,
        description="Finish training this many seconds after the job started (status.startTime, else its "
        "creation; as activeDeadlineSeconds, it counts again from a resume). With completeBy too, the earlier of "
        "the two counts.",
    )
    catch_up_group: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        pattern=DNS_1123_LABEL,
        description="The workers.groups entry the deadline may add workers to, on top of replicas, when spot "
        "alone would finish too late; not the first group. Default: the last on-demand group after the first, "
        f"else an implicit on-demand twin of the first group named {IMPLICIT_CATCH_UP_GROUP}. It holds only the "
        "workers the deadline adds: the other groups' workers do not fall back to it.",
    )
    max_catch_up_workers: int | None = Field(
        default=None,
        ge=0,
        le=256,
        description="The most catch-up workers at once. They always stay within the free worker slots "
        "(workers.maxReplicas minus replicas), the catch-up group's maxReplicas and the budget, which stays a "
        "hard cap: a deadline the budget cannot meet is said at once in the DeadlineAtRisk condition.",
    )

    @model_validator(mode="after")
    def _a_time(self) -> DeadlineSpec:
        if self.complete_by is None and self.complete_within_seconds is None:
            raise ValueError("deadline needs completeBy or completeWithinSeconds")
        return self


def _unchanged(path: str, default: object) -> str:
    """CEL transition rule: the field keeps its value (its default when unset) across updates."""
    now = _or_default(path, default)
    return f"{now} == {now.replace('self.', 'oldSelf.')}"


def _slots(self_name: str) -> str:
    replicas = _or_default("workers.replicas", WorkerSpec.model_fields["replicas"].default).replace(
        "self.", f"{self_name}."
    )
    workers = f"{self_name}.workers"
    return f"(has({workers}) && has({workers}.maxReplicas) ? {workers}.maxReplicas : {replicas})"


#: What cannot change once the job exists (CEL transition rules, checked on updates only): running pods were
#: made for the old values, and pods made for new ones would disagree with them.
IMMUTABLE_RULES = (
    (_unchanged("model", DEFAULT_MODEL), "model cannot change: the checkpoints hold another model's variables"),
    (_unchanged("dataset", DEFAULT_DATASET), "dataset cannot change: running workers read the old one"),
    (
        # a conditional, not has() == has(): kube prices == on has()'s results far over any budget
        "has(self.program) ? has(oldSelf.program) && self.program == oldSelf.program : !has(oldSelf.program)",
        "program cannot change: the checkpoints hold its variables and running workers run it",
    ),
    (
        "self.checkpoint.uri == oldSelf.checkpoint.uri",
        "checkpoint.uri cannot change: a new chief would not find the checkpoints written so far",
    ),
    (
        _unchanged("parameterServers.replicas", ParameterServerSpec.model_fields["replicas"].default),
        "parameterServers.replicas cannot change: the model variables are sharded over that many parameter servers",
    ),
    (
        f"{_slots('self')} == {_slots('oldSelf')}",
        "the number of worker slots (workers.maxReplicas, or workers.replicas when maxReplicas is unset) cannot "
        "change: it is the length of TF_CONFIG's worker list; set maxReplicas to scale replicas within it",
    ),
)


_CATCH_UP_GROUP_RULE = (
    "!has(self.deadline) || !has(self.deadline.catchUpGroup) || (has(self.workers) && has(self.workers.groups) && "
    "self.workers.groups[0].name != self.deadline.catchUpGroup && "
    "self.workers.groups.exists(g, g.name == self.deadline.catchUpGroup))"
)
_CATCH_UP_GROUP_MESSAGE = (
    "deadline.catchUpGroup must name a workers.groups entry other than the first (the first holds the replicas)"
)


class TransientTrainingJobSpec(_Model):
    """What to train, on which workers, and how to survive preemptions."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            *IMMUTABLE_RULES,
            (
                "!has(self.program) || (!has(self.model) && !has(self.dataset))",
                "program is exclusive with model and dataset: the program brings its own",
            ),
            (_CATCH_UP_GROUP_RULE, _CATCH_UP_GROUP_MESSAGE),
        )
    )

    image: str = Field(
        default=DEFAULT_TRAINER_IMAGE,
        min_length=1,
        max_length=4096,
        pattern=r"^\S+$",
        description="Trainer image run by every pod of the job.",
    )
    model: ModelName | None = Field(
        default=None,
        description="Built-in model to train: resnet32 (the paper's; the default without program) or small-cnn.",
    )
    dataset: DatasetName | None = Field(
        default=None,
        description="Built-in dataset: cifar10 (the default without program; from data.uri, or downloaded when "
        "data is not given) or synthetic (CIFAR-shaped, needs no download).",
    )
    program: ProgramSpec | None = Field(
        default=None,
        description="The user's own Keras training program instead of a built-in model and dataset "
        "(see docs/programs.md). Cannot change once the job exists.",
    )
    train_steps: int = Field(
        ge=1,
        le=MAX_SAFE_INTEGER,
        description="Global steps to reach; the job succeeds when the chief reports this step.",
    )
    batch_size: int = Field(default=128, ge=1, le=65536, description="Per-worker batch size.")
    learning_rate: float = Field(default=0.1, gt=0, le=100, description="Base learning rate.")
    learning_rate_scaling: LearningRateScaling = Field(
        default=LearningRateScaling.ACTIVE_WORKERS,
        description="none keeps the rate fixed; activeWorkers scales it by min(1, active/desired "
        "workers), the paper's adaptive learning rate; updateShare (for mixed GPU types) also by each worker's "
        "share of the updates: its steps/s over the update-weighted mean of the active workers' (sum r^2 / sum r; "
        "a chief's pauses to checkpoint do not count), measured over about 30 s and clamped to [0.25, 4], so a "
        "slower worker, whose gradients are staler, takes smaller steps; and, in a group with its own batchSize, "
        "by that batchSize over spec.batchSize.",
    )
    checkpoint: CheckpointSpec = Field(description="Where and how often the chief writes checkpoints.")
    data: DataSpec | None = Field(
        default=None,
        description="Where the dataset is. Without it, cifar10 is downloaded from its public archive into a "
        "per-pod cache volume (its checksum checked); synthetic needs no data.",
    )
    progress: ProgressSpec = Field(
        default_factory=ProgressSpec, description="Stall detection: how long the global step may stand still."
    )
    parameter_servers: ParameterServerSpec = Field(
        default_factory=ParameterServerSpec,
        description="The parameter servers, placed on on-demand nodes.",
    )
    workers: WorkerSpec = Field(default_factory=WorkerSpec, description="The workers and their nodes.")
    budget: BudgetSpec | None = Field(default=None, description="Optional cost ceiling.")
    deadline: DeadlineSpec | None = Field(
        default=None,
        description="Finish by a time at the least cost: train on spot while it keeps up with the straight line "
        "from start to deadline, add on-demand catch-up workers when it falls behind, release them once safely "
        "ahead. Unlike activeDeadlineSeconds it never fails the job.",
    )
    backoff_limit: int = Field(
        default=3,
        ge=0,
        le=MAX_INT32,
        description="Failures of the training code tolerated before the job fails; preemptions never count.",
    )
    active_deadline_seconds: int | None = Field(
        default=None,
        ge=1,
        le=MAX_INT32,
        description=(
            "Fail the job when it has run this many seconds since it started, as in a Kubernetes Job: the timer "
            "stops while the job is suspended and starts again from zero when it resumes."
        ),
    )
    suspend: bool = Field(
        default=False,
        description=(
            "Pause the job, as in a Kubernetes Job: the workers are stopped (the chief writes a checkpoint "
            "first), then the parameter servers scale to 0; no pod runs and no cost accrues. Setting it back to "
            "false resumes training from that checkpoint."
        ),
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None,
        ge=0,
        le=MAX_INT32,
        description="Delete the job this many seconds after it succeeded or failed.",
    )
    clean_pod_policy: CleanPodPolicy = Field(
        default=CleanPodPolicy.RUNNING,
        description="Pods deleted when the job finishes: All, Running (those still running, e.g. the "
        "parameter servers), or None.",
    )

    @model_validator(mode="after")
    def _catch_up_group_is_listed(self) -> TransientTrainingJobSpec:
        name = self.deadline.catch_up_group if self.deadline is not None else None
        if name is None:
            return self
        names = [g.name for g in self.workers.groups or []]
        if name not in names[1:]:
            raise ValueError(_CATCH_UP_GROUP_MESSAGE)
        return self

    @model_validator(mode="after")
    def _program_is_exclusive(self) -> TransientTrainingJobSpec:
        if self.program is not None and (self.model is not None or self.dataset is not None):
            raise ValueError("program is exclusive with model and dataset: the program brings its own")
        return self

    @property
    def built_in_model(self) -> ModelName:
        """The built-in model a job without a program trains."""
        return self.model or DEFAULT_MODEL

    @property
    def built_in_dataset(self) -> DatasetName:
        """The built-in dataset a job without a program reads (none is read for a program)."""
        return self.dataset or DEFAULT_DATASET


class Condition(_Model):
    """A Kubernetes-style condition."""

    # Typed here, a plain string in the CRD: the status schema does not list the values (docs/contract.md does).
    type: Annotated[ConditionType, WithJsonSchema({"type": "string"})] = Field(
        description="Condition type, e.g. Running, ChiefElected, Succeeded."
    )
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: Annotated[Reason, WithJsonSchema({"type": "string"})] | None = Field(
        default=None, description="One-word CamelCase reason for the last transition."
    )
    message: str | None = Field(default=None, description="Human-readable detail of the last transition.")
    last_transition_time: str | None = Field(
        default=None, description="When the status last changed (RFC 3339).", json_schema_extra={"format": "date-time"}
    )
    observed_generation: int | None = Field(
        default=None, description="The spec generation this condition was computed from."
    )


class ChiefStatus(_Model):
    """The current checkpointing chief."""

    pod: str | None = Field(default=None, description="Name of the chief worker pod.")
    epoch: int = Field(default=0, ge=0, description="Chief epoch (the Lease's leaseTransitions); it only grows.")
    elected_at: str | None = Field(
        default=None, description="When this chief was elected (RFC 3339).", json_schema_extra={"format": "date-time"}
    )
    lost_at: str | None = Field(
        default=None,
        description="When the previous chief was lost (RFC 3339); cleared once the new chief renews the Lease.",
        json_schema_extra={"format": "date-time"},
    )
    renew_time: str | None = Field(
        default=None,
        description="The Lease's renewTime as the operator last saw it; only a change of it counts, so the "
        "trainers' clocks never matter.",
    )
    renew_observed_at: str | None = Field(
        default=None,
        description="When the operator first saw that renewTime (RFC 3339, the operator's clock); the chief's "
        "lease expires leaseDurationSeconds after it.",
        json_schema_extra={"format": "date-time"},
    )


class WorkerGroupStatus(_Model):
    """One worker group's workers and cost (spec.workers.groups, in their order)."""

    name: str = Field(description="The group's name.")
    accelerator_type: str | None = Field(
        default=None, description="GPU type of the group's nodes (unset for a group with a compute class)."
    )
    provisioning: str | None = Field(
        default=None, description="How the group's nodes are bought (unset for a group with a compute class)."
    )
    compute_class: str | None = Field(
        default=None, description="The GKE custom compute class that chooses the group's nodes, if any."
    )
    desired: int = Field(default=0, ge=0, description="Worker slots the group is to hold now.")
    active: int = Field(default=0, ge=0, description="The group's workers running.")
    pending: int = Field(default=0, ge=0, description="The group's workers created but not yet running.")
    usd: float = Field(default=0.0, ge=0, description="Cost accrued by the group's workers so far, in US dollars.")
    settled_usd: float = Field(
        default=0.0,
        ge=0,
        alias="settledUSD",
        description="Of usd: the cost of the group's worker pods that no longer exist, in US dollars.",
    )
    cross_zone_usd: float = Field(
        default=0.0,
        ge=0,
        alias="crossZoneUSD",
        description="Of usd: the group's workers' traffic with parameter servers in other zones, in US dollars.",
    )
    capacity_unavailable_since: str | None = Field(
        default=None,
        description="Since when new workers skip this group: one of its workers stayed unschedulable for "
        "workers.fallbackAfterSeconds (RFC 3339); cleared once one of its workers is scheduled after it and runs, "
        "or workers.capacityRetrySeconds after it (new workers try the group again, and workers move back to it).",
        json_schema_extra={"format": "date-time"},
    )
    capacity_unavailable_reason: str | None = Field(
        default=None, description="Why the group's capacity was taken to be out (the scheduler's message)."
    )
    steps_per_second: float | None = Field(
        default=None,
        ge=0,
        description="Training steps per second of the group's workers together, as the chief last measured them.",
    )


class WorkerCounts(_Model):
    """How many workers the job wants and has."""

    desired: int = Field(default=0, ge=0, description="Workers wanted (spec.workers.replicas).")
    active: int = Field(default=0, ge=0, description="Workers running.")
    pending: int = Field(default=0, ge=0, description="Workers created but not yet running.")
    summary: str | None = Field(default=None, description="active/desired, as shown by kubectl get.")
    selector: str | None = Field(
        default=None, description="Label selector of the job's worker pods, for the scale subresource."
    )


def _short_names(metrics: dict[str, float]) -> dict[str, float]:
    """Metric names within the bound; the CEL rule says the same to the API server."""
    for name in metrics:
        if len(name) > MAX_METRIC_NAME_LENGTH:
            raise ValueError(f"metric name {name!r} is longer than {MAX_METRIC_NAME_LENGTH} characters")
    return metrics


EvaluationMetrics = Annotated[
    dict[str, Annotated[float, Field(allow_inf_nan=False)]],
    Field(max_length=MAX_EVALUATION_METRICS),
    AfterValidator(_short_names),
    Field(
        json_schema_extra=_cel(
            (
                f"self.all(name, size(name) <= {MAX_METRIC_NAME_LENGTH})",
                f"metric names must be at most {MAX_METRIC_NAME_LENGTH} characters",
            )
        )
    ),
]


class EtaStatus(_Model):
    """When training is projected to reach trainSteps."""

    p50: str = Field(description="Median projected completion (RFC 3339).", json_schema_extra={"format": "date-time"})
    p90: str = Field(
        description="Completion projected at 90 % confidence (RFC 3339): the later of the two.",
        json_schema_extra={"format": "date-time"},
    )


class ProgressStatus(_Model):
    """Training progress as last reported by the chief."""

    global_step: int = Field(default=0, ge=0, description="Global step on the parameter servers.")
    checkpoint_step: int | None = Field(default=None, ge=0, description="Global step of the latest checkpoint.")
    checkpoint_time: str | None = Field(
        default=None,
        description="When the latest checkpoint was written (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    )
    checkpoint_path: str | None = Field(default=None, description="TensorFlow path prefix of the latest checkpoint.")
    epoch: int | None = Field(default=None, ge=0, description="Chief epoch of the report.")
    last_error: str | None = Field(
        default=None, description="The chief's latest error while training is held up (storage, parameter servers)."
    )
    last_progress_time: str | None = Field(
        default=None,
        description="When the operator last saw the global step advance, or a chief elected (RFC 3339); the "
        "stall timeout counts from it.",
        json_schema_extra={"format": "date-time"},
    )
    evaluation_step: int | None = Field(
        default=None, ge=0, description="Global step of the latest evaluation of the program's evaluation set."
    )
    evaluation: EvaluationMetrics | None = Field(
        default=None,
        description="The latest evaluation's metrics by Keras metric name (the loss under the name loss), at "
        f"evaluationStep: at most {MAX_EVALUATION_METRICS} metrics (the first by name), names up to "
        f"{MAX_METRIC_NAME_LENGTH} characters.",
    )
    export_path: str | None = Field(
        default=None,
        max_length=MAX_PATH_LENGTH,
        description="Where the chief exported the final model once the job succeeded: the directory holding "
        "model.keras (Keras) and saved_model/ (TensorFlow SavedModel).",
    )
    steps_per_second: float | None = Field(
        default=None,
        ge=0,
        description="Training steps per second of all the active workers together, as the chief last measured them "
        "(each worker's over about 30 s).",
    )
    loss: float | None = Field(
        default=None,
        description="The training loss the chief last reported: the mean of its own steps' losses since its report "
        "before (the chief's batches only; the held-out loss is evaluation.loss).",
    )
    eta: EtaStatus | None = Field(
        default=None,
        description="When training is projected to reach trainSteps, from the live step rate (and, with a "
        "deadline, the catch-up workers decided); unset while the rate is unknown.",
    )


class DeadlineStatus(_Model):
    """Where the job stands against spec.deadline."""

    at: str = Field(description="The deadline (RFC 3339).", json_schema_extra={"format": "date-time"})
    state: DeadlineState = Field(description="OnTrack, AtRisk (catch-up workers held), Infeasible, Met or Missed.")
    catch_up_workers: int = Field(default=0, ge=0, description="Catch-up workers the job is to hold now.")
    slack_seconds: int | None = Field(
        default=None, description="Seconds from the p90 completion projected with them to the deadline (<0: late)."
    )
    escalated_at: str | None = Field(
        default=None,
        description="Since when catch-up workers are held for the deadline (RFC 3339); unset while none are.",
        json_schema_extra={"format": "date-time"},
    )
    message: str | None = Field(default=None, description="The policy's reasoning, with the numbers.")


class CheckpointIntervalStatus(_Model):
    """The checkpoint interval the operator chose for an adaptive job, and what it rests on."""

    seconds: int = Field(ge=0, description="Seconds between the chief's periodic checkpoints, as published.")
    write_seconds: float | None = Field(
        default=None, ge=0, description="The chief's measured checkpoint write time, in seconds."
    )
    hazard_per_hour: float | None = Field(
        default=None, ge=0, description="Preemption hazard of the chief's node at its age, per hour (0: on-demand)."
    )
    node_age_seconds: int | None = Field(default=None, ge=0, description="Age of the chief's node, in seconds.")
    reason: str | None = Field(default=None, description="How the interval was chosen, in words.")


class PodCost(_Model):
    """One pod's accrued cost, kept while the pod exists; folded into settledUSD once it is gone."""

    name: str = Field(description="Pod name.")
    uid: str = Field(description="Pod UID (a replacement pod of the same name is another entry).")
    role: Literal["ps", "worker"] = Field(description="ps or worker.")
    group: str | None = Field(default=None, description="The worker group the pod was made for (with groups).")
    provisioning: str | None = Field(default=None, description="How the pod's node was bought.")
    started_at: str = Field(
        description="When the pod started running (RFC 3339).", json_schema_extra={"format": "date-time"}
    )
    ended_at: str | None = Field(
        default=None,
        description="When the pod stopped running (finished or preempted), RFC 3339; empty while it runs.",
        json_schema_extra={"format": "date-time"},
    )
    usd_per_hour: float = Field(
        ge=0, alias="usdPerHour", description="The pod's share of its node's hourly price, in US dollars."
    )
    on_demand_usd_per_hour: float = Field(
        ge=0, alias="onDemandUSDPerHour", description="The same at on-demand prices, in US dollars."
    )
    usd: float = Field(default=0.0, ge=0, description="Cost accrued by this pod so far, in US dollars.")
    on_demand_equivalent_usd: float = Field(
        default=0.0, ge=0, alias="onDemandEquivalentUSD", description="The same pod-seconds at on-demand prices."
    )
    cross_zone_usd: float = Field(
        default=0.0,
        ge=0,
        alias="crossZoneUSD",
        description="A worker's traffic with parameter servers in other zones, in US dollars (not in usd).",
    )


class CrossZoneStatus(_Model):
    """What the traffic between workers and parameter servers in different zones has cost (ttj.cost.traffic)."""

    usd: float = Field(default=0.0, ge=0, description="Of cost.usd: the traffic's cost so far, in US dollars.")
    gib: float = Field(default=0.0, ge=0, description="The traffic so far, in GiB.")
    step: int = Field(ge=0, description="The global step the traffic is priced up to.")
    priced_at: str = Field(
        description="When the traffic was priced up to step (MicroTime): the next steps were made after it.",
        json_schema_extra={"format": "date-time"},
    )
    usd_per_hour: float = Field(
        default=0.0,
        ge=0,
        alias="usdPerHour",
        description="The traffic's cost per hour over the latest interval that priced steps, in US dollars; the "
        "budget adds it to cost.usdPerHour.",
    )


class CostStatus(_Model):
    """Money spent so far."""

    usd: float = Field(default=0.0, ge=0, description="Cost accrued per second of pod run time, in US dollars.")
    on_demand_equivalent_usd: float = Field(
        default=0.0,
        ge=0,
        alias="onDemandEquivalentUSD",
        description="What the same pod-seconds would have cost at on-demand prices, in US dollars.",
    )
    # The ledger below keeps the total exact across operator restarts and pod deletions (ttj.cost.model).
    usd_per_hour: float = Field(
        default=0.0, ge=0, alias="usdPerHour", description="What the pods running now cost per hour, in US dollars."
    )
    settled_usd: float = Field(
        default=0.0, ge=0, alias="settledUSD", description="Cost of the job's pods that no longer exist, in US dollars."
    )
    settled_on_demand_equivalent_usd: float = Field(
        default=0.0,
        ge=0,
        alias="settledOnDemandEquivalentUSD",
        description="The same pod-seconds at on-demand prices, in US dollars.",
    )
    pods: list[PodCost] | None = Field(
        default=None,
        description="Cost of each pod that ran and still exists.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["uid"]},
    )
    cross_zone: CrossZoneStatus | None = Field(
        default=None,
        description="Traffic between workers and parameter servers in different zones of the region, once the "
        "chief reports parameterBytes (docs/cost.md).",
    )
    price_table: str | None = Field(default=None, description="Name of the price table used.")
    notes: list[Annotated[str, Field(description="One reason, in words.")]] | None = Field(
        default=None, description="Why a figure is an estimate (e.g. a machine type missing from the price table)."
    )
    summary: str | None = Field(
        default=None, description="The cost so far as people read it, e.g. $0.0023 (the COST column of kubectl get)."
    )
    accrued_at: str | None = Field(
        default=None,
        description="When the cost was last computed (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    )


class PreemptionCost(_Model):
    """What one loss cost the job: steps to train again, time a slot stood empty, money spent starting up."""

    pod: str = Field(description="The pod lost (a worker, or the parameter server pod that held the model).")
    role: Literal["worker", "chief", "ps"] = Field(description="worker, chief (the worker holding the Lease) or ps.")
    slot: int | None = Field(default=None, ge=0, description="Worker slot, or parameter server index.")
    started_at: str | None = Field(
        default=None,
        description="When the lost pod started running (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    )
    lost_at: str = Field(
        description="When the loss was first evident in the cluster (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    )
    global_step: int = Field(default=0, ge=0, description="The job's global step when the pod was lost.")
    steps_lost: int = Field(
        default=0,
        ge=0,
        description="Global steps trained again because of the loss: a parameter server's steps since the latest "
        "checkpoint; 0 for a worker or a chief, whose parameter servers keep the model.",
    )
    job_usd: float = Field(
        default=0.0, ge=0, alias="jobUSD", description="The job's accrued cost when the pod was lost, in US dollars."
    )
    replacement: str | None = Field(
        default=None,
        description="The pod that took the loss over: the slot's next pod, or a worker made after the loss in a slot "
        "that was free then.",
    )
    recovered_at: str | None = Field(
        default=None,
        description="When the replacement was ready (Ready condition, else its container running), RFC 3339; "
        "empty while the slot waits.",
        json_schema_extra={"format": "date-time"},
    )
    slot_empty_seconds: float | None = Field(
        default=None, ge=0, description="Seconds from the loss until the replacement was ready."
    )
    startup_seconds: float | None = Field(
        default=None,
        ge=0,
        description="Seconds the replacement was paid for before it was ready (from its start time).",
    )
    startup_usd: float | None = Field(
        default=None, ge=0, alias="startupUSD", description="What the replacement cost before it was ready."
    )
    usd: float | None = Field(
        default=None,
        ge=0,
        description="What the loss cost in all: the replacement's start-up plus the lost steps at the job's "
        "average cost per step, in US dollars.",
    )
    on_demand_equivalent_usd: float | None = Field(
        default=None,
        ge=0,
        alias="onDemandEquivalentUSD",
        description="The same at on-demand prices: what an on-demand run would not have spent.",
    )


class SavingsStatus(_Model):
    """Savings against on-demand prices, net of what preemptions cost (the paper's Table IV, live)."""

    on_demand_usd: float = Field(
        default=0.0,
        ge=0,
        alias="onDemandUSD",
        description="What the work done so far would have cost on on-demand nodes, without preemptions: "
        "cost.onDemandEquivalentUSD less the on-demand price of the losses.",
    )
    gross_usd: float = Field(
        default=0.0,
        alias="grossUSD",
        description="cost.onDemandEquivalentUSD less cost.usd: the price difference alone.",
    )
    preemption_loss_usd: float = Field(
        default=0.0,
        ge=0,
        alias="preemptionLossUSD",
        description="What the preemptions cost, at the prices paid (sum of the losses' usd).",
    )
    preemption_loss_on_demand_usd: float = Field(
        default=0.0,
        ge=0,
        alias="preemptionLossOnDemandUSD",
        description="The same losses at on-demand prices (sum of the losses' onDemandEquivalentUSD).",
    )
    net_usd: float = Field(
        default=0.0, alias="netUSD", description="onDemandUSD less cost.usd: what running on spot saved, net."
    )
    net_percent: float | None = Field(
        default=None, description="netUSD as a percentage of onDemandUSD (empty while it is 0)."
    )
    steps_lost: int = Field(default=0, ge=0, description="Global steps trained again, over all losses.")
    slot_empty_seconds: float = Field(
        default=0.0, ge=0, description="Seconds worker slots stood empty after losses, over all recovered losses."
    )
    losses: int = Field(default=0, ge=0, description="Losses counted here (recovered or not).")
    recovered: int = Field(default=0, ge=0, description="Losses whose replacement is ready.")
    dropped_open: int = Field(
        default=0,
        ge=0,
        description="Losses whose record left preemptionCosts (more than 20 open at once) before their replacement "
        "was ready: counted in losses and stepsLost, never recovered, their cost not in the totals.",
    )


class TransientTrainingJobStatus(_Model):
    """Observed state, written by the operator only."""

    observed_generation: int | None = Field(default=None, description="The spec generation last acted on.")
    phase: Phase | None = Field(default=None, description="Pending, Running, Recovering, Succeeded or Failed.")
    conditions: list[Condition] | None = Field(
        default=None,
        description="Current conditions of the job, one per type.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    chief: ChiefStatus | None = Field(default=None, description="The current checkpointing chief.")
    workers: WorkerCounts | None = Field(default=None, description="Worker counts.")
    worker_groups: list[WorkerGroupStatus] | None = Field(
        default=None,
        description="Workers and cost by worker group, in the order of spec.workers.groups (jobs with groups only).",
    )
    preemptions: int = Field(default=0, ge=0, description="Workers and parameter servers lost to preemption.")
    replacements: int = Field(default=0, ge=0, description="Worker pods created to replace lost ones.")
    migrations: int = Field(
        default=0,
        ge=0,
        description="Workers a compute class's active migration drained away (planned handovers: replaced, "
        "but not counted in preemptions).",
    )
    chief_elections: int = Field(default=0, ge=0, description="Chiefs elected over the job's life.")
    failures: int = Field(default=0, ge=0, description="Failures of the training code (counted against backoffLimit).")
    progress: ProgressStatus | None = Field(default=None, description="Progress reported by the chief.")
    deadline: DeadlineStatus | None = Field(default=None, description="With spec.deadline: where the job stands.")
    checkpoint_interval: CheckpointIntervalStatus | None = Field(
        default=None, description="The adaptive checkpoint interval in force (checkpoint.adaptive)."
    )
    cost: CostStatus | None = Field(default=None, description="Money spent so far.")
    start_time: str | None = Field(
        default=None, description="When the job started (RFC 3339).", json_schema_extra={"format": "date-time"}
    )
    completion_time: str | None = Field(
        default=None, description="When the job finished (RFC 3339).", json_schema_extra={"format": "date-time"}
    )
    accounted_pods: list[Annotated[str, Field(description="Name of a lost worker pod already counted.")]] | None = (
        Field(
            default=None,
            description="Lost worker pods already counted in preemptions/failures; the operator deletes them only "
            "after this is written, and forgets them once they are gone (keeps counting exact across restarts).",
        )
    )
    slot_incarnations: (
        list[Annotated[int, Field(ge=0, description="The incarnation the slot of this index reserves.")]] | None
    ) = Field(
        default=None,
        description="By worker slot, the incarnation (the last number of a worker pod's name) its next pod takes: "
        "one above every pod of the slot the operator has observed, or its latest create while that pod is not "
        "observed yet (created again, the create answers 409 while it exists). A worker pod's name never comes "
        "back, even while the operator's view of the pods lags behind its own creates.",
    )
    parameter_server_pods: (
        list[Annotated[str, Field(description="Parameter server pod of this index (empty: none seen yet).")]] | None
    ) = Field(
        default=None,
        description="Name of the parameter server pod holding the model state, by PS index; a different pod "
        "means the PS was replaced and the model state must be restored from the latest checkpoint.",
    )
    preemption_costs: list[PreemptionCost] | None = Field(
        default=None,
        description="What each recent loss cost, newest last: at most 20, the closed ones leaving first "
        "(savings keeps the totals).",
    )
    savings: SavingsStatus | None = Field(
        default=None, description="Savings against on-demand prices, net of what preemptions cost."
    )


class TransientTrainingJob(_Model):
    """Distributed TensorFlow training on spot or preemptible GPUs that survives preemptions."""

    model_config = ConfigDict(extra="ignore")

    api_version: str = Field(default=API_VERSION, pattern=f"^{re.escape(API_VERSION)}$")
    kind: str = Field(default=KIND, pattern=f"^{KIND}$")
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: TransientTrainingJobSpec
    status: TransientTrainingJobStatus | None = None


def status_body(status: TransientTrainingJobStatus) -> JobStatusBody:
    """``status`` as the JSON the status subresource holds."""
    return cast(JobStatusBody, status.model_dump(by_alias=True, exclude_none=True, mode="json"))
