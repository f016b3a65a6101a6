"""Checkpoints under ``TTJ_CHECKPOINT_URI`` (a path or gs://), written only by the chief, fenced by epoch.

Layout of the checkpoint directory (everything through ``tf.io.gfile``, so gs:// works):

* ``ckpt-<step>-e<epoch>.index`` / ``.data-00000-of-00001``: one TensorFlow checkpoint (tensor bundle,
  readable with ``tf.train.load_checkpoint``); its path prefix is ``<uri>/ckpt-<step>-e<epoch>``.
* ``ttj-checkpoint.json``: the index: ``{"step", "epoch", "path", "time", "history"}``. A checkpoint
  counts only once the index names it.
* ``checkpoint``: the same in TensorFlow's own format, for ``tf.train.latest_checkpoint``.
* ``ttj-epoch``: the highest fencing token that ever claimed the directory, as JSON ``{"scope", "epoch"}``.

Fencing: a chief claims its token before it writes: (scope, epoch), where the epoch is the Lease's
``leaseTransitions`` and the scope names the Lease itself (its creationTimestamp, then its uid), so that
tokens of one job are ordered by epoch and a later job's outrank an earlier job's. A new job whose
checkpoint location holds an earlier job's checkpoints therefore claims it, restores the latest and goes
on, and the earlier job (were it still running) can no longer write there. A commit is refused when the
directory was claimed by a later token or the index names one, and the caller re-checks the Lease right
before the index is replaced, so an older chief never overwrites a newer one.

Claiming also clears what a crashed writer left: temporary files and checkpoint files the index never
took. A checkpoint that cannot be restored is skipped for the one before it in the index's history (the
caller says so); an index that is not JSON is :class:`CorruptIndexError`, left for the user to resolve.

``latest(uri)`` is the stable way for anyone (tests, the end-to-end suite, the demo) to see the latest
checkpoint; it uses ``tf.io.gfile`` and ``json`` only.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from ttj_contract import format_epoch_time

INDEX = "ttj-checkpoint.json"
TF_INDEX = "checkpoint"
EPOCH_MARKER = "ttj-epoch"
TEMPORARY_MARK = ".tmp-"
T = TypeVar("T")


class StaleEpochError(Exception):
    """A chief of an older epoch tried to write; the write was refused."""


class LocationTakenError(StaleEpochError):
    """The checkpoint location belongs to a newer job (a Lease created later)."""


class CheckpointStorageError(Exception):
    """The checkpoint location cannot be read or written (permissions, missing bucket, network)."""


class CorruptIndexError(Exception):
    """The index exists but cannot be read as one."""


class Latest(NamedTuple):
    step: int
    epoch: int
    path: str


class Token(NamedTuple):
    """A chief's fencing token: the Lease's scope (creationTimestamp/uid), then its epoch."""

    scope: str
    epoch: int


def _storage(uri: str, action: Callable[[], T]) -> T:
    """Runs ``action``, turning the storage's errors into CheckpointStorageError naming ``uri``."""
    import tensorflow as tf

    try:
        return action()
    except (tf.errors.OpError, OSError) as err:
        text = " ".join(str(err).split())[:300]
        raise CheckpointStorageError(f"checkpoint storage {uri}: {type(err).__name__}: {text}") from err


def _join(uri: str, name: str) -> str:
    return f"{uri.rstrip('/')}/{name}"


def _gfile() -> Any:
    import tensorflow as tf

    return tf.io.gfile


def _read_text(uri: str, name: str) -> str | None:
    gfile = _gfile()
    path = _join(uri, name)

    def read() -> str | None:
        if not gfile.exists(path):
            return None
        with gfile.GFile(path, "r") as f:
            text: str = f.read()
        return text

    return _storage(uri, read)


