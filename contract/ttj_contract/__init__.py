"""The words ttj's parts share: what docs/contract.md names, written once.

The operator, the trainer and the local cluster each import these instead of spelling a label, an
annotation, a child's name or a time format themselves. Standard library only, so the trainer image
installs it without pulling the operator in.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import IntEnum, StrEnum

# -- the API ------------------------------------------------------------------------------------
GROUP = "transient.training"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "TransientTrainingJob"
PLURAL = "transienttrainingjobs"
SINGULAR = "transienttrainingjob"
SHORT_NAME = "ttj"

# -- labels, annotations and the finalizer on a job's children -----------------------------------
LABEL_JOB = f"{GROUP}/job-name"
LABEL_ROLE = f"{GROUP}/role"
LABEL_SLOT = f"{GROUP}/slot"
LABEL_PS_INDEX = f"{GROUP}/ps-index"
#: On worker pods of a job with ``spec.workers.groups``: the name of the group the pod was made for.
LABEL_WORKER_GROUP = f"{GROUP}/worker-group"
#: "true" on the worker pod that holds the Lease.
LABEL_CHIEF = f"{GROUP}/chief"
#: On the Lease: the number of Running workers, for the learning rate.
ANNOTATION_ACTIVE_WORKERS = f"{GROUP}/active-workers"
#: On the Lease: spec.workers.replicas now (a pod's TTJ_DESIRED_WORKERS is fixed when it is made).
ANNOTATION_DESIRED_WORKERS = f"{GROUP}/desired-workers"
#: On the Lease: the chief's :class:`LeaseProgress`, as JSON.
ANNOTATION_PROGRESS = f"{GROUP}/progress"
#: On the Lease, written by the operator for ``checkpoint.adaptive`` jobs: the seconds between the chief's
#: periodic checkpoints, chosen from its node's preemption hazard and its measured write time. While it is
#: present the chief uses it instead of its own step and time intervals.
ANNOTATION_CHECKPOINT_INTERVAL = f"{GROUP}/checkpoint-interval-seconds"
#: On a pod the operator deletes on purpose (scale-down, cleanup), so it is not taken for a loss.
ANNOTATION_DELETED = f"{GROUP}/deleted-by-operator"
#: On a PS Deployment: a fingerprint of what a spec change may alter in its pod template.
ANNOTATION_PS_TEMPLATE = f"{GROUP}/ps-template"
#: On jobs: the operator releases its children's finalizers before a job may go.
JOB_FINALIZER = f"{GROUP}/operator"
#: On worker pods: a lost worker is counted before it may vanish.
FINALIZER = f"{GROUP}/accounting"
#: On namespaces whose pods may scrape the trainers' metrics port (a job's NetworkPolicy lets them in), "true".
LABEL_METRICS_SCRAPER = f"{GROUP}/metrics-scraper"
#: The label the Deployment controller adds to the pods of one template.
LABEL_POD_TEMPLATE_HASH = "pod-template-hash"


class Role(StrEnum):
    """The value of :data:`LABEL_ROLE` and TF_CONFIG's task type."""

    WORKER = "worker"
    PS = "ps"


# -- names a job's children derive from the job's -------------------------------------------------
#: The trainer container's name and the TensorFlow server port.
CONTAINER_NAME = "trainer"
TF_PORT = 2222
#: The parameter server's port for a step's exchange (``ttj_trainer.wire``), the container port named ``wire``.
WIRE_PORT = 2223
#: The trainer's Prometheus endpoint (TTJ_METRICS_PORT's default), the container port named ``metrics``.
METRICS_PORT = 9090


def service_name(job: str) -> str:
    """The headless Service that gives every pod its stable DNS name."""
    return job


def ps_name(job: str, index: int) -> str:
    """PS Deployment ``index`` and its pod's hostname."""
    return f"{job}-ps-{index}"


def worker_hostname(job: str, slot: int) -> str:
    return f"{job}-worker-{slot}"


