"""The built-in small CNN on synthetic data, with a held-out evaluation set: what bench/mixed_fleet_loss.py
trains (``spec.program.entrypoint: heldout_small_cnn:program``; the local cluster's pods import it through
``ttj local-cluster --program-path bench/programs``).

Training is exactly the built-in program's (``ttj_trainer.builtin.program`` with the job's arguments); the
evaluation set is ``EVAL_EXAMPLES`` synthetic examples of the same classes, drawn once from their own seed, so
every evaluation of every run scores the same examples and none of them is ever trained on.

One argument of the bench's own, ``update_share_bounds: "LOW,HIGH"``, replaces the clamp of updateShare's
share (``ttj_trainer.training.update_share``) in this worker's process: how the bench compares variants of the
rule (down-weight only, ``0.25,1``, against the trainer's) without a field the CRD does not have.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import tensorflow as tf

from ttj_trainer import builtin, data, training
from ttj_trainer.program import InputContext, Program

EVAL_EXAMPLES = 1024
EVAL_BATCH = 256
#: Far from the seeds the workers' input contexts derive (slot and incarnation), so no example is shared.
EVAL_RNG_SEED = 987_654_321


def use_share_bounds(spec: str) -> None:
    """updateShare's share clamped to ``spec`` ("LOW,HIGH") in this process."""
    low, high = (float(bound) for bound in spec.split(","))
    original = getattr(training.update_share, "func", training.update_share)
    training.update_share = functools.partial(original, bounds=(low, high))  # type: ignore[assignment]


def program(args: dict[str, str]) -> Program:
    if "update_share_bounds" in args:
        use_share_bounds(args["update_share_bounds"])
    trained = builtin.program(args)
    job_seed = int(args.get("seed", "0"))

    def eval_input(_ctx: InputContext) -> Any:
        batches = data.synthetic_batches(EVAL_EXAMPLES, job_seed, np.random.default_rng(EVAL_RNG_SEED))
        images, labels = next(batches)
        return tf.data.Dataset.from_tensor_slices((images, labels)).batch(EVAL_BATCH)

    trained.eval_input = eval_input
    trained.eval_steps = EVAL_EXAMPLES // EVAL_BATCH
    trained.metrics = [tf.keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
    return trained
