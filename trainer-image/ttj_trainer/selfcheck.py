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


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m ttj_trainer", description=__doc__.splitlines()[0])
    parser.add_argument("--self-check", action="store_true", required=True, help="check this image and exit")
    parser.add_argument("--require-gpu", action="store_true", help="fail when TensorFlow sees no GPU")
    args = parser.parse_args(argv)
    try:
        report = check(require_gpu=args.require_gpu)
    except SelfCheckError as err:
        print(f"ttj-trainer self-check failed: {err}", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(asdict(report)))
    return 0