def worker_pod_name(job: str, slot: int, incarnation: int) -> str:
    """``incarnation`` counts the pods a slot has had, so a replacement never waits for its predecessor."""
    return f"{job}-worker-{slot}-{incarnation}"


_TRAILING_NUMBER = re.compile(r"-(\d+)$")


def worker_incarnation(pod_name: str) -> int:
    """The incarnation a worker pod's name carries (:func:`worker_pod_name`); 0 for a name without one."""
    match = _TRAILING_NUMBER.search(pod_name)
    return int(match.group(1)) if match else 0


def lease_name(job: str) -> str:
    """The Lease naming the chief."""
    return f"{job}-chief"


def trainer_account_name(job: str) -> str:
    """The trainers' ServiceAccount, Role and RoleBinding."""
    return f"{job}-trainer"


def job_selector(job: str) -> str:
    """Label selector of every pod of a job."""
    return f"{LABEL_JOB}={job}"


def worker_selector(job: str) -> str:
    """Label selector of a job's worker pods (the scale subresource's ``selector``)."""
    return f"{job_selector(job)},{LABEL_ROLE}={Role.WORKER}"


def dns_address(job: str, namespace: str, hostname: str) -> str:
    """``host:port`` of a task, as TF_CONFIG lists it."""
    return f"{hostname}.{service_name(job)}.{namespace}.svc:{TF_PORT}"


class Env(StrEnum):
    """Environment variables the operator sets in trainer containers (besides TF_CONFIG)."""

    JOB_NAME = "TTJ_JOB_NAME"
    MODEL = "TTJ_MODEL"
    DATASET = "TTJ_DATASET"
    TRAIN_STEPS = "TTJ_TRAIN_STEPS"
    BATCH_SIZE = "TTJ_BATCH_SIZE"
    LEARNING_RATE = "TTJ_LEARNING_RATE"
    LEARNING_RATE_SCALING = "TTJ_LEARNING_RATE_SCALING"
    CHECKPOINT_URI = "TTJ_CHECKPOINT_URI"
    CHECKPOINT_INTERVAL_STEPS = "TTJ_CHECKPOINT_INTERVAL_STEPS"
    CHECKPOINT_INTERVAL_SECONDS = "TTJ_CHECKPOINT_INTERVAL_SECONDS"
    DESIRED_WORKERS = "TTJ_DESIRED_WORKERS"
    POD_NAME = "POD_NAME"
    POD_NAMESPACE = "POD_NAMESPACE"
    POD_IP = "POD_IP"
    TF_CONFIG = "TF_CONFIG"
    #: spec.data.uri: where the dataset is (gs://… or an absolute path, a mounted claim's included).
    DATA_URI = "TTJ_DATA_URI"
    #: Where a dataset is downloaded to when spec.data is not given (an emptyDir the operator mounts).
    DATA_CACHE = "TTJ_DATA_CACHE"
    #: spec.program.entrypoint ("module:function"), set only for jobs with spec.program (then no MODEL/DATASET).
    PROGRAM = "TTJ_PROGRAM"
    #: spec.program.args as a JSON object of strings.
    PROGRAM_ARGS = "TTJ_PROGRAM_ARGS"
    #: spec.batchSize, on the workers of a group that sets its own batchSize (whose BATCH_SIZE is the group's):
    #: under ``updateShare`` the trainer scales the learning rate by BATCH_SIZE / JOB_BATCH_SIZE.
    JOB_BATCH_SIZE = "TTJ_JOB_BATCH_SIZE"
    #: Seconds after SIGTERM by which the trainer has exited, its checkpoint written or not; set from
    #: workers.preemptionGraceSeconds, less :data:`SIGTERM_EXIT_MARGIN_SECONDS` (only when the spec sets it).
    TERMINATION_GRACE_SECONDS = "TTJ_TERMINATION_GRACE_SECONDS"


