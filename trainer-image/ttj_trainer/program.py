"""The training program: what a user writes for ttj to train, and how the trainer loads and checks it.

A user module has one function, ``program(args: dict[str, str]) -> Program``, named in the job's
``spec.program.entrypoint`` (``"my_pkg.train:program"``); ``spec.program.args`` are its arguments::

    import keras
    from ttj_trainer.program import InputContext, Program

    def program(args: dict[str, str]) -> Program:
        model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(64, "relu"), keras.layers.Dense(2)])

        def train_input(ctx: InputContext) -> "tf.data.Dataset":
            return make_dataset(shard=ctx.slot, shards=ctx.slot_count, seed=ctx.seed).batch(ctx.per_worker_batch)

        return Program(
            model=model,
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            optimizer=keras.optimizers.Adam(float(args.get("lr", "0.001"))),
            train_input=train_input,
        )

Every worker calls ``program`` once, with the same arguments, and must get the same model (the same
variables in the same order): the variables live on the parameter servers and are matched by position.
The built-in networks (``spec.model``) are programs of this kind too (:mod:`ttj_trainer.builtin`).
"""

from __future__ import annotations

import importlib
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

ENTRYPOINT_FIELD = "spec.program.entrypoint"
#: The most batches of ``eval_input`` one evaluation reads, unless the program says (``Program.eval_steps``).
DEFAULT_EVAL_STEPS = 100


class ProgramError(Exception):
    """The program cannot be trained: the trainer exits ``TrainerExit.PROGRAM_INVALID`` with this message."""


@dataclass(frozen=True)
class InputContext:
    """What a worker's input function is told.

    ``slot`` is the worker's slot (0 … ``slot_count`` - 1). Workers come and go: a preempted slot is
    refilled by a new pod that calls the input function again from the start, and while a slot is empty
    nobody reads its share. So shard by ``slot`` when each example should be seen about equally often,
    shuffle with ``seed`` (different in every incarnation of a slot) and repeat: training runs by steps,
    not epochs, and the dataset should not end.
    """

    slot: int
    slot_count: int
    per_worker_batch: int
    seed: int


#: ``train_step(model, optimizer, features, labels) -> loss``: run inside the trainer's ``tf.function``; it
#: must call ``optimizer.apply(gradients, variables)`` exactly once (that advances the global step).
TrainStep = Callable[[Any, Any, Any, Any], Any]


@dataclass
class Program:
    """A training program. ``train_input`` gives batches of ``(features, labels)``; ``eval_input`` (optional)
    a finite dataset the chief evaluates the loss and ``metrics`` (``keras.metrics.Metric`` objects) on, at
    most ``eval_steps`` batches of it each time (see :mod:`ttj_trainer.evaluation`); ``train_step``
    (optional) replaces the default step (``loss(labels, model(features, training=True)) +
    sum(model.losses)``, gradients, ``optimizer.apply``)."""

    model: Any
    loss: Any
    optimizer: Any
    train_input: Callable[[InputContext], Any]
    eval_input: Callable[[InputContext], Any] | None = None
    metrics: list[Any] = field(default_factory=list)
    train_step: TrainStep | None = None
    eval_steps: int = DEFAULT_EVAL_STEPS


def last_line(err: BaseException) -> str:
    """The error's last line, as Python prints it (``ValueError: ...``), on one line."""
    lines = [line for line in traceback.format_exception_only(type(err), err) if line.strip()]
    text = " ".join(lines[-1].split()) if lines else type(err).__name__
    return text[:600]


def _fail(entrypoint: str, what: str) -> ProgramError:
    return ProgramError(f"{ENTRYPOINT_FIELD} {entrypoint!r}: {what}")