def read_index(uri: str) -> dict[str, Any] | None:
    text = _read_text(uri, INDEX)
    if text is None:
        return None
    try:
        index = json.loads(text)
        if not isinstance(index, dict):
            raise ValueError("not a JSON object")
        int(index["step"]), int(index["epoch"]), str(index["path"])
    except (ValueError, KeyError, TypeError) as err:
        raise CorruptIndexError(
            f"checkpoint index {_join(uri, INDEX)} is corrupt ({err}); move it aside to start from the "
            "checkpoint files listed in the TensorFlow 'checkpoint' file, or point spec.checkpoint.uri elsewhere"
        ) from err
    typed: dict[str, Any] = index
    return typed


def _token_of(index: dict[str, Any]) -> Token:
    return Token(str(index.get("scope") or ""), int(index["epoch"]))


def latest(uri: str) -> Latest | None:
    """The latest committed checkpoint under ``uri`` as (step, epoch, path prefix), or None when there is none."""
    index = read_index(uri)
    if not index:
        return None
    return Latest(int(index["step"]), int(index["epoch"]), str(index["path"]))


def latest_token(uri: str) -> Token | None:
    """The fencing token of the latest committed checkpoint."""
    index = read_index(uri)
    return _token_of(index) if index else None


def claimed(uri: str) -> Token:
    """The highest token that claimed ``uri``; a bare integer (an older layout) has the empty scope."""
    text = (_read_text(uri, EPOCH_MARKER) or "").strip()
    if not text:
        return Token("", -1)
    if text.lstrip("-").isdigit():
        return Token("", int(text))
    try:
        data = json.loads(text)
        return Token(str(data.get("scope") or ""), int(data["epoch"]))
    except (ValueError, KeyError, TypeError, AttributeError):
        return Token("", -1)  # unreadable: any claim may take it over


def _atomic_write(uri: str, path: str, text: str, writer: str) -> None:
    gfile = _gfile()
    temporary = f"{path}{TEMPORARY_MARK}{writer}-{time.time_ns()}"

    def write() -> None:
        with gfile.GFile(temporary, "w") as f:
            f.write(text)
        gfile.rename(temporary, path, overwrite=True)

    _storage(uri, write)


def _refuse(uri: str, token: Token, newer: Token) -> None:
    if newer.scope > token.scope:
        raise LocationTakenError(
            f"checkpoint location {uri} (spec.checkpoint.uri) belongs to a newer job (Lease {newer.scope}, "
            f"epoch {newer.epoch}); this job's Lease is {token.scope or 'unscoped'}: give each running job its "
            "own checkpoint location"
        )
    raise StaleEpochError(f"{uri} belongs to epoch {newer.epoch}; epoch {token.epoch} is stale")


def claim(uri: str, token: Token | int, writer: str) -> list[str]:
    """Marks the directory as owned by ``token`` (a newly elected chief does this first); refuses an older one.

    Returns the leftovers of crashed writers it removed (temporary files, checkpoints the index never took).
    """
    token = token if isinstance(token, Token) else Token("", token)
    _storage(uri, lambda: _gfile().makedirs(uri))
    current = claimed(uri)
    if current > token:
        _refuse(uri, token, current)
    if current < token:
        _atomic_write(uri, _join(uri, EPOCH_MARKER), json.dumps({"scope": token.scope, "epoch": token.epoch}), writer)
    return _clear_leftovers(uri)


def _clear_leftovers(uri: str) -> list[str]:
    """Removes temporary files and checkpoint files the index does not list; only a fresh claimant calls this,
    so no live writer of a newer token can own them."""
    import tensorflow as tf

    index = read_index(uri) or {}
    kept = set(index.get("history") or []) | ({str(index["path"])} if index else set())
    gfile = _gfile()
    removed = []
    for name in _storage(uri, lambda: gfile.listdir(uri)):
        path = _join(uri, name.rstrip("/"))
        prefix = path.rsplit(".", 1)[0] if name.startswith("ckpt-") else None
        orphan = prefix is not None and prefix not in kept and not any(prefix.startswith(k + ".") for k in kept)
        if TEMPORARY_MARK in name or name.rstrip("/").endswith("_temp") or orphan:
            with contextlib.suppress(tf.errors.OpError):
                if gfile.isdir(path):
                    gfile.rmtree(path)
                else:
                    gfile.remove(path)
                removed.append(path)
    return removed


