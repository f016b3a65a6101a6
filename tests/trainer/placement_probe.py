"""Run as a script: traces a worker's training step with two logical CPUs standing in for "the PS" (CPU:0)
and "the selected compute device" (CPU:1), and prints where each op was placed, as JSON {op type: [devices]}.

A separate process, because logical devices must be configured before TensorFlow initialises.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

import tensorflow as tf

from ttj_trainer import devices, models
from ttj_trainer.parameters import ParameterStore

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
# What select_device would pick if CPU:1 were the pod's GPU: the worker's device string for it.
compute = devices.DeviceChoice("CPU", 1, 0).on_worker(0).replace("/job:worker/replica:0/task:0", "")
store = ParameterStore(models.build("small-cnn"), 1, 2, compute, ps_device_of=lambda _i: "/device:CPU:0")
store.open()
store.assign_all(store.initial_values(0))
train = store._build_train_step()
images = tf.TensorSpec((4, 32, 32, 3), tf.float32)
labels = tf.TensorSpec((4,), tf.int32)
scalar = tf.TensorSpec((), tf.float32)
graph = train.get_concrete_function(images, labels, scalar, scalar).graph
placed: dict[str, set[str]] = defaultdict(set)
for op in graph.get_operations():
    placed[op.type].add(op.device)
# And the step really runs there: one step, then the global step moved on the "PS".
loss, step = store.train_step(tf.zeros((4, 32, 32, 3)).numpy(), tf.zeros((4,), tf.int32).numpy(), 0.01, 0.9)
json.dump({"placed": {k: sorted(v) for k, v in placed.items()}, "step": step, "compute": compute}, sys.stdout)
