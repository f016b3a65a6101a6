"""``python -m ttj_trainer``: the role comes from TF_CONFIG (task.type ps or worker)."""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys

from ttj_contract import Env, Role, TrainerExit
from ttj_trainer.config import Knob, TrainerConfig

# Before TensorFlow is imported: its C++ logs are not structured, keep them to errors.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# A crash in TensorFlow's native code then leaves every thread's Python stack in the pod's log.
faulthandler.enable()

EXIT_CONFIG = TrainerExit.CONFIG
EXIT_DATASET = TrainerExit.DATA_UNAVAILABLE
#: Kubernetes shows this file's text as the container's termination message (and so does the operator).
TERMINATION_LOG = os.environ.get(Knob.TERMINATION_LOG, "/dev/termination-log")


def fatal(message: str) -> None:
    """Say why the trainer gives up: on stderr, and in the termination message Kubernetes reports."""
    print(f"ttj-trainer: {message}", file=sys.stderr)
    try:
        with open(TERMINATION_LOG, "w", encoding="utf-8") as out:
            out.write(message[:4000])
    except OSError:
        pass  # not in a container (or a read-only path): stderr has it


def main() -> int:
    if "--self-check" in sys.argv[1:]:  # check the image instead of training (ttj_trainer.selfcheck)
        from ttj_trainer import selfcheck

        return selfcheck.main(sys.argv[1:])
    # Until a role installs its own handler, SIGTERM finds nothing to save: exit as a stopped trainer does.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))
    from ttj_trainer import logs
    from ttj_trainer.config import ConfigError, load

    logs.setup(pod=os.environ.get(Env.POD_NAME, ""), job=os.environ.get(Env.JOB_NAME, ""))
    log = logging.getLogger("ttj_trainer")
    try:
        cfg = load()
    except ConfigError as err:
        return _give_up(log, f"configuration error: {err}", EXIT_CONFIG)
    logs.setup(pod=cfg.pod_name, job=cfg.job_name, role=cfg.role, task=cfg.task_index)

    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(cfg.intra_op_threads)
    tf.config.threading.set_inter_op_parallelism_threads(cfg.inter_op_threads)
    logs.event(log, "starting", role=cfg.role, task=cfg.task_index, address=cfg.own_address, tensorflow=tf.__version__)
    if cfg.role == Role.PS:
        from ttj_trainer import ps

        return ps.run(cfg)
    return _run_worker(cfg, log)


def _run_worker(cfg: TrainerConfig, log: logging.Logger) -> int:
    """A worker's run; what stops it for good exits with its own code and says why."""
    from kubernetes.config import ConfigException

    from ttj_trainer import worker
    from ttj_trainer.checkpoints import CorruptIndexError, LocationTakenError
    from ttj_trainer.data import DatasetError
    from ttj_trainer.program import ProgramError
    from ttj_trainer.training import LossNotFiniteError

    try:
        return worker.run(cfg)
    except ProgramError as err:
        return _give_up(log, f"program error: {err}", TrainerExit.PROGRAM_INVALID)
    except LossNotFiniteError as err:
        return _give_up(log, f"loss not finite: {err}", TrainerExit.LOSS_NOT_FINITE)
    except ConfigException as err:
        return _give_up(
            log,
            f"no Kubernetes API configuration (set KUBECONFIG, or run in a pod): {err}",
            EXIT_CONFIG,
            logged=f"cannot reach the Kubernetes API: {err}",
        )
    except DatasetError as err:
        return _give_up(log, f"dataset error: {err}", EXIT_DATASET)
    except CorruptIndexError as err:
        return _give_up(log, f"checkpoint error: {err}", TrainerExit.CHECKPOINT_INDEX_CORRUPT)
    except LocationTakenError as err:
        return _give_up(log, f"checkpoint error: {err}", TrainerExit.CHECKPOINT_LOCATION_TAKEN)


def _give_up(log: logging.Logger, message: str, code: int, *, logged: str | None = None) -> int:
    """Logs why the trainer stops (``logged``, by default ``message``), tells Kubernetes ``message``; ``code``."""
    from ttj_trainer import logs

    logs.event(log, logged or message, logging.ERROR)
    fatal(message)
    return code


def run() -> None:
    from ttj_trainer import scratch

    own_tmp = scratch.claim()
    code = main()
    scratch.release(own_tmp)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: destroying TensorFlow's remote eager context can block for seconds when
    # the PS is gone or busy, and a preempted pod has only its grace period. Everything is written by now.
    os._exit(code)


if __name__ == "__main__":
    run()
