"""``python -m ttj_trainer --self-check``: can this image train? Checked without a cluster or a job.

It reads a sample TF_CONFIG (and the settings the operator would set) through the trainer's own
configuration loader, imports TensorFlow, runs one operation and lists the devices TensorFlow sees. The
report is one JSON object on stdout; any failure is one line on stderr and exit status 1. Useful after an
image build and on a new node pool (``--require-gpu`` fails when TensorFlow sees no GPU there).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from ttj_contract import Env, Role, dns_address, ps_name, worker_hostname, worker_pod_name
from ttj_trainer import __version__
from ttj_trainer.config import ConfigError, load

EXIT_FAILED = 1
SAMPLE_JOB = "self-check"
SAMPLE_NAMESPACE = "default"
SAMPLE_WORKERS = 2


class SelfCheckError(Exception):
    """A check failed: the message says which and why."""


@dataclass(frozen=True)
class Report:
    trainer: str
    tensorflow: str
    python: str
    devices: list[str]
    gpus: int
    role: str
    task_index: int
    ps: list[str]
    workers: list[str]


def sample_env() -> dict[str, str]:
    """What the operator gives worker 0 of a job with one PS and two workers, named as the contract names them."""
    hostnames = {
        Role.PS: [ps_name(SAMPLE_JOB, 0)],
        Role.WORKER: [worker_hostname(SAMPLE_JOB, slot) for slot in range(SAMPLE_WORKERS)],
    }
    cluster = {
        role: [dns_address(SAMPLE_JOB, SAMPLE_NAMESPACE, host) for host in hosts] for role, hosts in hostnames.items()
    }
    tf_config = {"cluster": cluster, "task": {"type": Role.WORKER, "index": 0}}
    return {
        Env.TF_CONFIG: json.dumps(tf_config),
        Env.POD_NAME: worker_pod_name(SAMPLE_JOB, 0, 0),
        Env.POD_NAMESPACE: SAMPLE_NAMESPACE,
        Env.POD_IP: "127.0.0.1",
        Env.JOB_NAME: SAMPLE_JOB,
        Env.CHECKPOINT_URI: f"/tmp/{SAMPLE_JOB}",
    }


def check(env: Mapping[str, str] | None = None, require_gpu: bool = False) -> Report:
    """Runs every check; raises :class:`SelfCheckError` at the first that fails."""
    try:
        cfg = load(sample_env() if env is None else env)
    except ConfigError as err:
        raise SelfCheckError(f"the sample TF_CONFIG does not load: {err}") from err
    try:
        import tensorflow as tf
    except ImportError as err:
        raise SelfCheckError(f"TensorFlow cannot be imported: {err}") from err
    total = float(tf.reduce_sum(tf.constant([1.0, 2.0])).numpy())
    if total != 3.0:
        raise SelfCheckError(f"TensorFlow computed 1 + 2 = {total}")
    devices = tf.config.list_physical_devices()
    gpus = sum(1 for device in devices if device.device_type == "GPU")
    if require_gpu and not gpus:
        raise SelfCheckError(f"TensorFlow sees no GPU (devices: {', '.join(d.name for d in devices) or 'none'})")
    return Report(
        trainer=__version__,
        tensorflow=tf.__version__,
        python=platform.python_version(),
        devices=[device.name for device in devices],
        gpus=gpus,
        role=cfg.role,
        task_index=cfg.task_index,
        ps=cfg.ps_addresses,
        workers=cfg.worker_addresses,
    )


@dataclass(frozen=True)
class ProgramReport:
    entrypoint: str
    parameters: int
    variables: int
    first_loss: float
    #: Bytes of model and optimizer state on each parameter server (placement: balanced, never split).
    bytes_per_ps: list[int]
    #: The largest server's bytes over the mean (1.0: perfectly even); above 1 mostly because of one table.
    imbalance: float
    #: The Keras path of the largest variable on each server ("" for a server holding nothing).
    largest_per_ps: list[str]
    #: Bytes a worker step pulls from each server and pushes back (the model's variables, less tables
    #: looked up by row): what crosses zones per step when a worker runs in another zone (docs/cost.md).
    step_bytes_per_ps: list[int]


def check_program(entrypoint: str, args: Mapping[str, str], ps_count: int, batch_size: int) -> ProgramReport:
    """Imports the program, builds it, runs one step on one batch (on this process's CPU, no cluster) and
    says how its state would spread over ``ps_count`` parameter servers. ProgramError when it cannot."""
    import keras
    import numpy as np

    from ttj_trainer import program
    from ttj_trainer.parameters import plan, row_lookup_layers, step_bytes_per_ps

    keras.utils.set_random_seed(0)
    prepared = program.prepare(entrypoint, program.load(entrypoint, args), program.InputContext(0, 1, batch_size, 0))
    per_ps = [0] * ps_count
    largest: list[tuple[int, str]] = [(0, "")] * ps_count
    paths = {item.name: str(getattr(item.variable, "path", item.name)) for item in prepared.shared}
    slots = plan(prepared.shared, ps_count, 1)
    tables = {id(layer.embeddings) for layer in row_lookup_layers(prepared.program.model)}
    for slot in slots:
        size = int(np.prod(slot.shape)) * slot.dtype.size
        per_ps[slot.ps_index] += size
        largest[slot.ps_index] = max(largest[slot.ps_index], (size, paths.get(slot.name, slot.name)))
    model = prepared.program.model
    return ProgramReport(
        entrypoint=entrypoint,
        parameters=int(sum(np.prod(v.shape) for v in model.trainable_variables)),
        variables=len(prepared.shared),
        first_loss=prepared.first_loss,
        bytes_per_ps=per_ps,
        imbalance=round(max(per_ps) / (sum(per_ps) / ps_count), 3) if sum(per_ps) else 1.0,
        largest_per_ps=[path for _, path in largest],
        step_bytes_per_ps=step_bytes_per_ps(
            slots, ps_count, {item.name for item in prepared.shared if id(item.variable) in tables}
        ),
    )


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m ttj_trainer", description=__doc__.splitlines()[0])
    parser.add_argument("--self-check", action="store_true", required=True, help="check this image and exit")
    parser.add_argument("--require-gpu", action="store_true", help="fail when TensorFlow sees no GPU")
    parser.add_argument("--program", metavar="MODULE:FUNCTION", help="check this training program instead")
    parser.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE", help="an argument of the program")
    parser.add_argument("--ps", type=int, default=1, help="parameter servers to spread the program over (bytes)")
    parser.add_argument("--batch-size", type=int, default=32, help="the per-worker batch of the one step")
    args = parser.parse_args(argv)
    if args.program:
        from ttj_trainer.program import ProgramError

        pairs = [item.partition("=") for item in args.arg]
        try:
            report = check_program(args.program, {k: v for k, _, v in pairs}, max(1, args.ps), args.batch_size)
        except ProgramError as err:
            print(f"ttj-trainer self-check failed: {err}", file=sys.stderr)
            return EXIT_FAILED
        print(json.dumps(asdict(report)))
        return 0
    try:
        report = check(require_gpu=args.require_gpu)
    except SelfCheckError as err:
        print(f"ttj-trainer self-check failed: {err}", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(asdict(report)))
    return 0
