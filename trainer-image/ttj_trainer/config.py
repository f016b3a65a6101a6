"""The trainer's settings, read from the environment the operator gives every pod (see README.md)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from ttj_contract import (
    BUILTIN_ENTRYPOINT,
    BUILTIN_MODELS,
    DEFAULT_BUILTIN_DATASET,
    DEFAULT_BUILTIN_MODEL,
    DEFAULT_PREEMPTION_GRACE_SECONDS,
    METRICS_PORT,
    SIGTERM_EXIT_MARGIN_SECONDS,
    Env,
    LearningRateScaling,
    Role,
    TFConfig,
    TFConfigError,
    address_port,
    lease_name,
)


class Knob(StrEnum):
    """The trainer's own tuning variables: the operator never sets these (its names are :class:`Env`)."""

    #: Where the CIFAR-10 archive is downloaded from, and its MD5 (a mirror; tests serve their own archive).
    CIFAR10_URL = "TTJ_CIFAR10_URL"
    CIFAR10_MD5 = "TTJ_CIFAR10_MD5"
    MOMENTUM = "TTJ_MOMENTUM"
    CHECKPOINTS_TO_KEEP = "TTJ_CHECKPOINTS_TO_KEEP"
    INTRA_OP_THREADS = "TTJ_INTRA_OP_THREADS"
    INTER_OP_THREADS = "TTJ_INTER_OP_THREADS"
    METRICS_PORT = "TTJ_METRICS_PORT"
    LEASE_POLL_SECONDS = "TTJ_LEASE_POLL_SECONDS"
    SEED = "TTJ_SEED"
    TERMINATION_LOG = "TTJ_TERMINATION_LOG"
    #: 1: a step's exchange with the PS runs while the next step computes; 0: one after the other (exact).
    OVERLAP_EXCHANGE = "TTJ_OVERLAP_EXCHANGE"
    #: 1: a step's exchange goes over the PS's wire (``ttj_trainer.wire``) where it can; 0: always through
    #: TensorFlow's cross-process call.
    WIRE = "TTJ_WIRE"


class ConfigError(Exception):
    """A setting is missing or malformed: the trainer exits 2 with this message."""


@dataclass(frozen=True)
class TrainerConfig:
    role: Role
    task_index: int
    ps_addresses: list[str]
    worker_addresses: list[str]  # every slot, in slot order (may be empty strings for empty slots)
    pod_name: str
    pod_namespace: str
    pod_ip: str
    job_name: str
    model: str
    dataset: str
    #: spec.data.uri; empty when the job gives none (then a dataset to download goes into data_cache).
    data_uri: str
    data_cache: str
    cifar10_url: str
    cifar10_md5: str
    train_steps: int
    batch_size: int
    #: spec.batchSize; differs from batch_size on the workers of a group with its own batchSize.
    job_batch_size: int
    learning_rate: float
    learning_rate_scaling: str
    momentum: float
    checkpoint_uri: str
    checkpoint_interval_steps: int
    checkpoint_interval_seconds: float
    checkpoints_to_keep: int
    desired_workers: int
    intra_op_threads: int
    inter_op_threads: int
    metrics_port: int
    lease_poll_seconds: float
    termination_grace_seconds: float
    seed: int
    #: spec.program.entrypoint; empty for a job naming a built-in model (then the built-in program runs).
    program: str = ""
    program_args: dict[str, str] | None = None
    overlap_exchange: bool = True
    wire: bool = True

    @property
    def own_port(self) -> int:
        """The port of this task's own entry in TF_CONFIG (TF_PORT when the entry names none)."""
        addresses = self.ps_addresses if self.role == Role.PS else self.worker_addresses
        return address_port(addresses[self.task_index])

    @property
    def own_address(self) -> str:
        """Where the PS reaches this task: POD_IP (never the DNS name, which may not resolve yet) and its port."""
        return f"{self.pod_ip}:{self.own_port}"

    @property
    def lease_name(self) -> str:
        return lease_name(self.job_name)