def _check_not_stale(uri: str, token: Token) -> dict[str, Any] | None:
    index = read_index(uri)
    newest = max(claimed(uri), _token_of(index) if index else Token("", -1))
    if newest > token:
        _refuse(uri, token, newest)
    return index


def save(
    uri: str,
    step: int,
    token: Token | int,
    values: dict[str, Any],
    *,
    writer: str,
    fence: Callable[[], None] = lambda: None,
    keep: int = 5,
) -> str:
    """Writes a checkpoint of ``values`` and commits it to the index; returns its path prefix.

    ``fence`` is called right before the index is replaced and must raise StaleEpochError when this
    writer is no longer the chief of ``token`` (the trainer re-reads the Lease there).
    """
    import tensorflow as tf

    token = token if isinstance(token, Token) else Token("", token)
    _check_not_stale(uri, token)
    prefix = _join(uri, f"ckpt-{step}-e{token.epoch}")
    names = sorted(values)

    def write_data() -> None:
        with _local_scope():
            tf.raw_ops.SaveV2(
                prefix=prefix,
                tensor_names=names,
                shape_and_slices=[""] * len(names),
                tensors=[tf.constant(values[n]) for n in names],
            )

    _storage(uri, write_data)
    fence()
    index = _check_not_stale(uri, token)
    history = [p for p in (index or {}).get("history", []) if p != prefix] + [prefix]
    stale, history = history[:-keep], history[-keep:]
    entry = {
        "step": step,
        "epoch": token.epoch,
        "scope": token.scope,
        "path": prefix,
        "time": format_epoch_time(time.time()),
        "history": history,
    }
    _atomic_write(uri, _join(uri, INDEX), json.dumps(entry, indent=1) + "\n", writer)
    tf_index = "".join(f'all_model_checkpoint_paths: "{p}"\n' for p in history)
    _atomic_write(uri, _join(uri, TF_INDEX), f'model_checkpoint_path: "{prefix}"\n{tf_index}', writer)
    for old in stale:
        with contextlib.suppress(tf.errors.OpError):
            for path in tf.io.gfile.glob(old + ".*"):
                tf.io.gfile.remove(path)
    return prefix


class Restored(NamedTuple):
    checkpoint: Latest
    values: dict[str, Any]
    #: The newer checkpoints that could not be restored, with why (the caller reports the fallback).
    skipped: list[tuple[str, str]]


class NoUsableCheckpointError(CorruptIndexError):
    """The index lists checkpoints but none of them can be restored."""


def restore_latest(uri: str, dtypes: dict[str, Any]) -> Restored | None:
    """The latest checkpoint that restores, newest first through the index's history; None when there is none."""
    import tensorflow as tf

    index = read_index(uri)
    if not index:
        return None
    history = [str(p) for p in index.get("history") or []]
    candidates = [str(index["path"])] + [p for p in reversed(history) if p != str(index["path"])]
    skipped: list[tuple[str, str]] = []
    for prefix in candidates:
        try:
            values = restore(prefix, dtypes)
        except (tf.errors.OpError, ValueError) as err:
            skipped.append((prefix, f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"))
            continue
        step = int(values.get("ttj/global_step", index["step"] if prefix == index["path"] else -1))
        return Restored(Latest(step, _epoch_of(prefix, int(index["epoch"])), prefix), values, skipped)
    raise NoUsableCheckpointError(
        f"none of the {len(candidates)} checkpoints listed in {_join(uri, INDEX)} can be restored; "
        + "; ".join(f"{p}: {why}" for p, why in skipped)
    )


def _epoch_of(prefix: str, default: int) -> int:
    """The epoch in a ``ckpt-<step>-e<epoch>`` prefix."""
    tail = prefix.rsplit("-e", 1)
    return int(tail[1]) if len(tail) == 2 and tail[1].isdigit() else default


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
