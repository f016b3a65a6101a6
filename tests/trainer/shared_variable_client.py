"""One client of a tf.distribute.Server: opens the named variable ``pinned`` on the PS, adds to it, prints it.

Run by test_trainer.py as separate processes, to pin that named resource variables are shared between
clients (default TensorFlow behaviour the trainer relies on, not a documented API).
"""

import sys

import tensorflow as tf

ps_address, own_address, add = sys.argv[1], sys.argv[2], int(sys.argv[3])
cluster = tf.train.ClusterSpec({"ps": [ps_address], "worker": {0: own_address}})
tf.config.experimental_connect_to_cluster(cluster, job_name="worker", task_index=0, protocol="grpc")
with tf.device("/job:ps/replica:0/task:0/device:CPU:0"):
    handle = tf.raw_ops.VarHandleOp(dtype=tf.int64, shape=[], container="", shared_name="ttj-test:pinned")
    if not bool(tf.raw_ops.VarIsInitializedOp(resource=handle).numpy()):
        tf.raw_ops.AssignVariableOp(resource=handle, value=tf.constant(0, tf.int64))
    tf.raw_ops.AssignAddVariableOp(resource=handle, value=tf.constant(add, tf.int64))
    print(int(tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.int64).numpy()), flush=True)
