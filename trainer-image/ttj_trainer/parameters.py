"""A program's state on the parameter servers, shared by every worker through *named* resource variables.

Each worker opens the same variables by name (``VarHandleOp`` with a ``shared_name``) on the PS devices,
so any number of workers can join or leave without the cluster spec of anyone else changing. The handles
are raw ops on purpose: ``tf.Variable`` would destroy the shared variable when a worker exits.

The program's Keras variables are then backed by those shared variables
(:func:`ttj_trainer.variables.shared_resource`). A training step (:class:`StepFunctions`) computes on the
worker's own copies of the model's weights and exchanges one packed message with each PS each way: the
gradients go, the user's Keras optimizer updates the variables there as one function (its slots are on the
same PS, so neither they nor the update math ever cross the network), and the new weights come back.
``Embedding`` layers look their rows up on the PS (:func:`sparse_embedding_lookups`), so a step reads and
sends back only the rows it touches, each once.

Placement (:func:`plan`): balanced, not split. The model's variables, each with its optimizer slots as
one group, go largest group first (in bytes) onto the PS task holding the fewest bytes so far; a variable
is never split across PS tasks, so one table larger than the rest together decides the largest task's
share. Slots beside their variable; the global step (the optimizer's iteration counter), the optimizer's
other variables, one heartbeat per worker slot and one step report per worker slot on PS 0.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from ttj_contract import Role
from ttj_trainer import metrics
from ttj_trainer.logs import event
from ttj_trainer.packing import Layout, Part, from_bytes
from ttj_trainer.program import Prepared, TrainStep
from ttj_trainer.variables import GLOBAL_STEP, MODEL_PREFIX, Shared, rebind, reindex_optimizer, shared_resource
from ttj_trainer.wire import ResidentFunction, WireClient, as_array, as_tensor, port_handle

log = logging.getLogger("ttj_trainer.parameters")

HEARTBEATS = "ttj/heartbeats"
#: Per worker slot, written by its worker with its heartbeat: (wall time, steps this process took, when this
#: process started, seconds it spent in those steps). The start time tells a replaced pod's count, which
#: starts again at 0, from its predecessor's. Like the heartbeats, they describe live processes: never
#: checkpointed.
STEP_REPORTS = "ttj/step-reports"
STEP_REPORT_FIELDS = 4
LIVE = (HEARTBEATS, STEP_REPORTS)
SHARED_NAME_PREFIX = "ttj:"
#: The global step at the end of its PS's weights message (int64).
GLOBAL_STEP_BYTES = 8


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
    is an ``IndexedSlices``. The batch's ids are de-duplicated first, so a row crosses the network once
    each way however often the batch names it. Layers with LoRA or quantization keep Keras's lookup.
    Returns how many changed.
    """
    changed = 0
    for layer in row_lookup_layers(model):

        def call(inputs: Any, layer: Any = layer) -> Any:
            ids = inputs if inputs.dtype in (tf.int32, tf.int64) else tf.cast(inputs, tf.int32)
            # Each row once: the lookup reads it once, and its gradient comes back summed, once per row.
            unique, position = tf.unique(tf.reshape(ids, [-1]))
            rows = tf.nn.embedding_lookup(layer.embeddings.value, unique)
            shape = tf.concat([tf.shape(ids), tf.shape(rows)[1:]], 0)
            return tf.cast(tf.reshape(tf.gather(rows, position), shape), layer.compute_dtype)

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
        overlap: bool = True,
        wire_hosts: Sequence[str] = (),
    ) -> None:
        """``variables``: the program's PS-resident variables, ``initial`` their fresh values; ``step`` the
        program's training step; ``local_device``: where this worker computes (its GPU, else its CPU);
        ``ps_device_of``: the device of PS task i (replaceable to check placement without a cluster);
        ``overlap``: a step's exchange runs while the next step computes (see :meth:`train_step`);
        ``wire_hosts``: each PS's host, to exchange a step over :mod:`ttj_trainer.wire` (empty: through
        TensorFlow's call)."""
        self.ps_device_of = ps_device_of
        self.model = model
        self.optimizer = optimizer
        self.step = step
        self.variables = variables
        self.initial = initial
        self.ps_count = ps_count
        self.overlap = overlap
        self.wire_hosts = tuple(wire_hosts)
        self._wire: WireClient | None = None
        #: Whether this connection's exchanges go through TensorFlow's call (no wire, or it cannot be used).
        self._without_wire = False
        self.slots = plan(variables, ps_count, worker_slots)
        self.name_of = {id(item.variable): item.name for item in variables}
        self.by_name = {s.name: s for s in self.slots}
        self.local_device = local_device
        self.handles: dict[str, Any] = {}
        self.resources: dict[str, Any] = {}  # the tf.Variable behind each Keras variable, on the PS
        self._functions: dict[str, Any] = {}
        self.scale = LearningRateScale()
        scale_learning_rate(optimizer, self.scale)
        updates_beside_variables(optimizer)
        tables = {id(layer.embeddings) for layer in row_lookup_layers(model)}
        #: Tables looked up by row (by name): they stay on the PS; every other model variable has a mirror
        #: on the worker (:class:`StepFunctions`).
        self.tables = {item.name for item in variables if id(item.variable) in tables}
        #: What a step moves to and from each PS (published by the chief; the operator prices cross-zone traffic).
        self.step_bytes_per_ps = step_bytes_per_ps(self.slots, ps_count, self.tables)
        self._executor: ThreadPoolExecutor | None = None
        self._in_flight: Future[Any] | None = None
        self._weights: list[Any] | None = None
        self._pending: list[Any] | None = None
        self._known_step = 0
        self._scale: tuple[float, Any] | None = None
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
        overlap: bool = True,
        wire_hosts: Sequence[str] = (),
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
            overlap=overlap,
            wire_hosts=wire_hosts,
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
                handles[slot.name] = open_shared(slot)
        self.handles = handles
        self._functions = {}
        self._forget_step_state()
        self.reset_transport()
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
        self.flush()
        self._functions = {}
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
        the new PS under ids that mean something else there (seen to crash a freshly started PS). An
        exchange in flight is waited for first (it holds the handles too); its error is the lost PS's.
        """
        if self._in_flight is not None:
            with contextlib.suppress(Exception):  # the connection is being dropped for this very error
                self._in_flight.result()
        self._forget_step_state()
        self.reset_transport()
        self.handles = {}
        self._functions = {}
        for resource in self.resources.values():
            resource._handle = None
        gc.collect()

    def _device(self, name: str) -> str:
        return self.ps_device_of(self.by_name[name].ps_index)

    @contextlib.contextmanager
    def bound_to(self, handles: dict[str, Any], ps_device_of: Callable[[int], str]) -> Iterator[None]:
        """While tracing a function the PS runs itself: the variables read and written through ``handles``
        (opened inside the function) on the devices ``ps_device_of`` names."""
        saved_handles, saved_devices = self.handles, self.ps_device_of
        saved_resources = {name: resource._handle for name, resource in self.resources.items()}
        self.handles, self.ps_device_of = handles, ps_device_of
        for name, resource in self.resources.items():
            rebind(resource, handles[name])
        try:
            yield
        finally:
            self.handles, self.ps_device_of = saved_handles, saved_devices
            for name, resource in self.resources.items():
                resource._handle = saved_resources[name]

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
        self.flush()
        return int(self._read(GLOBAL_STEP).numpy())

    def read_all(self) -> dict[str, np.ndarray]:
        """A consistent-enough snapshot of the checkpointed state (asynchronous training has no exact one)."""
        self.flush()
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
        self.flush()
        self._forget_step_state()
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
        """One step of the program against the PS: returns (its loss, the global step after it). A step whose
        loss is NaN or infinite sends nothing (and returns the global step before it).

        Exact (``overlap=False``): the step's gradients on the weights its previous exchange returned, then
        the exchange (the update on the PS, the new weights back). With overlap, the exchange of the
        previous step's gradients runs while this step computes, so this step computes on weights that lack
        exactly the worker's own previous gradient; this step's exchange is then sent off and the global
        step returned is the last one the PS reported plus this step (at least what the PS will hold once
        it lands: other workers may add theirs). :meth:`flush` waits for it."""
        return self._train(
            lambda functions, weights, pending, scale: functions.call_compute(
                weights, pending, features, labels, scale
            ),
            learning_rate_scale,
        )

    def train_step_reading(self, batches: Any, learning_rate_scale: float) -> tuple[float, int]:
        """:meth:`train_step` on the next batch of ``batches`` (a ``tf.data`` iterator), read inside the step's
        function: no Python per batch (a ``next()`` on the iterator costs more CPU than the read itself, and
        holds the interpreter lock the exchange thread needs). The end of the data raises StopIteration, as
        ``next(batches)`` does."""
        try:
            return self._train(
                lambda functions, weights, pending, scale: functions.call_compute_reading(
                    weights, pending, batches, scale
                ),
                learning_rate_scale,
            )
        except tf.errors.OutOfRangeError as err:
            raise StopIteration from err

    def _train(
        self, compute: Callable[[StepFunctions, list[Any], list[Any], Any], Any], learning_rate_scale: float
    ) -> tuple[float, int]:
        functions = self._step_functions()
        if self._weights is None:
            self._weights, self._known_step = self._unpack_step(functions.pull())
        scale = self._scale_tensor(learning_rate_scale)
        pending = self._pending if self._pending is not None else functions.no_changes
        messages, changes, loss = compute(functions, self._weights, pending, scale)
        # The loss is in host memory already (the step's output, beside its messages): no extra sync.
        loss_value = float(loss.numpy())
        if not math.isfinite(loss_value):
            return loss_value, self._known_step  # its gradients never reach the PS
        if not self.overlap:
            self._weights, self._known_step = self._exchange(functions, messages)
            return loss_value, self._known_step
        self._take_in_flight()
        if not functions.exchange_traced:  # traced here: tracing reads the Keras variables, which compute swaps
            self._weights, self._known_step = self._exchange(functions, messages)
            self._pending = None
            return loss_value, self._known_step
        self._pending = changes
        self._in_flight = self._exchanger().submit(self._exchange_over, self._wire_for(functions), functions, messages)
        return loss_value, self._known_step + 1

    def _exchange(self, functions: StepFunctions, messages: list[Any]) -> tuple[list[Any], int]:
        """A step's exchange, over the wire when this connection has one (traced and installed here, on the
        step's thread: tracing reads the Keras variables), else through TensorFlow's call."""
        if not functions.exchange_traced:
            pulled = self._exchange_over(None, functions, messages)
            functions.exchange_traced = True
            self._wire_for(functions)
            return pulled
        return self._exchange_over(self._wire_for(functions), functions, messages)

    def _exchange_over(
        self, wire: WireClient | None, functions: StepFunctions, messages: list[Any]
    ) -> tuple[list[Any], int]:
        if wire is None:
            metrics.exchanges.labels("tensorflow").inc()
            return self._unpack_step(functions.call_exchange(messages))
        answer = wire.exchange(as_array(tf, messages[0]))
        metrics.exchanges.labels("wire").inc()
        return [as_tensor(tf, answer)], int(answer[-GLOBAL_STEP_BYTES:].view(np.int64)[0])

    def _wire_for(self, functions: StepFunctions) -> WireClient | None:
        """This connection's wire with the step's current resident function on the PS, or None when the step
        goes through TensorFlow's call: no PS host given, more than one PS (the update spans them), a PS that
        offers no wire, or an exchange that needs the worker's own state."""
        if self._without_wire or not functions.exchange_traced:
            return None
        if self._wire is not None and self._wire.installed == functions.exchange_version:
            return self._wire
        if not self.wire_hosts:
            return self._through_tensorflow("the wire is turned off", logging.INFO)
        if self.ps_count != 1:
            return self._through_tensorflow(f"{self.ps_count} parameter servers share each update", logging.INFO)
        if self._wire is None:
            port = self.wire_port()
            if port is None:
                return self._through_tensorflow("the parameter server offers no wire")
            try:
                self._wire = WireClient(tf, self.wire_hosts[0], port)
            except tf.errors.UnavailableError as err:
                return self._through_tensorflow(f"{err.message}; is the port open between the job's pods?")
        resident = functions.resident_exchange()
        if resident is None:
            return self._through_tensorflow("the update reads state of the worker's own (e.g. its learning rate)")
        try:
            self._wire.install(functions.exchange_version, resident)
        except tf.errors.UnavailableError:
            raise  # the PS went away: as any exchange's failure
        except tf.errors.OpError as err:
            return self._through_tensorflow(f"the parameter server cannot run the update: {err.message}")
        event(log, "exchanging over the wire", address=self._wire.address, function_bytes=len(resident.graph))
        return self._wire

    def _through_tensorflow(self, why: str, level: int = logging.WARNING) -> None:
        event(log, "exchanging through TensorFlow's call", level, why=why)
        self._without_wire = True
        self._drop_wire()

    def wire_port(self) -> int | None:
        """The port PS 0's wire listens on, as it published it; None from a PS that publishes none."""
        with tf.device(self.ps_device_of(0)):
            handle = port_handle(tf)
            if not bool(tf.raw_ops.VarIsInitializedOp(resource=handle).numpy()):
                return None
            return int(tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.int64).numpy())

    def _drop_wire(self) -> None:
        if self._wire is not None:
            self._wire.close()
        self._wire = None

    def reset_transport(self) -> None:
        """The wire closed; the next exchange chooses its transport again (after (re)connecting)."""
        self._drop_wire()
        self._without_wire = False

    def _scale_tensor(self, value: float) -> Any:
        """The learning-rate scale as the step's input; it changes about once a heartbeat, not every step."""
        if self._scale is None or self._scale[0] != value:
            self._scale = (value, tf.constant(value, tf.float32))
        return self._scale[1]

    def flush(self) -> None:
        """Waits for the exchange in flight (with overlap), so the PS holds every gradient this worker sent."""
        self._take_in_flight()

    def _take_in_flight(self) -> None:
        if self._in_flight is not None:
            in_flight, self._in_flight = self._in_flight, None
            self._weights, self._known_step = in_flight.result()

    def _exchanger(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ttj-exchange")
        return self._executor

    @staticmethod
    def _unpack_step(pulled: tuple[list[Any], Any]) -> tuple[list[Any], int]:
        messages, global_step = pulled
        return messages, int(global_step.numpy())

    def _forget_step_state(self) -> None:
        """After the PS's state was written or the connection dropped: the next step reads the weights anew."""
        self._weights = None
        self._pending = None
        self._in_flight = None
        self._scale = None

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

    # -- the step's parts ----------------------------------------------------------------------------------
    def _step_functions(self) -> StepFunctions:
        functions = self._functions.get("step")
        if functions is None:
            functions = self._functions["step"] = StepFunctions(self)
        assert isinstance(functions, StepFunctions)
        return functions


#: The learning-rate scale's part of PS 0's gradient message, and a non-trainable variable's change.
SCALE_PART = "ttj/learning-rate-scale"
CHANGE_SUFFIX = ":change"


def host_of(device: str) -> str:
    """The CPU of the task ``device`` is on: where tensors from and to the network are."""
    return device.rsplit("/device:", 1)[0] + "/device:CPU:0"


class StepFunctions:
    """A worker's step against the parameter servers, as three traced functions:

    * ``compute(weights, pending, features, labels, scale)``, on the worker: writes the weights the last
      exchange returned into the worker's own copies of the model's variables (its *mirrors*; tables looked
      up by row stay on the PS and are read a batch's rows at a time), runs the program's step on them with
      the optimizer's ``apply`` caught, and packs what the PS needs into one message per PS: the gradients
      (a table's as its touched rows, summed per row), the change of each non-trainable variable
      (BatchNormalization's statistics, a Dropout's seed state) and, for PS 0, the learning-rate scale.
    * ``exchange(messages)``: on each PS, unpacks its message and runs the optimizer's update there as one
      function (the global step advances by one), adds the non-trainable changes, then reads its model
      variables back, packed, with the global step: one message each way per PS.
    * ``pull()``: the read alone (a worker's first step, after a reconnect or a restore).

    ``pending`` is the non-trainable change of a step whose exchange has not returned yet (with overlap), added
    to the weights written, so a worker's own statistics and seed state never go back.
    """

    def __init__(self, store: ParameterStore) -> None:
        self.store = store
        self.mirrored = [
            item for item in store.variables if item.name.startswith(MODEL_PREFIX) and item.name not in store.tables
        ]
        self.untrained = [item for item in self.mirrored if not item.variable.trainable]
        with tf.device(store.local_device):
            self.mirrors = {
                item.name: tf.Variable(
                    tf.zeros(item.variable.shape, item.variable.dtype), trainable=item.variable.trainable
                )
                for item in self.mirrored
            }
            self.no_changes = [tf.zeros(item.variable.shape, item.variable.dtype) for item in self.untrained]
        self.ps_indices = list(range(store.ps_count))
        self.weights_layouts = [
            Layout(
                [part_of(store.by_name[item.name]) for item in self.mirrored if store.by_name[item.name].ps_index == i]
                + ([part_of(store.by_name[GLOBAL_STEP])] if i == store.by_name[GLOBAL_STEP].ps_index else [])
            )
            for i in self.ps_indices
        ]
        self.gradient_layouts: list[Layout] = []
        self.compute = tf.function(self._compute, reduce_retracing=True)
        self.compute_reading = tf.function(self._compute_reading, reduce_retracing=True)
        self.pull = tf.function(self._read, autograph=False)
        self.exchange = tf.function(self._exchange, autograph=False)
        #: What a step calls: the same functions, called on their flat inputs (:class:`FlatCall`).
        self.call_compute = FlatCall(self.compute)
        self.call_compute_reading = FlatCall(self.compute_reading, any_batch_size)
        self.call_exchange = FlatCall(self.exchange, any_length)
        self.exchange_traced = False
        #: Counts the exchange's traces: the wire's resident function is the trace of one of them.
        self.exchange_version = 0

    @contextlib.contextmanager
    def _on_mirrors(self) -> Iterator[None]:
        """While tracing the computation: the model reads and writes its mirrors, not the PS."""
        originals = {item.name: item.variable._value for item in self.mirrored}
        for item in self.mirrored:
            item.variable._value = self.mirrors[item.name]
        try:
            yield
        finally:
            for item in self.mirrored:
                item.variable._value = originals[item.name]

    def _compute_reading(self, weights: list[Any], pending: list[Any], batches: Any, scale: Any) -> Any:
        # read where the iterator lives (the host), outside the compute device's scope
        features, labels = next(batches)
        return self._compute(weights, pending, features, labels, scale)

    def _compute(self, weights: list[Any], pending: list[Any], features: Any, labels: Any, scale: Any) -> Any:
        store = self.store
        with self._on_mirrors(), tf.device(store.local_device):
            written: dict[str, Any] = {}
            for index, layout in zip(self.ps_indices, self.weights_layouts, strict=True):
                if layout.parts:
                    written |= layout.unpack(weights[index])
            for item, change in zip(self.untrained, pending, strict=True):
                written[item.name] = written[item.name] + change
            for item in self.mirrored:
                self.mirrors[item.name].assign(written[item.name])
            caught: list[tuple[list[Any], list[Any]]] = []

            def apply(gradients: Any, trainable_variables: Any = None) -> None:
                variables = store.optimizer._trainable_variables if trainable_variables is None else trainable_variables
                caught.append((list(gradients), list(variables)))

            store.optimizer.apply = apply
            try:
                loss = store.step(store.model, store.optimizer, features, labels)
            finally:
                del store.optimizer.apply  # back to the class's method
            if len(caught) != 1:
                raise ValueError("the train_step must call optimizer.apply(gradients, variables) exactly once")
            values: dict[str, Any] = {SCALE_PART: scale}
            parts: dict[int, list[Part]] = {i: [] for i in self.ps_indices}
            parts[store.by_name[GLOBAL_STEP].ps_index].append(Part(SCALE_PART, (), tf.float32))
            for gradient, variable in zip(*caught[0], strict=True):
                if gradient is None:
                    continue
                name = store.name_of[id(variable)]
                slot = store.by_name[name]
                rows = name in store.tables and isinstance(gradient, tf.IndexedSlices)
                values[name] = gradient if rows else tf.convert_to_tensor(gradient)
                shape = slot.shape[1:] if rows else slot.shape
                parts[slot.ps_index].append(Part(name, shape, slot.dtype, rows=rows))
            changes = []
            for item in self.untrained:
                change = self.mirrors[item.name].read_value() - written[item.name]
                changes.append(change)
                values[item.name + CHANGE_SUFFIX] = change
                slot = store.by_name[item.name]
                parts[slot.ps_index].append(Part(item.name + CHANGE_SUFFIX, slot.shape, slot.dtype))
            layouts = [Layout(parts[i]) for i in self.ps_indices]
            if [layout.parts for layout in layouts] != [layout.parts for layout in self.gradient_layouts]:
                self.gradient_layouts = layouts
                self.exchange = tf.function(self._exchange, autograph=False)
                self.call_exchange = FlatCall(self.exchange, any_length)
                self.exchange_traced = False
                self.exchange_version += 1
            messages = [layout.pack(values) for layout in layouts]
        # On the host, copied there inside the step (on a GPU that copy overlaps the rest of the step): what
        # goes to the network either way.
        with tf.device(host_of(store.local_device)):
            return [tf.identity(message) for message in messages], changes, tf.identity(tf.cast(loss, tf.float32))

    def _exchange(self, messages: list[Any]) -> Any:
        self._update(messages)
        return self._read()

    def resident_exchange(self) -> ResidentFunction | None:
        """The exchange as PS 0 runs it itself (:mod:`ttj_trainer.wire`): its message in, its weights message
        out, the variables opened by name inside it and no device named. None when the trace captures
        something of this worker (e.g. a learning-rate schedule reading a variable of its own), which the PS
        does not have."""
        store = self.store

        def resident(message: Any) -> Any:
            handles = {slot.name: open_shared(slot) for slot in store.slots}
            with store.bound_to(handles, lambda _index: ""):
                self._update([message])
                return self._packed()[0]

        traced = tf.function(resident, autograph=False).get_concrete_function(tf.TensorSpec([None], tf.uint8))
        if traced.captured_inputs:
            return None
        return ResidentFunction(
            traced.graph.as_graph_def().SerializeToString(), traced.inputs[0].name, traced.outputs[0].name
        )

    def _update(self, messages: list[Any]) -> None:
        """On the PS tasks: the gradients and non-trainable changes of ``messages`` applied."""
        store = self.store
        values: dict[str, Any] = {}
        for index, layout in zip(self.ps_indices, self.gradient_layouts, strict=True):
            with tf.device(store.ps_device_of(index)):
                values |= layout.unpack(messages[index])
        store.scale.tensor = values[SCALE_PART]
        gradients, variables = [], []
        for item in store.variables:
            if item.name in values and item.variable.trainable:
                gradient = values[item.name]
                if isinstance(gradient, tf.IndexedSlices):
                    gradient = tf.IndexedSlices(
                        gradient.values, gradient.indices, tf.constant(store.by_name[item.name].shape, tf.int64)
                    )
                gradients.append(gradient)
                variables.append(item.variable)
        with tf.device(store._device(GLOBAL_STEP)):
            store.optimizer.apply(gradients, variables)
        for item in self.untrained:
            with tf.device(store._device(item.name)):
                store.resources[item.name].assign_add(values[item.name + CHANGE_SUFFIX])

    def _read(self) -> Any:
        """Each PS's weights message (the global step at the end of its PS's) and the global step, on this
        worker's host."""
        store = self.store
        messages = self._packed()
        with tf.device(host_of(store.local_device)):
            messages = [tf.identity(message) for message in messages]
            global_step = from_bytes(messages[store.by_name[GLOBAL_STEP].ps_index][-8:], tf.int64, [])
        return messages, global_step

    def _packed(self) -> list[Any]:
        """Each PS's model variables packed into one message on that PS (empty, here, for a PS without any)."""
        store = self.store
        messages = []
        for index, layout in zip(self.ps_indices, self.weights_layouts, strict=True):
            if not layout.parts:
                with tf.device(host_of(store.local_device)):
                    messages.append(tf.zeros([0], tf.uint8))
                continue
            with tf.device(store.ps_device_of(index)):
                read = {name: store._read(name) for name in layout.names}
                messages.append(layout.pack(read))
        return messages


def open_shared(slot: Slot) -> Any:
    """A handle on the named shared variable of ``slot`` (on the device in scope)."""
    return tf.raw_ops.VarHandleOp(
        dtype=slot.dtype, shape=slot.shape, container="", shared_name=SHARED_NAME_PREFIX + slot.name
    )


def part_of(slot: Slot) -> Part:
    return Part(slot.name, slot.shape, slot.dtype)


class FlatCall:
    """Calls a ``tf.function`` as its traced (concrete) function on the flat list of its input tensors.

    A ``tf.function``'s own call binds its arguments and builds and compares their trace types in Python on
    every call, which on a worker's step costs more CPU than many of the step's kernels (about 1 ms a call,
    measured, beside a 4 ms step on 2 cores), and takes the interpreter lock from the thread computing while
    the exchange runs. Here a traced function is looked up by the shapes and dtypes of the inputs alone.

    ``relaxed``: how to trace, given the call's arguments: the argument specs to trace with (e.g. messages of
    any length, so the exchange of a table's rows is traced once); with it, a ``tf.data`` iterator is an input
    too (its resource handle). Arguments that are not all such inputs (numpy arrays, composite tensors) go
    through the ``tf.function`` as usual.
    """

    def __init__(self, function: Any, relaxed: Callable[..., tuple[Any, ...]] | None = None) -> None:
        self.function = function
        self.relaxed = relaxed
        self._traced: dict[Any, Any] = {}
        self._any_shape: Any = None

    def __call__(self, *args: Any) -> Any:
        values = tf.nest.flatten(args)
        inputs = tf.Tensor if self.relaxed is None else tf.Tensor | tf.data.Iterator
        if not all(isinstance(value, inputs) for value in values):
            return self.function(*args)
        if self.relaxed is not None:
            if self._any_shape is None:
                self._any_shape = self.function.get_concrete_function(*self.relaxed(*args))
            traced = self._any_shape
        else:
            key = tuple((value.dtype, tuple(value.shape)) for value in values)
            traced = self._traced.get(key)
            if traced is None:
                traced = self._traced[key] = self.function.get_concrete_function(*args)
        # an iterator's flat input is its resource handle
        return traced._call_flat(tf.nest.flatten(args, expand_composites=True), traced.captured_inputs)


def any_batch_size(weights: list[Any], pending: list[Any], batches: Any, scale: Any) -> tuple[Any, ...]:
    """The reading step's argument spec: ``batches`` as an iterator of batches of any size, so one traced function
    reads the check's batch (an iterator of it alone) and the pipeline's (whose last batch may be short)."""

    def any_size(spec: Any) -> Any:
        if isinstance(spec, tf.TensorSpec) and spec.shape.rank:
            return tf.TensorSpec([None, *spec.shape[1:]], spec.dtype)
        return spec

    return weights, pending, tf.data.IteratorSpec(tf.nest.map_structure(any_size, batches.element_spec)), scale


def any_length(messages: list[Any]) -> tuple[Any, ...]:
    """The exchange's argument spec: one uint8 message per PS, of any length (rows vary with the batch)."""
    return ([tf.TensorSpec([None], tf.uint8) for _ in messages],)
