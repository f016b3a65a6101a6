"""Checkpoints under ``TTJ_CHECKPOINT_URI`` (a path or gs://), written only by the chief, fenced by epoch.

Layout of the checkpoint directory (everything through ``tf.io.gfile``, so gs:// works):

* ``ckpt-<step>-e<epoch>.index`` / ``.data-00000-of-00001``: one TensorFlow checkpoint (tensor bundle,
  readable with ``tf.train.load_checkpoint``); its path prefix is ``<uri>/ckpt-<step>-e<epoch>``.
* ``ttj-checkpoint.json``: the index: ``{"step", "epoch", "path", "time", "history"}``. A checkpoint
  counts only once the index names it.
* ``checkpoint``: the same in TensorFlow's own format, for ``tf.train.latest_checkpoint``.
* ``ttj-epoch``: the highest epoch that ever claimed the directory.

Fencing: a chief claims its epoch (the Lease's ``leaseTransitions``) before it writes. A commit is refused
when the directory was claimed by a later epoch or the index names a later epoch, and the caller
re-checks the Lease right before the index is replaced, so a chief of an older epoch never overwrites
a newer one.

``latest(uri)`` is the stable way for anyone (tests, the end-to-end suite, the demo) to see the latest
checkpoint; it uses ``tf.io.gfile`` and ``json`` only.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from ttj_contract import format_epoch_time

INDEX = "ttj-checkpoint.json"
TF_INDEX = "checkpoint"
EPOCH_MARKER = "ttj-epoch"


class StaleEpochError(Exception):
    """A chief of an older epoch tried to write; the write was refused."""


class Latest(NamedTuple):
    step: int
    epoch: int
    path: str


def _join(uri: str, name: str) -> str:
    return f"{uri.rstrip('/')}/{name}"


def _gfile() -> Any:
    import tensorflow as tf

    return tf.io.gfile


def read_index(uri: str) -> dict[str, Any] | None:
    gfile = _gfile()
    path = _join(uri, INDEX)
    if not gfile.exists(path):
        return None
    with gfile.GFile(path, "r") as f:
        index: dict[str, Any] = json.load(f)
    return index


def latest(uri: str) -> Latest | None:
    """The latest committed checkpoint under ``uri`` as (step, epoch, path prefix), or None when there is none."""
    index = read_index(uri)
    if not index:
        return None
    return Latest(int(index["step"]), int(index["epoch"]), str(index["path"]))


def claimed_epoch(uri: str) -> int:
    gfile = _gfile()
    path = _join(uri, EPOCH_MARKER)
    if not gfile.exists(path):
        return -1
    with gfile.GFile(path, "r") as f:
        text = f.read().strip()
    return int(text) if text else -1


def _atomic_write(path: str, text: str, writer: str) -> None:
    gfile = _gfile()
    temporary = f"{path}.tmp-{writer}-{time.time_ns()}"
    with gfile.GFile(temporary, "w") as f:
        f.write(text)
    gfile.rename(temporary, path, overwrite=True)


def claim(uri: str, epoch: int, writer: str) -> None:
    """Marks the directory as owned by ``epoch`` (a newly elected chief does this first); refuses an older epoch."""
    _gfile().makedirs(uri)
    current = claimed_epoch(uri)
    if current > epoch:
        raise StaleEpochError(f"checkpoint directory {uri} belongs to epoch {current}; epoch {epoch} is stale")
    if current < epoch:
        _atomic_write(_join(uri, EPOCH_MARKER), f"{epoch}\n", writer)


def _check_not_stale(uri: str, epoch: int) -> dict[str, Any] | None:
    claimed = claimed_epoch(uri)
    index = read_index(uri)
    newest = max(claimed, int(index["epoch"]) if index else -1)
    if newest > epoch:
        raise StaleEpochError(f"epoch {epoch} is stale: {uri} already belongs to epoch {newest}; not writing")
    return index


def save(
    uri: str,
    step: int,
    epoch: int,
    values: dict[str, Any],
    *,
    writer: str,
    fence: Callable[[], None] = lambda: None,
    keep: int = 5,
) -> str:
    """Writes a checkpoint of ``values`` and commits it to the index; returns its path prefix.

    ``fence`` is called right before the index is replaced and must raise StaleEpochError when this
    writer is no longer the chief of ``epoch`` (the trainer re-reads the Lease there).
    """
    import tensorflow as tf

    _check_not_stale(uri, epoch)
    prefix = _join(uri, f"ckpt-{step}-e{epoch}")
    names = sorted(values)
    with _local_scope():
        tf.raw_ops.SaveV2(
            prefix=prefix,
            tensor_names=names,
            shape_and_slices=[""] * len(names),
            tensors=[tf.constant(values[n]) for n in names],
        )
    fence()
    index = _check_not_stale(uri, epoch)
    history = [p for p in (index or {}).get("history", []) if p != prefix] + [prefix]
    stale, history = history[:-keep], history[-keep:]
    entry = {"step": step, "epoch": epoch, "path": prefix, "time": format_epoch_time(time.time()), "history": history}
    _atomic_write(_join(uri, INDEX), json.dumps(entry, indent=1) + "\n", writer)
    tf_index = "".join(f'all_model_checkpoint_paths: "{p}"\n' for p in history)
    _atomic_write(_join(uri, TF_INDEX), f'model_checkpoint_path: "{prefix}"\n{tf_index}', writer)
    for old in stale:
        for path in tf.io.gfile.glob(old + ".*"):
            with contextlib.suppress(tf.errors.NotFoundError):
                tf.io.gfile.remove(path)
    return prefix


def restore(prefix: str, dtypes: dict[str, Any]) -> dict[str, Any]:
    """Reads the named tensors of the checkpoint at ``prefix`` (numpy arrays)."""
    import tensorflow as tf

    names = sorted(dtypes)
    with _local_scope():
        tensors = tf.raw_ops.RestoreV2(
            prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names), dtypes=[dtypes[n] for n in names]
        )
    return {name: tensor.numpy() for name, tensor in zip(names, tensors, strict=True)}


_LOCAL_DEVICE: list[str] = []


def set_local_device(device: str) -> None:
    """Where checkpoint I/O runs: the worker's own CPU (never the PS)."""
    _LOCAL_DEVICE[:] = [device]


def _local_scope() -> Any:
    import tensorflow as tf

    return tf.device(_LOCAL_DEVICE[0] if _LOCAL_DEVICE else "/device:CPU:0")