class LocalSimulation(StrEnum):
    """Environment the ttj local cluster's kubelet adds to every container it runs, and only it: GKE never sets
    these. A container on a pool with ``speed: 2.0`` and ``step-seconds: 0.2`` spends 0.1 s of simulated GPU time
    per training step (the trainer sleeps it), so a worker on a faster pool steps faster."""

    #: the pool's GPU speed relative to a T4 (1.0)
    SPEED = "TTJ_LOCAL_SIMULATED_SPEED"
    #: simulated GPU seconds per training step at speed 1.0 (0: none)
    STEP_SECONDS = "TTJ_LOCAL_SIMULATED_STEP_SECONDS"


#: Mount path of the dataset cache volume (an emptyDir) in worker pods without spec.data.
DATA_CACHE_PATH = "/var/cache/ttj-data"
#: Name of that volume, and of the volume of a spec.data.volumeClaimName.
DATA_CACHE_VOLUME = "dataset-cache"
DATA_VOLUME = "dataset"


class TrainerExit(IntEnum):
    """Exit codes of the trainer that mean retrying the same pod cannot help: the operator ends the job
    with the pod's termination message instead of charging them to backoffLimit."""

    CONFIG = 2
    DATA_UNAVAILABLE = 3
    CHECKPOINT_INDEX_CORRUPT = 5
    CHECKPOINT_LOCATION_TAKEN = 6
    #: spec.program cannot be trained (does not import, raises, returns the wrong thing, does not fit its data).
    PROGRAM_INVALID = 7
    #: The loss became NaN or infinite: the trainer stopped without checkpointing it.
    LOSS_NOT_FINITE = 8


#: The networks a job names in spec.model (the trainer ships them as programs, ttj_trainer.builtin).
BUILTIN_MODELS = ("resnet32", "small-cnn")
#: The datasets a job names in spec.dataset, for the built-in networks.
BUILTIN_DATASETS = ("cifar10", "synthetic")
#: What a job without spec.program trains when spec.model / spec.dataset is unset.
DEFAULT_BUILTIN_MODEL = "resnet32"
DEFAULT_BUILTIN_DATASET = "cifar10"
#: The program that trains the built-in networks (spec.model, spec.dataset): the trainer runs it with the
#: job's settings as arguments, through the same path as a user's spec.program.
BUILTIN_ENTRYPOINT = "ttj_trainer.builtin:program"


class LearningRateScaling(StrEnum):
    """How the learning rate follows the worker count (and, with ``updateShare``, each worker's speed)."""

    NONE = "none"
    ACTIVE_WORKERS = "activeWorkers"
    #: activeWorkers × the worker's share of the updates (its speed over the update-weighted mean speed of the
    #: active workers, clamped) × its group's batch size over the job's.
    UPDATE_SHARE = "updateShare"


#: What GKE gives a spot or preemptible node's pods between SIGTERM and SIGKILL: 15 of the 30 s after the
#: preemption notice, unless the node pool's (or compute class's) graceful termination is lengthened, to at most
#: 120 s, the last 15 for system pods.
DEFAULT_PREEMPTION_GRACE_SECONDS = 15
MAX_PREEMPTION_GRACE_SECONDS = 105
#: The trainer exits this long before its grace ends, so that the exit, not SIGKILL, ends a late checkpoint.
SIGTERM_EXIT_MARGIN_SECONDS = 3

#: How long a newly elected chief may take before its first renewal (TensorFlow start-up, connecting, tracing
#: the first step): the operator does not replace it sooner (``--chief-startup``), and the trainer renews
#: before its first step only within this allowance.
CHIEF_STARTUP_SECONDS = 180


# -- TF_CONFIG --------------------------------------------------------------------------------------
class TFConfigError(ValueError):
    """TF_CONFIG is not the one the operator writes; the message says which part."""


