"""The TransientTrainingJob API: the single source of truth for the CRD in ``crds/``.

Field descriptions become ``kubectl explain`` text, so they are written for users. Rules the
OpenAPI schema can state (ranges, enums, patterns) are stated on the fields; cross-field rules are
both CEL rules in the schema (``x-kubernetes-validations``, on by default since Kubernetes 1.25)
and model validators here, so the operator refuses them too when a cluster let them through.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from ttj_contract import Provisioning

DEFAULT_TRAINER_IMAGE = "ghcr.io/transient-training/ttj-trainer:0.1.0"
DEFAULT_ACCELERATOR = "nvidia-tesla-t4"

#: A Kubernetes quantity ("500m", "2Gi") or a plain integer.
Quantity = Annotated[
    int | str,
    Field(json_schema_extra={"x-kubernetes-int-or-string": True}),
]

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


class LearningRateScaling(StrEnum):
    """How the learning rate follows the worker count."""

    NONE = "none"
    ACTIVE_WORKERS = "activeWorkers"


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
    STALLED = "Stalled"


ModelName = Literal["resnet32", "small-cnn"]
DatasetName = Literal["cifar10", "synthetic"]


class ResourceRequirements(_Model):
    """Compute resources of a container, as in a Pod's ``resources``."""

    requests: dict[str, Quantity] | None = Field(
        default=None,
        description="Minimum resources the container needs, e.g. {cpu: 500m, memory: 2Gi}.",
    )
    limits: dict[str, Quantity] | None = Field(
        default=None,
        description="Maximum resources the container may use. For workers, nvidia.com/gpu is set "
        "from gpusPerWorker and need not be given here.",
    )


class Toleration(_Model):
    """A Pod toleration, passed through to worker pods."""

    key: str | None = Field(default=None, description="Taint key the toleration applies to; empty matches all keys.")
    operator: Literal["Exists", "Equal"] | None = Field(
        default=None, description="Exists or Equal (the default) between key and value."
    )
    value: str | None = Field(default=None, description="Taint value to match when operator is Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to match; empty matches all effects."
    )
    toleration_seconds: int | None = Field(
        default=None, description="How long a NoExecute taint is tolerated before eviction, in seconds."
    )


