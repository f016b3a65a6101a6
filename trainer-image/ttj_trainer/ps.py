"""The parameter server: a plain tf.distribute.Server that knows only itself; workers bring the rest."""

from __future__ import annotations

import logging
import signal
import threading

from ttj_contract import Role
from ttj_trainer import metrics
from ttj_trainer.config import TrainerConfig
from ttj_trainer.logs import event

log = logging.getLogger("ttj_trainer.ps")


def run(cfg: TrainerConfig) -> int:
    terminated = threading.Event()
    # server.join() never returns to Python, so a SIGTERM handler would never run: wait on an Event instead.
    signal.signal(signal.SIGTERM, lambda *_: terminated.set())
    signal.signal(signal.SIGINT, lambda *_: terminated.set())

    import tensorflow as tf

    session_config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=cfg.intra_op_threads, inter_op_parallelism_threads=cfg.inter_op_threads
    )
    cluster = tf.train.ClusterSpec({Role.PS.value: {cfg.task_index: cfg.own_address}})
    try:
        server = tf.distribute.Server(
            cluster, job_name=Role.PS.value, task_index=cfg.task_index, config=session_config, start=True
        )
    except (tf.errors.OpError, RuntimeError) as err:
        event(log, "cannot start the parameter server", logging.ERROR, address=cfg.own_address, error=str(err))
        return 4
    metrics.set_role("ps")
    metrics.serve(cfg.pod_ip, cfg.metrics_port)
    event(log, "parameter server serving", address=cfg.own_address, target=server.target)
    while not terminated.wait(1.0):
        pass
    event(log, "parameter server stopping on SIGTERM")
    return 143