def address_port(address: str) -> int:
    """The port of a TF_CONFIG ``host:port`` entry (:data:`TF_PORT` when it names none)."""
    host, sep, port = address.rpartition(":")
    if not sep or not host:
        return TF_PORT
    try:
        return int(port)
    except ValueError as err:
        raise TFConfigError(f"TF_CONFIG address {address!r} has a non-numeric port") from err


@dataclass(frozen=True)
class TFConfig:
    """``TF_CONFIG`` in the TFJob convention (TensorFlow's own cluster resolver reads it too): the cluster's
    ``ps`` and ``worker`` addresses and this pod's task. ``worker`` lists every slot in slot order (an empty
    string for a slot with no address); there is no ``chief`` task: the Lease names the chief."""

    ps: tuple[str, ...]
    worker: tuple[str, ...]
    task_type: Role
    task_index: int

    @property
    def task_addresses(self) -> tuple[str, ...]:
        """The addresses of this task's type (its own is at ``task_index``)."""
        return self.ps if self.task_type == Role.PS else self.worker

    @property
    def own_port(self) -> int:
        return address_port(self.task_addresses[self.task_index])

    def to_json(self) -> str:
        cluster = {Role.PS.value: list(self.ps), Role.WORKER.value: list(self.worker)}
        task = {"type": self.task_type.value, "index": self.task_index}
        return json.dumps({"cluster": cluster, "task": task}, separators=(",", ":"))

    @classmethod
    def parse(cls, raw: str) -> TFConfig:
        """The TF_CONFIG in ``raw``; :class:`TFConfigError` naming the first part that is wrong."""
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as err:
            raise TFConfigError(f"TF_CONFIG is not valid JSON: {err}") from err
        if not isinstance(data, dict):
            raise TFConfigError("TF_CONFIG must be a JSON object with 'cluster' and 'task'")
        cluster = data.get("cluster") or {}
        task = data.get("task") or {}
        if not isinstance(cluster, dict) or not isinstance(task, dict):
            raise TFConfigError("TF_CONFIG 'cluster' and 'task' must be JSON objects")
        ps = cluster.get(Role.PS.value) or []
        workers = cluster.get(Role.WORKER.value) or []
        if not isinstance(ps, list) or not ps or not all(isinstance(a, str) and a for a in ps):
            raise TFConfigError("TF_CONFIG cluster.ps must be a non-empty list of 'host:port' strings")
        if not isinstance(workers, list) or not all(isinstance(a, str) for a in workers):
            raise TFConfigError("TF_CONFIG cluster.worker must be a list of 'host:port' strings, one per slot")
        role = task.get("type")
        index = task.get("index")
        if role not in tuple(Role):
            raise TFConfigError(
                f"TF_CONFIG task.type must be 'ps' or 'worker', not {role!r} (this trainer has no 'chief' task)"
            )
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise TFConfigError(f"TF_CONFIG task.index must be a non-negative integer, not {index!r}")
        parsed = cls(tuple(ps), tuple(workers), Role(role), index)
        if index >= len(parsed.task_addresses):
            raise TFConfigError(
                f"TF_CONFIG task.index {index} is outside cluster.{role} ({len(parsed.task_addresses)} entries)"
            )
        for address in (*ps, *(a for a in workers if a)):
            address_port(address)
        return parsed