def _get(env: Mapping[str, str], name: str, default: str | None = None) -> str:
    value = env.get(name, "").strip()
    if value:
        return value
    if default is None:
        raise ConfigError(f"environment variable {name} is required but not set")
    return default


def _int(env: Mapping[str, str], name: str, default: int | None = None, minimum: int = 0) -> int:
    raw = _get(env, name, None if default is None else str(default))
    try:
        value = int(raw)
    except ValueError as err:
        raise ConfigError(f"{name}={raw!r} is not an integer") from err
    if value < minimum:
        raise ConfigError(f"{name}={value} must be at least {minimum}")
    return value


def _float(env: Mapping[str, str], name: str, default: float | None = None, minimum: float = 0.0) -> float:
    raw = _get(env, name, None if default is None else str(default))
    try:
        value = float(raw)
    except ValueError as err:
        raise ConfigError(f"{name}={raw!r} is not a number") from err
    if value < minimum:
        raise ConfigError(f"{name}={value} must be at least {minimum}")
    return value


def _tf_config(raw: str) -> TFConfig:
    try:
        return TFConfig.parse(raw)
    except TFConfigError as err:
        raise ConfigError(str(err)) from err


def load(env: Mapping[str, str] | None = None) -> TrainerConfig:
    """Reads and validates every setting; raises ConfigError naming the first bad one."""
    from ttj_trainer import data  # the catalogue: names are checked before TensorFlow is imported

    env = os.environ if env is None else env
    tf_config = _tf_config(_get(env, Env.TF_CONFIG))
    workers = list(tf_config.worker)
    is_worker = tf_config.task_type == Role.WORKER
    # The PS needs only TF_CONFIG (and POD_IP); everything else matters to workers alone.
    model, dataset, program, program_args = _workload(env, is_worker)
    scaling = _get(env, Env.LEARNING_RATE_SCALING, LearningRateScaling.ACTIVE_WORKERS)
    if scaling not in tuple(LearningRateScaling):
        known = " or ".join(repr(value.value) for value in LearningRateScaling)
        raise ConfigError(f"{Env.LEARNING_RATE_SCALING}={scaling!r} must be {known}")
    checkpoint_uri, data_uri = _storage_uris(env, is_worker)
    cpu_count = os.cpu_count() or 1
    return TrainerConfig(
        role=tf_config.task_type,
        task_index=tf_config.task_index,
        ps_addresses=list(tf_config.ps),
        worker_addresses=workers,
        pod_name=_get(env, Env.POD_NAME, "" if not is_worker else None),
        pod_namespace=_get(env, Env.POD_NAMESPACE, "default"),
        pod_ip=_get(env, Env.POD_IP, "127.0.0.1" if not is_worker else None),
        job_name=_get(env, Env.JOB_NAME, "" if not is_worker else None),
        model=model,
        dataset=dataset,
        data_uri=data_uri,
        data_cache=_get(env, Env.DATA_CACHE, ""),
        cifar10_url=_get(env, Knob.CIFAR10_URL, data.CIFAR10_URL),
        cifar10_md5=_get(env, Knob.CIFAR10_MD5, data.CIFAR10_MD5),
        train_steps=_int(env, Env.TRAIN_STEPS, 64000, minimum=1),
        batch_size=_int(env, Env.BATCH_SIZE, 128, minimum=1),
        job_batch_size=_int(env, Env.JOB_BATCH_SIZE, _int(env, Env.BATCH_SIZE, 128, minimum=1), minimum=1),
        learning_rate=_float(env, Env.LEARNING_RATE, 0.1),
        learning_rate_scaling=scaling,
        momentum=_float(env, Knob.MOMENTUM, 0.9),
        checkpoint_uri=checkpoint_uri,
        checkpoint_interval_steps=_int(env, Env.CHECKPOINT_INTERVAL_STEPS, 1000),
        checkpoint_interval_seconds=_float(env, Env.CHECKPOINT_INTERVAL_SECONDS, 600.0),
        checkpoints_to_keep=_int(env, Knob.CHECKPOINTS_TO_KEEP, 5, minimum=1),
        desired_workers=_int(env, Env.DESIRED_WORKERS, max(1, sum(1 for w in workers if w)), minimum=1),
        intra_op_threads=_int(env, Knob.INTRA_OP_THREADS, 1 if cpu_count <= 4 else 0),
        inter_op_threads=_int(env, Knob.INTER_OP_THREADS, 2 if cpu_count <= 4 else 0),
        metrics_port=_int(env, Knob.METRICS_PORT, METRICS_PORT),
        lease_poll_seconds=_float(env, Knob.LEASE_POLL_SECONDS, 1.0, minimum=0.05),
        termination_grace_seconds=_float(
            env,
            Env.TERMINATION_GRACE_SECONDS,
            DEFAULT_PREEMPTION_GRACE_SECONDS - SIGTERM_EXIT_MARGIN_SECONDS,
            minimum=1.0,
        ),
        seed=_int(env, Knob.SEED, 0),
        program=program,
        program_args=program_args,
        overlap_exchange=bool(_int(env, Knob.OVERLAP_EXCHANGE, 1)),
        wire=bool(_int(env, Knob.WIRE, 1)),
    )


