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

    # An exchange asks little compute of the PS (its update and packing: 0.2 ms of a ~3 ms exchange,
    # measured), and between requests its threads would spin waiting for work: CPU taken from the workers
    # beside it (on 2 cores the PS's CPU per exchange fell by 10-35% without spinning, 7 A/B pairs) and
    # from the pod's own CPU limit.
    session_config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=cfg.intra_op_threads,
        inter_op_parallelism_threads=cfg.inter_op_threads,
        experimental=tf.compat.v1.ConfigProto.Experimental(disable_thread_spinning=True),
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