class CheckpointSpec(_Model):
    """Where and how often the chief writes checkpoints."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "!has(self.volumeClaimName) || self.uri.startsWith('/')",
                "checkpoint.volumeClaimName needs checkpoint.uri to be an absolute path (the mount point)",
            )
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
        description="Optional ReadWriteMany PersistentVolumeClaim mounted at uri in every pod. Without "
        "it an absolute path is used as the container sees it, which suits only the local cluster.",
    )
    interval_steps: int = Field(
        default=500,
        ge=0,
        description="Write a checkpoint every this many global steps; 0 turns the step interval off.",
    )
    interval_seconds: int = Field(
        default=300,
        ge=0,
        description="Write a checkpoint every this many seconds; 0 turns the time interval off. "
        "Whichever interval comes first triggers a checkpoint.",
    )

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


class WorkerSpec(_Model):
    """The workers: bare pods, one per active slot, on GPU nodes bought as `provisioning` says."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            ("self.minReplicas <= self.replicas", "workers.minReplicas must not exceed workers.replicas"),
            (
                "!has(self.maxReplicas) || self.replicas <= self.maxReplicas",
                "workers.replicas must not exceed workers.maxReplicas",
            ),
        )
    )

    replicas: int = Field(
        default=4,
        ge=1,
        le=256,
        description="Desired number of workers. `kubectl scale ttj/NAME --replicas=N` changes it "
        "within [minReplicas, maxReplicas].",
    )
    min_replicas: int = Field(
        default=1,
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
    node_selector: dict[str, str] | None = Field(
        default=None, description="Extra node labels a worker's node must carry."
    )
    tolerations: list[Toleration] | None = Field(
        default=None,
        description="Extra tolerations for worker pods (the nvidia.com/gpu toleration is always added).",
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
        description="Mark the job Stalled (condition and Warning event, with the chief's last error) and elect "
        "another chief when the global step has not advanced for this many seconds while a chief runs; 0 "
        "turns stall detection off. A stall is not counted as a preemption or a failure.",
    )


class BudgetSpec(_Model):
    """A cost ceiling for the job."""

    max_cost_usd: float | None = Field(
        default=None,
        gt=0,
        alias="maxCostUSD",
        description="Stop adding workers when the projected cost would pass this many US dollars; when "
        "the cost reaches it, checkpoint and stop the job with the BudgetExceeded condition.",
    )


class TransientTrainingJobSpec(_Model):
    """What to train, on which workers, and how to survive preemptions."""

    image: str = Field(
        default=DEFAULT_TRAINER_IMAGE,
        min_length=1,
        description="Trainer image run by every pod of the job.",
    )
    model: ModelName = Field(default="resnet32", description="Model to train: resnet32 (the paper's) or small-cnn.")
    dataset: DatasetName = Field(
        default="cifar10",
        description="Dataset: cifar10 (from data.uri, or downloaded when data is not given) or synthetic "
        "(CIFAR-shaped, needs no download).",
    )
    train_steps: int = Field(
        ge=1,
        description="Global steps to reach; the job succeeds when the chief reports this step.",
    )
    batch_size: int = Field(default=128, ge=1, le=65536, description="Per-worker batch size.")
    learning_rate: float = Field(default=0.1, gt=0, le=100, description="Base learning rate.")
    learning_rate_scaling: LearningRateScaling = Field(
        default=LearningRateScaling.ACTIVE_WORKERS,
        description="none keeps the rate fixed; activeWorkers scales it by min(1, active/desired "
        "workers), the paper's adaptive learning rate.",
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
    backoff_limit: int = Field(
        default=3,
        ge=0,
        description="Failures of the training code tolerated before the job fails; preemptions never count.",
    )
    active_deadline_seconds: int | None = Field(
        default=None,
        ge=1,
        description="Fail the job when it has run this many seconds since it started, as in a Kubernetes Job.",
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None,
        ge=0,
        description="Delete the job this many seconds after it succeeded or failed.",
    )
    clean_pod_policy: CleanPodPolicy = Field(
        default=CleanPodPolicy.RUNNING,
        description="Pods deleted when the job finishes: All, Running (those still running, e.g. the "
        "parameter servers), or None.",
    )


class Condition(_Model):
    """A Kubernetes-style condition."""

    type: str = Field(description="Condition type, e.g. Running, ChiefElected, Succeeded.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str | None = Field(default=None, description="One-word CamelCase reason for the last transition.")
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


class WorkerCounts(_Model):
    """How many workers the job wants and has."""

    desired: int = Field(default=0, ge=0, description="Workers wanted (spec.workers.replicas).")
    active: int = Field(default=0, ge=0, description="Workers running.")
    pending: int = Field(default=0, ge=0, description="Workers created but not yet running.")
    summary: str | None = Field(default=None, description="active/desired, as shown by kubectl get.")
    selector: str | None = Field(
        default=None, description="Label selector of the job's worker pods, for the scale subresource."
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


class PodCost(_Model):
    """One pod's accrued cost, kept while the pod exists; folded into settledUSD once it is gone."""

    name: str = Field(description="Pod name.")
    uid: str = Field(description="Pod UID (a replacement pod of the same name is another entry).")
    role: Literal["ps", "worker"] = Field(description="ps or worker.")
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
    price_table: str | None = Field(default=None, description="Name of the price table used.")
    notes: list[Annotated[str, Field(description="One reason, in words.")]] | None = Field(
        default=None, description="Why a figure is an estimate (e.g. a machine type missing from the price table)."
    )
    accrued_at: str | None = Field(
        default=None,
        description="When the cost was last computed (RFC 3339).",
        json_schema_extra={"format": "date-time"},
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
    preemptions: int = Field(default=0, ge=0, description="Workers and parameter servers lost to preemption.")
    replacements: int = Field(default=0, ge=0, description="Worker pods created to replace lost ones.")
    chief_elections: int = Field(default=0, ge=0, description="Chiefs elected over the job's life.")
    failures: int = Field(default=0, ge=0, description="Failures of the training code (counted against backoffLimit).")
    progress: ProgressStatus | None = Field(default=None, description="Progress reported by the chief.")
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
    parameter_server_pods: (
        list[Annotated[str, Field(description="Parameter server pod of this index (empty: none seen yet).")]] | None
    ) = Field(
        default=None,
        description="Name of the parameter server pod holding the model state, by PS index; a different pod "
        "means the PS was replaced and the model state must be restored from the latest checkpoint.",
    )


class TransientTrainingJob(_Model):
    """Distributed TensorFlow training on spot or preemptible GPUs that survives preemptions."""

    model_config = ConfigDict(extra="ignore")

    api_version: Literal["transient.training/v1alpha1"] = "transient.training/v1alpha1"
    kind: Literal["TransientTrainingJob"] = "TransientTrainingJob"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: TransientTrainingJobSpec
    status: TransientTrainingJobStatus | None = None