def _workload(env: Mapping[str, str], is_worker: bool) -> tuple[str, str, str, dict[str, str]]:
    """The model, dataset, program and its arguments; a worker without a program needs a known model and dataset."""
    from ttj_trainer import data  # the catalogue: names are checked before TensorFlow is imported

    model = _get(env, Env.MODEL, DEFAULT_BUILTIN_MODEL)
    dataset = _get(env, Env.DATASET, DEFAULT_BUILTIN_DATASET)
    program = _get(env, Env.PROGRAM, "")
    program_args = _program_args(env.get(Env.PROGRAM_ARGS, ""))
    if is_worker and not program and model not in BUILTIN_MODELS:
        raise ConfigError(f"unknown model {Env.MODEL}={model!r}; known models: {', '.join(BUILTIN_MODELS)}")
    if is_worker and not program and dataset not in data.DATASET_NAMES:
        raise ConfigError(f"unknown dataset {Env.DATASET}={dataset!r}; known datasets: {', '.join(data.DATASET_NAMES)}")
    return model, dataset, program, program_args


def _storage_uris(env: Mapping[str, str], is_worker: bool) -> tuple[str, str]:
    """The checkpoint location (a worker's is required) and the data's, each gs://... or an absolute path."""
    checkpoint_uri = _get(env, Env.CHECKPOINT_URI, "" if not is_worker else None).rstrip("/")
    if is_worker and not (checkpoint_uri.startswith("gs://") or checkpoint_uri.startswith("/")):
        raise ConfigError(f"{Env.CHECKPOINT_URI}={checkpoint_uri!r} must be gs://... or an absolute path")
    data_uri = _get(env, Env.DATA_URI, "")
    if data_uri and not (data_uri.startswith("gs://") or data_uri.startswith("/")):
        raise ConfigError(f"spec.data.uri {data_uri!r} must be gs://... or an absolute path")
    return checkpoint_uri, data_uri


def _program_args(raw: str) -> dict[str, str]:
    if not raw.strip():
        return {}
    try:
        args = json.loads(raw)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{Env.PROGRAM_ARGS} is not valid JSON: {err}") from err
    if not isinstance(args, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in args.items()):
        raise ConfigError(f"{Env.PROGRAM_ARGS} must be a JSON object of strings")
    return args


def program_of(cfg: TrainerConfig) -> tuple[str, dict[str, str]]:
    """The entrypoint and arguments this worker trains: the job's program, else the built-in one."""
    if cfg.program:
        return cfg.program, dict(cfg.program_args or {})
    return BUILTIN_ENTRYPOINT, {
        "model": cfg.model,
        "dataset": cfg.dataset,
        "learning_rate": repr(cfg.learning_rate),
        "momentum": repr(cfg.momentum),
        "seed": str(cfg.seed),
        "data_uri": cfg.data_uri,
        "data_cache": cfg.data_cache,
        "cifar10_url": cfg.cifar10_url,
        "cifar10_md5": cfg.cifar10_md5,
    }
