"""Which of a program's Keras variables live on the parameter servers, under which names, and how a Keras
variable is made to read and write a PS-resident shared variable.

Names are positions (``model/00003``: the fourth of ``model.variables``; ``optimizer/00002``), because
Keras uniquifies layer names per process (``dense`` here, ``dense_1`` in a process that built another
model first): a position is the same in every worker and in a notebook restoring a checkpoint. The
optimizer's iteration counter is the job's global step. Everything is on the PS, a random layer's seed state (Dropout's
``seed_generator_state``) included: nothing of the program lives only in a worker's TensorFlow context,
which reconnecting to a replaced PS resets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

GLOBAL_STEP = "ttj/global_step"
MODEL_PREFIX = "model/"
OPTIMIZER_PREFIX = "optimizer/"


@dataclass(frozen=True)
class Shared:
    """A Keras variable that lives on the PS, as ``name``; an optimizer slot names its model variable
    (``beside``), so that it lands on the same PS and its update runs there."""

    name: str
    variable: Any
    beside: str | None = None


def model_names(model: Any) -> dict[str, Any]:
    """The model's variables by name (a built model)."""
    return {f"{MODEL_PREFIX}{index:05d}": variable for index, variable in enumerate(model.variables)}


@contextmanager
def recording_slots(optimizer: Any) -> Iterator[dict[int, Any]]:
    """While building ``optimizer``: which model variable each slot variable is made from (id → variable)."""
    made_from: dict[int, Any] = {}
    original: Callable[..., Any] = optimizer.add_variable_from_reference

    def add_variable_from_reference(reference_variable: Any, *args: Any, **kwargs: Any) -> Any:
        slot = original(reference_variable, *args, **kwargs)
        made_from[id(slot)] = reference_variable
        return slot

    optimizer.add_variable_from_reference = add_variable_from_reference
    try:
        yield made_from
    finally:
        del optimizer.add_variable_from_reference  # back to the class's method


def shared(model: Any, optimizer: Any, made_from: dict[int, Any]) -> list[Shared]:
    """Everything a program keeps on the PS: the model's variables, then the optimizer's (its iteration
    counter as the global step; its learning rate is not state but the program's setting)."""
    models = model_names(model)
    name_of = {id(variable): name for name, variable in models.items()}
    result = [Shared(name, variable) for name, variable in models.items()]
    for index, variable in enumerate(optimizer.variables):
        if variable is optimizer._learning_rate:
            continue
        if variable is optimizer.iterations:
            result.append(Shared(GLOBAL_STEP, variable))
            continue
        reference = made_from.get(id(variable))
        result.append(Shared(f"{OPTIMIZER_PREFIX}{index:05d}", variable, name_of.get(id(reference))))
    return result


def shared_resource(handle: Any, shape: Any, dtype: Any, name: str, trainable: bool) -> Any:
    """A ``tf.Variable`` on an existing handle (a named shared variable on a PS), which never destroys it.

    ``tf.Variable`` itself would create its own, anonymous variable and delete it with the Python object;
    the handle gets the shape and dtype a traced function needs to know what it reads.
    """
    import tensorflow as tf
    from tensorflow.python.ops import handle_data_util, resource_variable_ops

    resource_variable_ops._set_handle_shapes_and_types(
        handle, handle_data_util.create_handle_data(tf.TensorShape(shape), tf.as_dtype(dtype)), False
    )
    return resource_variable_ops.BaseResourceVariable(
        trainable=trainable,
        shape=shape,
        dtype=tf.as_dtype(dtype),
        handle=handle,
        name=name,
        unique_id=f"ttj:{name}",
        handle_name=name,
    )


def rebind(resource: Any, handle: Any) -> None:
    """Points an existing shared resource at a new handle (after reconnecting): the Keras variable and the
    optimizer's bookkeeping keep the same object."""
    import tensorflow as tf
    from tensorflow.python.ops import handle_data_util, resource_variable_ops

    resource_variable_ops._set_handle_shapes_and_types(
        handle, handle_data_util.create_handle_data(resource.shape, tf.as_dtype(resource.dtype)), False
    )
    resource._handle = handle


def reindex_optimizer(optimizer: Any) -> None:
    """The Keras optimizer finds a variable's slots by the identity of its backing tf.Variable: after the
    model's variables moved to the PS, tell it their new identities."""
    optimizer._trainable_variables_indices = {
        optimizer._var_key(variable): index for index, variable in enumerate(optimizer._trainable_variables)
    }