def resolve(entrypoint: str) -> Callable[[dict[str, str]], Any]:
    """The function ``module:attribute`` names; ProgramError when it does not import or is not callable."""
    module_name, sep, attribute = entrypoint.partition(":")
    if not sep or not module_name or not attribute:
        raise _fail(entrypoint, "must be 'module:function', e.g. 'my_pkg.train:program'")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:
        raise _fail(entrypoint, f"cannot import {module_name!r}: {last_line(err)}") from err
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise _fail(entrypoint, f"module {module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise _fail(entrypoint, f"{attribute!r} is a {type(target).__name__}, not a function")
    function: Callable[[dict[str, str]], Any] = target
    return function


def load(entrypoint: str, args: Mapping[str, str]) -> Program:
    """Calls the entrypoint with ``args`` and checks what it returns (not yet that it trains: :func:`build`)."""
    function = resolve(entrypoint)
    try:
        program = function(dict(args))
    except Exception as err:
        raise _fail(entrypoint, f"raised {last_line(err)}") from err
    if not isinstance(program, Program):
        raise _fail(entrypoint, f"returned a {type(program).__name__}, not a ttj_trainer.program.Program")
    import keras

    if not isinstance(program.model, keras.Model):
        raise _fail(entrypoint, f"Program.model is a {type(program.model).__name__}, not a keras.Model")
    if not isinstance(program.optimizer, keras.optimizers.Optimizer):
        raise _fail(entrypoint, f"Program.optimizer is a {type(program.optimizer).__name__}, not a Keras optimizer")
    if program.train_step is None and not callable(program.loss):
        raise _fail(entrypoint, f"Program.loss is a {type(program.loss).__name__}: give a Keras loss or a function")
    if not callable(program.train_input):
        raise _fail(entrypoint, "Program.train_input must be a function of an InputContext")
    _check_evaluation_fields(entrypoint, program)
    return program


def _check_evaluation_fields(entrypoint: str, program: Program) -> None:
    import keras

    if program.eval_input is None:
        return
    if not callable(program.eval_input):
        raise _fail(entrypoint, "Program.eval_input must be a function of an InputContext")
    if not callable(program.loss):
        raise _fail(entrypoint, "Program.loss is needed to evaluate eval_input: give a Keras loss or a function")
    for index, metric in enumerate(program.metrics):
        if not isinstance(metric, keras.metrics.Metric):
            raise _fail(
                entrypoint, f"Program.metrics[{index}] is a {type(metric).__name__}, not a keras.metrics.Metric"
            )
    steps = program.eval_steps
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise _fail(entrypoint, f"Program.eval_steps must be a positive integer, not {steps!r}")


def build(entrypoint: str, program: Program, features: Any) -> dict[int, Any]:
    """Creates the model's variables (by calling it on one batch) and the optimizer's; ProgramError when the
    batch does not fit the model or the model has nothing to train. Returns which model variable each
    optimizer slot is made from (see :func:`ttj_trainer.variables.recording_slots`)."""
    from ttj_trainer import variables

    try:
        program.model(features, training=False)
    except Exception as err:
        raise _fail(entrypoint, f"the model cannot take train_input's features: {last_line(err)}") from err
    if not program.model.trainable_variables:
        raise _fail(entrypoint, "the model has no trainable variables")
    if program.optimizer.built:
        raise _fail(entrypoint, "Program.optimizer is already built: return a new optimizer")
    with variables.recording_slots(program.optimizer) as made_from:
        program.optimizer.build(program.model.trainable_variables)
    return made_from


def default_step(program: Program) -> TrainStep:
    """Keras's own training step (as ``Model.fit`` runs it), for programs without a ``train_step``."""
    import tensorflow as tf

    loss_fn = program.loss

    def step(model: Any, optimizer: Any, features: Any, labels: Any) -> Any:
        with tf.GradientTape() as tape:
            predictions = model(features, training=True)
            loss = loss_fn(labels, predictions)
            if model.losses:
                loss = loss + tf.add_n(model.losses)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(gradients, model.trainable_variables)
        return loss

    return step


def restore(model: Any, checkpoint: str) -> None:
    """Loads a ttj checkpoint (a path, or a checkpoint location for its latest) into a built ``model``.

    The three lines that restore a job's checkpoint into your model::

        from ttj_trainer import program
        p = program.load("my_pkg.train:program", {"units": "64"})
        program.restore(program.built_model(p), "gs://bucket/job")   # or one checkpoint's path
    """
    from ttj_trainer import checkpoints, variables

    path = checkpoint
    latest = checkpoints.latest(checkpoint.rstrip("/"))
    if latest is not None:
        path = latest.path
    names = variables.model_names(model)
    values = checkpoints.restore(path, {name: variable.dtype for name, variable in names.items()})
    for name, variable in names.items():
        variable.assign(values[name])


def built_model(program: Program, seed: int = 0) -> Any:
    """The program's model with its variables created, from the first batch of slot 0's input."""
    features, _ = next(iter(program.train_input(InputContext(0, 1, 1, seed))))
    program.model(features, training=False)
    return program.model


@dataclass
class Prepared:
    """A program checked and built, ready for the parameter servers: its PS-resident variables and their
    fresh values, the step to run, and the first batch (already read from ``train_input``)."""

    entrypoint: str
    program: Program
    step: TrainStep
    shared: list[Any]
    initial: dict[str, Any]
    first: tuple[Any, Any]
    batches: Any
    #: The loss of the check's one step (on the fresh weights and the first batch).
    first_loss: float
    #: What ``eval_input`` is called with (None without one): the same for every evaluation.
    eval_context: InputContext | None = None


def prepare(entrypoint: str, program: Program, context: InputContext, eval_seed: int = 0) -> Prepared:
    """Builds the program and runs one training step on one batch on this process's own variables (then
    puts the fresh values back), and evaluates one batch of its evaluation set, if it has one, on them:
    whatever a program gets wrong shows here, before any PS is touched. ``eval_seed``: the job's seed,
    for the evaluation set's context."""

    from ttj_trainer import variables
    from ttj_trainer.data import DatasetError

    try:
        dataset = program.train_input(context)
    except DatasetError:
        raise  # a dataset that cannot be had is said as such (TrainerExit.DATA_UNAVAILABLE)
    except Exception as err:
        raise _fail(entrypoint, f"train_input raised {last_line(err)}") from err
    batches, (features, labels) = _first_pair(entrypoint, "train_input", prefetched(dataset))
    made_from = build(entrypoint, program, features)
    shared = variables.shared(program.model, program.optimizer, made_from)
    initial = {item.name: item.variable.numpy() for item in shared if item.name != variables.GLOBAL_STEP}
    step = program.train_step or default_step(program)
    everything = [*program.model.variables, *program.optimizer.variables]
    before = [variable.numpy() for variable in everything]  # the dry run's updates are undone below
    iterations = int(program.optimizer.iterations.numpy())
    try:
        # Eagerly: cheaper than tracing a function only to throw it away (a worker's start-up counts).
        first_loss = float(step(program.model, program.optimizer, features, labels))
    except Exception as err:
        raise _fail(entrypoint, f"one training step on train_input's first batch failed: {last_line(err)}") from err
    if int(program.optimizer.iterations.numpy()) != iterations + 1:
        raise _fail(entrypoint, "the train_step must call optimizer.apply(gradients, variables) exactly once")
    for variable, value in zip(everything, before, strict=True):
        variable.assign(value)
    eval_context = None
    if program.eval_input is not None:
        eval_context = InputContext(0, 1, context.per_worker_batch, eval_seed)
        _check_evaluation(entrypoint, program, eval_context)
    return Prepared(entrypoint, program, step, shared, initial, (features, labels), batches, first_loss, eval_context)


def prefetched(dataset: Any) -> Any:
    """The training input read ahead, so the next batch is ready when a step ends (a ``tf.data.Dataset``
    only: anything else is left for :func:`_first_pair` to name)."""
    import tensorflow as tf

    return dataset.prefetch(tf.data.AUTOTUNE) if isinstance(dataset, tf.data.Dataset) else dataset


def training_batches(program: Program, context: InputContext) -> Iterator[Any]:
    """The batches of ``train_input`` again (after a reconnect reset the process's TensorFlow context)."""
    return iter(prefetched(program.train_input(context)))


def _first_pair(entrypoint: str, source: str, dataset: Any) -> tuple[Iterator[Any], tuple[Any, Any]]:
    """What ``source`` (an input function of the program) returned, as an iterator and its first
    (features, labels) element; the program's error, said as such, when it is not that."""
    import tensorflow as tf

    if not isinstance(dataset, tf.data.Dataset):
        raise _fail(entrypoint, f"{source} returned a {type(dataset).__name__}, not a tf.data.Dataset")
    batches = iter(dataset)
    try:
        element = next(batches)
    except StopIteration as err:
        raise _fail(entrypoint, f"{source} gave an empty dataset") from err
    except Exception as err:
        raise _fail(entrypoint, f"reading {source} failed: {last_line(err)}") from err
    if not isinstance(element, tuple) or len(element) != 2:
        raise _fail(entrypoint, f"{source}'s elements must be (features, labels) pairs")
    return batches, (element[0], element[1])


def _check_evaluation(entrypoint: str, program: Program, context: InputContext) -> None:
    """One batch of the evaluation set through the model, the loss and fresh copies of the metrics."""

    assert program.eval_input is not None
    try:
        dataset = program.eval_input(context)
    except Exception as err:
        raise _fail(entrypoint, f"eval_input raised {last_line(err)}") from err
    _, (features, labels) = _first_pair(entrypoint, "eval_input", dataset)
    try:
        predictions = program.model(features, training=False)
    except Exception as err:
        raise _fail(entrypoint, f"the model cannot take eval_input's features: {last_line(err)}") from err
    try:
        float(program.loss(labels, predictions))
    except Exception as err:
        raise _fail(entrypoint, f"the loss cannot take eval_input's labels: {last_line(err)}") from err
    for metric in program.metrics:
        try:
            fresh = type(metric).from_config(metric.get_config())
            fresh.update_state(labels, predictions)
            float(fresh.result())
        except Exception as err:
            raise _fail(entrypoint, f"metric {metric.name!r} cannot evaluate eval_input: {last_line(err)}") from err