# -- times ----------------------------------------------------------------------------------------
def parse_time(value: str | None) -> datetime | None:
    """RFC 3339 as the API writes it (``Z`` or an offset, with or without a fraction) → aware datetime."""
    if not value:
        return None
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def format_time(moment: datetime) -> str:
    """``metav1.Time``: whole seconds, UTC, ``Z`` (creationTimestamp, conditions, the job's status)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(moment: datetime) -> str:
    """``metav1.MicroTime``: six fractional digits, UTC, ``Z`` (Lease acquireTime/renewTime, eventTime).

    The API server parses it with Go's layout ``2006-01-02T15:04:05.000000Z07:00``: exactly six fractional
    digits are required, so ``datetime.isoformat()`` (no fraction when the microseconds are 0) is refused.
    """
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def format_epoch_time(seconds: float) -> str:
    """``metav1.Time`` of a Unix timestamp."""
    return format_time(datetime.fromtimestamp(seconds, UTC))


# -- money --------------------------------------------------------------------------------------
def format_usd(amount: float) -> str:
    """US dollars as people read them (``$0.0023``, ``$12.40``, ``$1,234.50``): the COST column,
    ``kubectl describe`` and the demo print this one form.

    Below a dollar four decimals, so that a short job's cost is not ``$0.00``; from a dollar, cents.
    """
    if not math.isfinite(amount):
        return "-"
    return f"${amount:,.4f}" if abs(amount) < 1 else f"${amount:,.2f}"


# -- GKE ------------------------------------------------------------------------------------------
SPOT_LABEL = "cloud.google.com/gke-spot"
PREEMPTIBLE_LABEL = "cloud.google.com/gke-preemptible"
ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
ACCELERATOR_COUNT_LABEL = "cloud.google.com/gke-accelerator-count"
NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
LEGACY_INSTANCE_TYPE_LABEL = "beta.kubernetes.io/instance-type"
#: The extended resource of GPUs, and the key of the taint GKE puts on GPU nodes.
GPU_RESOURCE = "nvidia.com/gpu"
#: A pod's nodeSelector key that picks a GKE custom compute class; GKE labels the class's nodes with it, and
#: taints them with it (value: the class's name, effect NoSchedule).
COMPUTE_CLASS_LABEL = "cloud.google.com/compute-class"
#: The taint the cluster autoscaler puts on a node it is about to drain and delete (value: the Unix time).
AUTOSCALER_DELETION_TAINT = "ToBeDeletedByClusterAutoscaler"
#: The DisruptionTarget reason of a pod the API server's Eviction subresource is deleting.
EVICTION_REASON = "EvictionByEvictionAPI"


class Provisioning(StrEnum):
    """How a node is bought."""

    SPOT = "spot"
    PREEMPTIBLE = "preemptible"
    ON_DEMAND = "on-demand"


#: The node label that marks each transient provisioning.
PROVISIONING_LABELS: dict[Provisioning, str] = {
    Provisioning.PREEMPTIBLE: PREEMPTIBLE_LABEL,
    Provisioning.SPOT: SPOT_LABEL,
}


def provisioning_of(labels: Mapping[str, str] | None) -> Provisioning:
    """How a node was bought, from its labels; neither label means on-demand.

    GKE never sets both; were both there, preemptible wins, as the stricter (24-hour) lifetime.
    """
    labels = labels or {}
    for provisioning, label in PROVISIONING_LABELS.items():
        if labels.get(label) == "true":
            return provisioning
    return Provisioning.ON_DEMAND


def provisioning_labels(provisioning: str) -> dict[str, str]:
    """The labels GKE puts on a node bought this way."""
    label = PROVISIONING_LABELS.get(Provisioning(provisioning))
    return {label: "true"} if label else {}


# -- the chief's progress report on the Lease -------------------------------------------------------
@dataclass(frozen=True)
class LeaseProgress:
    """What the chief publishes in :data:`ANNOTATION_PROGRESS` and the operator copies to status.progress."""

    global_step: int
    checkpoint_step: int | None = None
    checkpoint_path: str | None = None
    #: metav1.Time of the checkpoint.
    checkpoint_time: str | None = None
    #: Seconds the chief took to write its latest checkpoint (the cost the adaptive interval weighs).
    checkpoint_write_seconds: float | None = None
    #: The chief epoch of the reporter: a report counts for the chief of this epoch only.
    epoch: int | None = None
    #: The chief's latest error while training is held up (storage, parameter servers), for the operator.
    last_error: str | None = None
    #: The latest evaluation of a program with an evaluation set: the global step it evaluated...
    evaluation_step: int | None = None
    #: ...and its metrics by Keras metric name (the loss as ``loss``).
    evaluation: Mapping[str, float] | None = None
    #: Where the chief exported the final model (the directory holding ``model.keras`` and ``saved_model/``).
    export_path: str | None = None
    #: Bytes of the model's variables on each parameter server, by PS index: what one worker step reads from
    #: that server and sends back as gradients (embedding tables looked up by row are not in it).
    parameter_bytes: tuple[int, ...] | None = None
    #: Training steps per second of each worker slot with a fresh heartbeat, by slot index, as measured on PS 0.
    slot_steps_per_second: Mapping[int, float] | None = None
    #: The chief's training loss, averaged over its steps since its previous report (finite only).
    loss: float | None = None

    def to_annotation(self) -> str:
        fields = {
            "globalStep": self.global_step,
            "checkpointStep": self.checkpoint_step,
            "checkpointPath": self.checkpoint_path,
            "checkpointTime": self.checkpoint_time,
            "checkpointWriteSeconds": self.checkpoint_write_seconds,
            "epoch": self.epoch,
            "lastError": self.last_error,
            "evaluationStep": self.evaluation_step,
            "evaluation": None if self.evaluation is None else dict(self.evaluation),
            "exportPath": self.export_path,
            "parameterBytes": None if self.parameter_bytes is None else list(self.parameter_bytes),
            "slotStepsPerSecond": None
            if self.slot_steps_per_second is None
            else {str(slot): rate for slot, rate in sorted(self.slot_steps_per_second.items())},
            "loss": self.loss,
        }
        return json.dumps({k: v for k, v in fields.items() if v is not None}, separators=(",", ":"))

    @classmethod
    def from_annotation(cls, text: str | None) -> LeaseProgress | None:
        """The report in ``text``; None when there is none or it is malformed (a bad report is not fatal)."""
        if not text:
            return None
        try:
            data = json.loads(text)
            step = data.get("checkpointStep")
            path = data.get("checkpointPath")
            when = data.get("checkpointTime")
            write = data.get("checkpointWriteSeconds")
            epoch = data.get("epoch")
            error = data.get("lastError")
            evaluation_step = data.get("evaluationStep")
            evaluation = data.get("evaluation")
            export = data.get("exportPath")
            return cls(
                global_step=max(0, int(data.get("globalStep", 0))),
                checkpoint_step=None if step is None else int(step),
                checkpoint_path=None if path is None else str(path),
                checkpoint_time=None if when is None else str(when),
                checkpoint_write_seconds=None if write is None else max(0.0, float(write)),
                epoch=None if epoch is None else int(epoch),
                last_error=None if error is None else str(error),
                evaluation_step=None if evaluation_step is None else int(evaluation_step),
                evaluation=None if evaluation is None else {str(k): float(v) for k, v in evaluation.items()},
                export_path=None if export is None else str(export),
                parameter_bytes=_parameter_bytes(data.get("parameterBytes")),
                slot_steps_per_second=_slot_rates(data.get("slotStepsPerSecond")),
                loss=_finite(data.get("loss")),
            )
        except (ValueError, TypeError, AttributeError):
            return None


def _finite(raw: object) -> float | None:
    """A finite number, else None (a loss that is not one is left out; the rest of the report stands)."""
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        return None
    return float(raw)


def _parameter_bytes(raw: object) -> tuple[int, ...] | None:
    """A report's parameterBytes; None when absent or malformed (it prices traffic, the rest of the report stands)."""
    if not isinstance(raw, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in raw):
        return None
    return tuple(raw)


def _slot_rates(value: object) -> dict[int, float] | None:
    """``slotStepsPerSecond`` as {slot: steps/s}; None when absent or malformed (the rest of the report stands)."""
    if not isinstance(value, dict):
        return None
    try:
        rates = {int(slot): float(rate) for slot, rate in value.items()}
    except (ValueError, TypeError):
        return None
    if any(slot < 0 or not math.isfinite(rate) or rate < 0 for slot, rate in rates.items()):
        return None
    return rates
