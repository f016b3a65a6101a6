"""The model's state on the parameter servers, shared by every worker through *named* resource variables.

Each worker opens the same variables by name (``VarHandleOp`` with a ``shared_name``) on the PS devices,
so any number of workers can join or leave without the cluster spec of anyone else changing. The handles
are raw ops on purpose: ``tf.Variable`` would destroy the shared variable when a worker exits.

State on the PS: the model's parameters (spread over all PS tasks, largest first onto the least loaded),
a momentum accumulator per trainable parameter (next to its parameter), the global step and one heartbeat
per worker slot (both on PS task 0).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from ttj_contract import Role
from ttj_trainer.models import Model

GLOBAL_STEP = "ttj/global_step"
HEARTBEATS = "ttj/heartbeats"
SHARED_NAME_PREFIX = "ttj:"
MOMENTUM_SUFFIX = "/Momentum"


@dataclass(frozen=True)
class Slot:
    name: str
    shape: tuple[int, ...]
    dtype: Any
    ps_index: int


def ps_device(index: int) -> str:
    return f"/job:{Role.PS.value}/replica:0/task:{index}/device:CPU:0"


def plan(model: Model, ps_count: int, worker_slots: int) -> list[Slot]:
    """Where every variable lives; deterministic, so every worker computes the same placement."""
    load = [0] * ps_count
    slots: list[Slot] = []
    for spec in sorted(model.params, key=lambda p: (-int(np.prod(p.shape)), p.name)):
        index = min(range(ps_count), key=lambda i: (load[i], i))
        size = int(np.prod(spec.shape))
        load[index] += size * (2 if spec.trainable else 1)
        slots.append(Slot(spec.name, spec.shape, tf.float32, index))
        if spec.trainable:
            slots.append(Slot(spec.name + MOMENTUM_SUFFIX, spec.shape, tf.float32, index))
    slots.append(Slot(GLOBAL_STEP, (), tf.int64, 0))
    slots.append(Slot(HEARTBEATS, (max(1, worker_slots),), tf.float64, 0))
    return sorted(slots, key=lambda s: s.name)


class ParameterStore:
    """Handles on the shared variables, and the functions a worker runs against them."""

    def __init__(
        self,
        model: Model,
        ps_count: int,
        worker_slots: int,
        local_device: str,
        ps_device_of: Callable[[int], str] = ps_device,
    ) -> None:
        """``local_device``: where this worker computes (its GPU, else its CPU); ``ps_device_of``: the device of
        PS task i (replaceable to check placement without a cluster)."""
        self.ps_device_of = ps_device_of
        self.model = model
        self.slots = plan(model, ps_count, worker_slots)
        self.by_name = {s.name: s for s in self.slots}
        self.local_device = local_device
        self.handles: dict[str, Any] = {}
        self._functions: dict[str, Any] = {}

    @property
    def checkpointed(self) -> list[Slot]:
        """What a checkpoint holds: everything but the heartbeats (they describe live processes)."""
        return [s for s in self.slots if s.name != HEARTBEATS]

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

    def close(self) -> None:
        """Drops every remote handle (and the functions capturing them) while the lost PS is still down.

        Otherwise they would be garbage-collected after reconnecting, and their deletion would be sent to
        the new PS under ids that mean something else there (seen to crash a freshly started PS).
        """
        self.handles = {}
        self._functions = {}
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
        with tf.device(self._device(HEARTBEATS)):
            tf.raw_ops.AssignVariableOp(
                resource=self.handles[HEARTBEATS], value=tf.zeros(self.by_name[HEARTBEATS].shape, tf.float64)
            )
        # Remote eager ops are asynchronous: read one back so the weights are in place before the step.
        self._read(names[-1]).numpy()
        with tf.device(self._device(GLOBAL_STEP)):
            tf.raw_ops.AssignVariableOp(
                resource=self.handles[GLOBAL_STEP], value=tf.constant(int(values[GLOBAL_STEP]), tf.int64)
            )
        self.global_step()

    def initial_values(self, seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        values: dict[str, np.ndarray] = {}
        for spec in self.model.params:
            values[spec.name] = spec.initial_value(rng)
            if spec.trainable:
                values[spec.name + MOMENTUM_SUFFIX] = np.zeros(spec.shape, np.float32)
        values[GLOBAL_STEP] = np.array(0, np.int64)
        return values

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

    # -- training ----------------------------------------------------------------------------------------
    def train_step(
        self, images: np.ndarray, labels: np.ndarray, learning_rate: float, momentum: float
    ) -> tuple[float, int]:
        """Reads the parameters, computes gradients here, applies them on the PS; returns (loss, new global step)."""
        if "train" not in self._functions:
            self._functions["train"] = self._build_train_step()
        loss, step = self._functions["train"](
            tf.constant(images),
            tf.constant(labels),
            tf.constant(learning_rate, tf.float32),
            tf.constant(momentum, tf.float32),
        )
        return float(loss.numpy()), int(step.numpy())

    def _build_train_step(self) -> Any:
        model = self.model
        trainable = [p.name for p in model.params if p.trainable]

        @tf.function(reduce_retracing=True)
        def train(images: Any, labels: Any, learning_rate: Any, momentum: Any) -> Any:
            params = {p.name: self._read(p.name) for p in model.params}
            with tf.device(self.local_device):
                watched = [params[n] for n in trainable]
                with tf.GradientTape() as tape:
                    tape.watch(watched)
                    logits, moving = model.forward(params, images, True)
                    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
                    total = loss
                    if model.weight_decay:
                        total += model.weight_decay * tf.add_n([tf.nn.l2_loss(params[k]) for k in model.kernels])
                grads = tape.gradient(total, watched)
            for name, grad in zip(trainable, grads, strict=True):
                with tf.device(self._device(name)):
                    tf.raw_ops.ResourceApplyMomentum(
                        var=self.handles[name],
                        accum=self.handles[name + MOMENTUM_SUFFIX],
                        lr=learning_rate,
                        grad=grad,
                        momentum=momentum,
                    )
            for name, value in moving.items():
                with tf.device(self._device(name)):
                    tf.raw_ops.AssignVariableOp(resource=self.handles[name], value=value)
            with tf.device(self._device(GLOBAL_STEP)):
                tf.raw_ops.AssignAddVariableOp(resource=self.handles[GLOBAL_STEP], value=tf.constant(1, tf.int64))
                step = tf.raw_ops.ReadVariableOp(resource=self.handles[GLOBAL_STEP], dtype=tf.int64)
            with tf.device(self.local_device):
                return tf.identity(loss), tf.identity(step)

        return train
