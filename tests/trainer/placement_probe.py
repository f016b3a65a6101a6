"""Run as a script: traces a worker's training step with two logical CPUs standing in for "the PS" (CPU:0)
and "the selected compute device" (CPU:1), and prints where each op was placed, as JSON {op type: [devices]}
(and, under "update", the devices, e.g. CPU:0, where the optimizer's arithmetic on whole tensors runs; under
"evaluate", where the chief's evaluation of a batch places its ops).

``placement_probe.py [ENTRYPOINT [ARGS_JSON]]``: the built-in small CNN by default, else that program.

A separate process, because logical devices must be configured before TensorFlow initialises.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

import tensorflow as tf

from ttj_trainer import devices, program
from ttj_trainer.config import TrainerConfig, load, program_of
from ttj_trainer.parameters import ParameterStore
from ttj_trainer.selfcheck import sample_env

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
# What select_device would pick if CPU:1 were the pod's GPU: the worker's device string for it.
compute = devices.DeviceChoice("CPU", 1, 0).on_worker(0).replace("/job:worker/replica:0/task:0", "")
cfg: TrainerConfig = load(sample_env() | {"TTJ_MODEL": "small-cnn", "TTJ_DATASET": "synthetic", "TTJ_BATCH_SIZE": "4"})
entrypoint, args = program_of(cfg)
if len(sys.argv) > 1:
    entrypoint, args = sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
prepared = program.prepare(entrypoint, program.load(entrypoint, args), program.InputContext(0, 1, 4, 0))
p = prepared.program
store = ParameterStore.of(
    prepared,
    ps_count=1,
    worker_slots=2,
    local_device=compute,
    ps_device_of=lambda _i: "/device:CPU:0",
)
store.open()
store.assign_all(store.initial_values())
train = store._build_train_step()
features, labels = prepared.first
graph = train.get_concrete_function(features, labels, tf.constant(1.0)).graph
placed: dict[str, set[str]] = defaultdict(set)
update: set[str] = set()
for op in graph.get_operations():
    placed[op.type].add(op.device)
    tensors = [t for t in op.outputs if t.shape.rank]  # the scalar learning-rate arithmetic may go anywhere
    if op.name.split("/", 1)[0] in ("sgd", "adam") and op.type in ("Mul", "Sub", "AddV2") and tensors:
        update.add(op.device.rsplit("/", 1)[-1])
# And the step really runs there: one step, then the global step moved on the "PS".
loss, step = store.train_step(features, labels, 1.0)
store.evaluate_batch(features, labels, p.loss)
evaluate = store._functions["evaluate"].get_concrete_function(features, labels).graph
evaluated: dict[str, set[str]] = defaultdict(set)
for op in evaluate.get_operations():
    evaluated[op.type].add(op.device)
result = {
    "placed": {k: sorted(v) for k, v in placed.items()},
    "update": sorted(update),
    "step": step,
    "evaluate": {k: sorted(v) for k, v in evaluated.items()},
}
json.dump(result | {"compute": compute}, sys.stdout)
