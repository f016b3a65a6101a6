"""A program's state on the parameter servers, shared by every worker through *named* resource variables.

Each worker opens the same variables by name (``VarHandleOp`` with a ``shared_name``) on the PS devices,
so any number of workers can join or leave without the cluster spec of anyone else changing. The handles
are raw ops on purpose: ``tf.Variable`` would destroy the shared variable when a worker exits.

The program's Keras variables are then backed by those shared variables
(:func:`ttj_trainer.variables.shared_resource`): the user's model reads its weights from the PS, and the
user's Keras optimizer updates them there, because Keras colocates each update with its variable (its
slots are on the same PS, so neither they nor the update math ever cross the network: a step sends the
gradients and the learning rate). ``Embedding`` layers look their rows up on the PS
(:func:`sparse_embedding_lookups`), so a step reads and sends back only the rows it touches.

Placement (:func:`plan`): balanced, not split. The model's variables, each with its optimizer slots as
one group, go largest group first (in bytes) onto the PS task holding the fewest bytes so far; a variable
is never split across PS tasks, so one table larger than the rest together decides the largest task's
share. Slots beside their variable; the global step (the optimizer's iteration counter), the optimizer's
other variables, one heartbeat per worker slot and one step report per worker slot on PS 0.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from ttj_contract import Role
from ttj_trainer.program import Prepared, TrainStep
from ttj_trainer.variables import GLOBAL_STEP, MODEL_PREFIX, Shared, rebind, reindex_optimizer, shared_resource

HEARTBEATS = "ttj/heartbeats"
#: Per worker slot, written by its worker with its heartbeat: (wall time, steps this process took, when this
#: process started, seconds it spent in those steps). The start time tells a replaced pod's count, which
#: starts again at 0, from its predecessor's. Like the heartbeats, they describe live processes: never
#: checkpointed.
STEP_REPORTS = "ttj/step-reports"
STEP_REPORT_FIELDS = 4
LIVE = (HEARTBEATS, STEP_REPORTS)
SHARED_NAME_PREFIX = "ttj:"


@dataclass(frozen=True)
class Slot:
    name: str
    shape: tuple[int, ...]
    dtype: Any
    ps_index: int


def ps_device(index: int) -> str:
    return f"/job:{Role.PS.value}/replica:0/task:{index}/device:CPU:0"


def _bytes(variable: Any) -> int:
    return int(np.prod(variable.shape)) * tf.as_dtype(variable.dtype).size


def plan(variables: list[Shared], ps_count: int, worker_slots: int) -> list[Slot]:
    """Where every variable lives; deterministic, so every worker computes the same placement."""
    beside: dict[str, list[Shared]] = {}
    alone: list[Shared] = []
    for item in variables:
        if item.beside is not None:
            beside.setdefault(item.beside, []).append(item)
        elif not item.name.startswith("model/"):
            alone.append(item)
    models = [item for item in variables if item.name.startswith("model/")]
    load = [0] * ps_count
    slots: list[Slot] = []
    groups = [[item, *beside.get(item.name, [])] for item in models]
    for group in sorted(groups, key=lambda g: (-sum(_bytes(m.variable) for m in g), g[0].name)):
        index = min(range(ps_count), key=lambda i: (load[i], i))
        load[index] += sum(_bytes(member.variable) for member in group)
        slots += [Slot(m.name, tuple(m.variable.shape), tf.as_dtype(m.variable.dtype), index) for m in group]
    slots += [Slot(item.name, tuple(item.variable.shape), tf.as_dtype(item.variable.dtype), 0) for item in alone]
    slots.append(Slot(HEARTBEATS, (max(1, worker_slots),), tf.float64, 0))
    slots.append(Slot(STEP_REPORTS, (max(1, worker_slots), STEP_REPORT_FIELDS), tf.float64, 0))
    return sorted(slots, key=lambda s: s.name)


def row_lookup_layers(model: Any) -> list[Any]:
    """The plain ``keras.layers.Embedding`` layers of ``model``: those :func:`sparse_embedding_lookups` changes
    (layers with LoRA or quantization keep Keras's lookup)."""
    import keras

    return [
        layer
        for layer in model._flatten_layers(include_self=False, recursive=True)
        if isinstance(layer, keras.layers.Embedding) and not layer.lora_enabled and not layer.quantization_mode
    ]


def step_bytes_per_ps(slots: list[Slot], ps_count: int, looked_up_by_row: set[str]) -> list[int]:
    """Bytes of the model's variables on each PS task, by index: what a worker step pulls from it whole and
    pushes back as gradients. The optimizer's slots never travel (their update runs on the PS), and tables
    in ``looked_up_by_row`` (names) move only the rows a step touches, so neither is counted."""
    per_ps = [0] * ps_count
    for slot in slots:
        if slot.name.startswith(MODEL_PREFIX) and slot.name not in looked_up_by_row:
            per_ps[slot.ps_index] += int(np.prod(slot.shape)) * tf.as_dtype(slot.dtype).size
    return per_ps


def sparse_embedding_lookups(model: Any) -> int:
    """Makes every plain ``keras.layers.Embedding`` of ``model`` gather its rows where the table lives.

    Keras's own lookup converts the whole table to a tensor first, which for a table on a PS means sending
    all of it every step; ``tf.nn.embedding_lookup`` on the variable gathers on its device and its gradient
    is an ``IndexedSlices``. Layers with LoRA or quantization keep Keras's lookup. Returns how many changed.
    """
    changed = 0
    for layer in row_lookup_layers(model):

        def call(inputs: Any, layer: Any = layer) -> Any:
            ids = inputs if inputs.dtype in (tf.int32, tf.int64) else tf.cast(inputs, tf.int32)
            return tf.cast(tf.nn.embedding_lookup(layer.embeddings.value, ids), layer.compute_dtype)

        layer.call = call
        changed += 1
    return changed


class LearningRateScale:
    """ttj's active-worker scale as the training step sees it: the step function's argument, set while it
    is traced (a tensor, never a variable of the worker's own: reconnecting to a replaced PS resets those)."""

    def __init__(self) -> None:
        self.tensor: Any = 1.0


def scale_learning_rate(optimizer: Any, scale: LearningRateScale) -> None:
    """Puts ttj's scale on top of the optimizer's learning rate (a number, or a schedule of the global step)."""
    import keras

    base = optimizer._learning_rate
    if isinstance(base, keras.Variable):
        base = float(base.numpy())

    class Scaled(keras.optimizers.schedules.LearningRateSchedule):  # type: ignore[misc]
        def __call__(self, step: Any) -> Any:
            if isinstance(base, keras.optimizers.schedules.LearningRateSchedule):
                rate = base(step)
            elif callable(base):
                rate = base()
            else:
                rate = base
            return tf.cast(rate, tf.float32) * scale.tensor

        def get_config(self) -> dict[str, Any]:
            return {}

    optimizer.learning_rate = Scaled()


def updates_beside_variables(optimizer: Any) -> None:
    """Runs the optimizer's update of each variable on that variable's device (the PS holding it and its
    slots): only the gradient travels, never the slots or a dense copy of an embedding table."""
    update_step = optimizer.update_step

    def update_step_beside(gradient: Any, variable: Any, learning_rate: Any) -> Any:
        with tf.device(variable.device):
            return update_step(gradient, variable, learning_rate)

    optimizer.update_step = update_step_beside


class ParameterStore:
    """Handles on the shared variables, and the functions a worker runs against them."""

    def __init__(
        self,
        model: Any,
        optimizer: Any,
        step: TrainStep,
        variables: list[Shared],
        initial: dict[str, np.ndarray],
        *,
        ps_count: int,
        worker_slots: int,
        local_device: str,
        ps_device_of: Callable[[int], str] = ps_device,
    ) -> None:
        """``variables``: the program's PS-resident variables, ``initial`` their fresh values; ``step`` the
        program's training step; ``local_device``: where this worker computes (its GPU, else its CPU);
        ``ps_device_of``: the device of PS task i (replaceable to check placement without a cluster)."""
        self.ps_device_of = ps_device_of
        self.model = model
        self.optimizer = optimizer
        self.step = step
        self.variables = variables
        self.initial = initial
        self.slots = plan(variables, ps_count, worker_slots)
        self.by_name = {s.name: s for s in self.slots}
        self.local_device = local_device
        self.handles: dict[str, Any] = {}
        self.resources: dict[str, Any] = {}  # the tf.Variable behind each Keras variable, on the PS
        self._functions: dict[str, Any] = {}
        self.scale = LearningRateScale()
        scale_learning_rate(optimizer, self.scale)
        updates_beside_variables(optimizer)
        tables = {id(layer.embeddings) for layer in row_lookup_layers(model)}
        #: What a step moves to and from each PS (published by the chief; the operator prices cross-zone traffic).
        self.step_bytes_per_ps = step_bytes_per_ps(
            self.slots, ps_count, {item.name for item in variables if id(item.variable) in tables}
        )
        sparse_embedding_lookups(model)

    @classmethod
    def of(
        cls,
        prepared: Prepared,
        *,
        ps_count: int,
        worker_slots: int,
        local_device: str,
        ps_device_of: Callable[[int], str] = ps_device,
    ) -> ParameterStore:
        """The store of a prepared program: its model, optimizer, step, shared variables and fresh values."""
        return cls(
            prepared.program.model,
            prepared.program.optimizer,
            prepared.step,
            prepared.shared,
            prepared.initial,
            ps_count=ps_count,
            worker_slots=worker_slots,
            local_device=local_device,
            ps_device_of=ps_device_of,
        )

    @property
    def checkpointed(self) -> list[Slot]:
        """What a checkpoint holds: everything but the heartbeats and step reports (they describe live processes)."""
        return [s for s in self.slots if s.name not in LIVE]

    def open(self) -> None:
        """(Re)creates the handles; needed again after reconnecting, which invalidates remote handles."""
        handles = {}
        for slot in self.slots:
            with tf.device(self.ps_device_of(slot.ps_index)):
                handles[slot.name] = tf.raw_ops.VarHandleOp(
                    dtype=slot.dtype, shape=slot.shape, container="", shared_name=SHARED_NAME_PREFIX + slot.name
                )
        self.handles = handles
        self._functions = {}
        first = not self.resources
        for item in self.variables:
            handle = handles[item.name]
            if first:
                keras_variable = item.variable
                resource = shared_resource(
                    handle, keras_variable.shape, keras_variable.dtype, item.name, keras_variable.trainable
                )
                keras_variable._value = resource
                self.resources[item.name] = resource
            else:
                rebind(self.resources[item.name], handle)
        if first:
            reindex_optimizer(self.optimizer)

    def detach(self, values: dict[str, np.ndarray]) -> None:
        """Gives the Keras variables back their own local variables, holding ``values``: a model to save."""
        with tf.device(self.local_device):
            for item in self.variables:
                item.variable._value = tf.Variable(
                    values[item.name], trainable=item.variable.trainable, name=item.variable.name
                )
        self.resources = {}
        reindex_optimizer(self.optimizer)

    def close(self) -> None:
        """Drops every remote handle (and the functions capturing them) while the lost PS is still down.

        Otherwise they would be garbage-collected after reconnecting, and their deletion would be sent to
        the new PS under ids that mean something else there (seen to crash a freshly started PS).
        """
        self.handles = {}
        self._functions = {}
        for resource in self.resources.values():
            resource._handle = None
        gc.collect()

    def _device(self, name: str) -> str:
        return self.ps_device_of(self.by_name[name].ps_index)

    def _read(self, name: str) -> Any:
        slot = self.by_name[name]
        with tf.device(self.ps_device_of(slot.ps_index)):
            return tf.raw_ops.ReadVariableOp(resource=self.handles[name], dtype=slot.dtype)

    # -- state of the PS -------------------------------------------------------------------------------
    def initialized(self) -> bool:
        """True when every variable on every PS holds a value (False after a PS lost its state)."""
        if "initialized" not in self._functions:

            @tf.function
            def initialized() -> Any:
                flags = []
                for slot in self.slots:
                    with tf.device(self.ps_device_of(slot.ps_index)):
                        flags.append(tf.raw_ops.VarIsInitializedOp(resource=self.handles[slot.name]))
                with tf.device(self.local_device):
                    return tf.reduce_all(tf.stack(flags))

            self._functions["initialized"] = initialized
        return bool(self._functions["initialized"]().numpy())

    def global_step(self) -> int:
        return int(self._read(GLOBAL_STEP).numpy())

    def read_all(self) -> dict[str, np.ndarray]:
        """A consistent-enough snapshot of the checkpointed state (asynchronous training has no exact one)."""
        if "read_all" not in self._functions:

            @tf.function
            def read_all() -> Any:
                values = {}
                for slot in self.checkpointed:
                    values[slot.name] = self._read(slot.name)
                with tf.device(self.local_device):
                    return {name: tf.identity(value) for name, value in values.items()}

            self._functions["read_all"] = read_all
        return {name: value.numpy() for name, value in self._functions["read_all"]().items()}

    def assign_all(self, values: dict[str, np.ndarray]) -> None:
        """Writes the whole state; the global step goes last, so workers never see a step without weights."""
        names = [s.name for s in self.checkpointed if s.name != GLOBAL_STEP]
        missing = [n for n in [*names, GLOBAL_STEP] if n not in values]
        if missing:
            raise ValueError(f"missing values for {', '.join(missing[:5])}")
        for name in names:
            with tf.device(self._device(name)):
                tf.raw_ops.AssignVariableOp(resource=self.handles[name], value=tf.constant(values[name]))
        for name in LIVE:
            with tf.device(self._device(name)):
                tf.raw_ops.AssignVariableOp(
                    resource=self.handles[name], value=tf.zeros(self.by_name[name].shape, tf.float64)
                )
        # Remote eager ops are asynchronous: read one back so the weights are in place before the step.
        self._read(names[-1]).numpy()
        with tf.device(self._device(GLOBAL_STEP)):
            tf.raw_ops.AssignVariableOp(
                resource=self.handles[GLOBAL_STEP], value=tf.constant(int(values[GLOBAL_STEP]), tf.int64)
            )
        self.global_step()

    def initial_values(self) -> dict[str, np.ndarray]:
        """The program's own initial values (its initializers, seeded by the job's seed), global step 0."""
        return dict(self.initial) | {GLOBAL_STEP: np.array(0, np.int64)}

    # -- heartbeats --------------------------------------------------------------------------------------
    def heartbeat(self, slot_index: int, timestamp: float) -> None:
        with tf.device(self._device(HEARTBEATS)):
            tf.raw_ops.ResourceScatterUpdate(
                resource=self.handles[HEARTBEATS],
                indices=tf.constant([slot_index], tf.int32),
                updates=tf.constant([timestamp], tf.float64),
            )

    def heartbeats(self) -> np.ndarray:
        return np.asarray(self._read(HEARTBEATS).numpy())

    def report_steps(self, slot_index: int, timestamp: float, steps: int, started: float, stepping: float) -> None:
        """This slot's row of the step reports: (``timestamp``, ``steps`` this process took, when it ``started``,
        the seconds it spent ``stepping``)."""
        with tf.device(self._device(STEP_REPORTS)):
            tf.raw_ops.ResourceScatterUpdate(
                resource=self.handles[STEP_REPORTS],
                indices=tf.constant([slot_index], tf.int32),
                updates=tf.constant([[timestamp, float(steps), started, stepping]], tf.float64),
            )

    def step_reports(self) -> np.ndarray:
        """Every slot's step report, one row per slot (zeros for a slot that never reported)."""
        return np.asarray(self._read(STEP_REPORTS).numpy())

    # -- training ----------------------------------------------------------------------------------------
    def train_step(self, features: Any, labels: Any, learning_rate_scale: float) -> tuple[float, int]:
        """One step of the program against the PS: returns (loss, the global step after it)."""
        if "train" not in self._functions:
            self._functions["train"] = self._build_train_step()
        loss, step = self._functions["train"](features, labels, tf.constant(learning_rate_scale, tf.float32))
        return float(loss.numpy()), int(step.numpy())

    def evaluate_batch(self, features: Any, labels: Any, loss: Any) -> tuple[Any, Any]:
        """The model's predictions on ``features`` (``training=False``) with the PS's current weights, and
        the loss as Keras's ``evaluate`` computes it: ``loss(labels, predictions)`` plus the model's own."""
        if "evaluate" not in self._functions:
            model = self.model

            @tf.function(reduce_retracing=True)
            def evaluate(features: Any, labels: Any) -> Any:
                with tf.device(self.local_device):
                    predictions = model(features, training=False)
                    total = tf.cast(loss(labels, predictions), tf.float32)
                    for extra in model.losses:
                        total += tf.reduce_sum(tf.cast(extra, tf.float32))
                    return tf.nest.map_structure(tf.identity, predictions), tf.identity(total)

            self._functions["evaluate"] = evaluate
        predictions, total = self._functions["evaluate"](features, labels)
        return predictions, total

    def _build_train_step(self) -> Any:
        model, optimizer, step = self.model, self.optimizer, self.step

        @tf.function(reduce_retracing=True)
        def train(features: Any, labels: Any, scale: Any) -> Any:
            self.scale.tensor = scale
            with tf.device(self.local_device):
                loss = step(model, optimizer, features, labels)
            with tf.device(self._device(GLOBAL_STEP)):
                global_step = tf.raw_ops.ReadVariableOp(resource=self.handles[GLOBAL_STEP], dtype=tf.int64)
            with tf.device(self.local_device):
                return tf.identity(tf.cast(loss, tf.float32)), tf.identity(global_step)

        return train
