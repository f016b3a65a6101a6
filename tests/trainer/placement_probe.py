"""Run as a script: traces a worker's training step with two logical CPUs standing in for "the PS" (CPU:0)
and "the selected compute device" (CPU:1), and prints where each op was placed, as JSON {op type: [devices]}
(and, under "update", the devices, e.g. CPU:0, where the optimizer's arithmetic on whole tensors runs; under
"evaluate", where the chief's evaluation of a batch places its ops; under "packed", where each of the step's
functions packs its message: the gradients on the compute device, the weights on the PS; under
"mirrors_written", where the worker's copies of the weights are written; under "messages_out", where the step's
packed gradients leave its function; under "resident_devices", the devices the wire's resident update names).

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
    overlap=False,
)
store.open()
store.assign_all(store.initial_values())
features, labels = prepared.first
# One step traces the step's functions, and runs them: the global step moved on the "PS".
loss, step = store.train_step(features, labels, 1.0)
functions = store._step_functions()
graphs = {
    name: function._list_all_concrete_functions()[0].graph
    for name, function in (("compute", functions.compute), ("exchange", functions.exchange))
}
placed: dict[str, set[str]] = defaultdict(set)
update: set[str] = set()
packed: dict[str, set[str]] = defaultdict(set)
for name, graph in graphs.items():
    for op in graph.get_operations():
        placed[op.type].add(op.device)
        tensors = [t for t in op.outputs if t.shape.rank]  # the scalar learning-rate arithmetic may go anywhere
        if op.name.split("/", 1)[0] in ("sgd", "adam") and op.type in ("Mul", "Sub", "AddV2") and tensors:
            update.add(op.device.rsplit("/", 1)[-1])
        if op.type == "ConcatV2":
            packed[name].add(op.device)
mirrors_written = {op.device for op in graphs["compute"].get_operations() if op.type == "AssignVariableOp"}


def placed_at(tensor: tf.Tensor) -> str:
    """The device of the op that made ``tensor``, looking through the identities a traced function adds to its
    outputs (they name no device)."""
    while not tensor.op.device and tensor.op.type == "Identity":
        tensor = tensor.op.inputs[0]
    return str(tensor.op.device)


messages_out = {placed_at(tensor) for tensor in graphs["compute"].structured_outputs[0]}
resident = functions.resident_exchange()
assert resident is not None
resident_graph = tf.compat.v1.GraphDef.FromString(resident.graph)
resident_devices = {node.device for node in resident_graph.node} | {
    node.device for function in resident_graph.library.function for node in function.node_def
}
store.evaluate_batch(features, labels, p.loss)
evaluate = store._functions["evaluate"].get_concrete_function(features, labels).graph
evaluated: dict[str, set[str]] = defaultdict(set)
for op in evaluate.get_operations():
    evaluated[op.type].add(op.device)
result = {
    "placed": {k: sorted(v) for k, v in placed.items()},
    "update": sorted(update),
    "step": step,
    "packed": {k: sorted(v) for k, v in packed.items()},
    "mirrors_written": sorted(mirrors_written),
    "messages_out": sorted(messages_out),
    "resident_devices": sorted(resident_devices),
    "evaluate": {k: sorted(v) for k, v in evaluated.items()},
}
json.dump(result | {"compute": compute}, sys.stdout)
