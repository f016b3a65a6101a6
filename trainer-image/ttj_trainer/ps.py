"""The parameter server: a TensorFlow server that knows only itself (workers bring the rest), and the wire on
which workers' resident exchange functions run (:mod:`ttj_trainer.wire`)."""

from __future__ import annotations

import logging
import signal
import threading

from ttj_contract import WIRE_PORT, Role
from ttj_trainer import metrics
from ttj_trainer.config import TrainerConfig
from ttj_trainer.logs import event

log = logging.getLogger("ttj_trainer.ps")


def run(cfg: TrainerConfig) -> int:
    terminated = threading.Event()
    # The main thread only waits: a SIGTERM handler runs between its waits.
    signal.signal(signal.SIGTERM, lambda *_: terminated.set())
    signal.signal(signal.SIGINT, lambda *_: terminated.set())

    import tensorflow as tf
    from tensorflow.core.protobuf import tensorflow_server_pb2

    from ttj_trainer.parameters import ps_device
    from ttj_trainer.wire import WireServer, port_handle

    # An exchange asks little compute of the PS (its update and packing: 0.2 ms of a ~3 ms exchange,
    # measured), and between requests its threads would spin waiting for work: CPU taken from the workers
    # beside it (on 2 cores the PS's CPU per exchange fell by 10-35% without spinning, 7 A/B pairs) and
    # from the pod's own CPU limit.
    session_config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=cfg.intra_op_threads,
        inter_op_parallelism_threads=cfg.inter_op_threads,
        experimental=tf.compat.v1.ConfigProto.Experimental(disable_thread_spinning=True),
    )
    tf.config.threading.set_intra_op_parallelism_threads(cfg.intra_op_threads)
    tf.config.threading.set_inter_op_parallelism_threads(cfg.inter_op_threads)
    cluster = tf.train.ClusterSpec({Role.PS.value: {cfg.task_index: cfg.own_address}})
    # The server is this process's own TensorFlow context's (not a separate tf.distribute.Server), so the
    # wire's resident functions run here on the same named variables the workers open remotely.
    server_def = tensorflow_server_pb2.ServerDef(
        cluster=cluster.as_cluster_def(),
        job_name=Role.PS.value,
        task_index=cfg.task_index,
        protocol="grpc",
        default_session_config=session_config,
    )
    try:
        from tensorflow.python.eager import context

        context.context().set_server_def(server_def)
        wire = WireServer(tf, cfg.pod_ip or "0.0.0.0", WIRE_PORT)
        with tf.device(ps_device(cfg.task_index)):
            tf.raw_ops.AssignVariableOp(resource=port_handle(tf), value=tf.constant(wire.port, tf.int64))
    except (tf.errors.OpError, RuntimeError, OSError) as err:
        event(log, "cannot start the parameter server", logging.ERROR, address=cfg.own_address, error=str(err))
        return 4
    wire.start()
    metrics.set_role("ps")
    metrics.serve(cfg.pod_ip, cfg.metrics_port)
    event(log, "parameter server serving", address=cfg.own_address, wire_port=wire.port)
    while not terminated.wait(1.0):
        pass
    wire.stop()
    event(log, "parameter server stopping on SIGTERM")
    return 143
