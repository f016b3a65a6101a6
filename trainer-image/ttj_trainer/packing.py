"""Many tensors as one flat byte tensor and back, inside a traced function: what lets a worker and a
parameter server exchange a step in one message each way instead of one transfer per variable.

A :class:`Layout` is fixed when the step is traced: its parts in order, each a name, a shape and a dtype.
A part of rows (``rows=True``: the gradient of a table looked up by row, an ``IndexedSlices``) has a
length that changes with every batch: the message starts with the row counts of its row parts (int64), so
the receiver knows where each ends. Values travel as their own bytes (``tf.bitcast``): nothing is rounded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

ROW_INDEX_DTYPE = tf.int64


@dataclass(frozen=True)
class Part:
    """One tensor of a message. For a part of ``rows``, ``shape`` is the shape of one row."""

    name: str
    shape: tuple[int, ...]
    dtype: Any
    rows: bool = False

    @property
    def item_bytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * tf.as_dtype(self.dtype).size


def to_bytes(tensor: Any) -> Any:
    """``tensor`` flattened to its bytes (uint8, 1-D)."""
    flat = tf.reshape(tensor, [-1])
    if flat.dtype == tf.bool:
        return tf.cast(flat, tf.uint8)
    if flat.dtype == tf.uint8:
        return flat
    return tf.reshape(tf.bitcast(flat, tf.uint8), [-1])


def from_bytes(chunk: Any, dtype: Any, shape: Any) -> Any:
    """The tensor of ``dtype`` and ``shape`` whose bytes are ``chunk`` (the inverse of :func:`to_bytes`)."""
    dtype = tf.as_dtype(dtype)
    if dtype == tf.bool:
        return tf.reshape(tf.cast(chunk, tf.bool), shape)
    if dtype == tf.uint8:
        return tf.reshape(chunk, shape)
    if dtype.size == 1:
        return tf.reshape(tf.bitcast(chunk, dtype), shape)
    return tf.reshape(tf.bitcast(tf.reshape(chunk, [-1, dtype.size]), dtype), shape)


class Layout:
    """The parts of one message, in order: the row counts, the fixed-size parts, then each part of rows as
    its indices (int64) and its values."""

    def __init__(self, parts: list[Part]) -> None:
        self.parts = parts
        self.fixed = [part for part in parts if not part.rows]
        self.rows = [part for part in parts if part.rows]
        self.fixed_bytes = sum(part.item_bytes for part in self.fixed)

    @property
    def names(self) -> list[str]:
        return [part.name for part in self.parts]

    def pack(self, values: dict[str, Any]) -> Any:
        """One uint8 tensor of ``values`` (by part name; an ``IndexedSlices`` for each part of rows)."""
        chunks = []
        if self.rows:
            counts = [tf.shape(values[part.name].indices, out_type=ROW_INDEX_DTYPE)[0] for part in self.rows]
            chunks.append(to_bytes(tf.stack(counts)))
        chunks += [to_bytes(tf.cast(values[part.name], part.dtype)) for part in self.fixed]
        for part in self.rows:
            rows = values[part.name]
            chunks += [to_bytes(tf.cast(rows.indices, ROW_INDEX_DTYPE)), to_bytes(tf.cast(rows.values, part.dtype))]
        if not chunks:
            return tf.zeros([0], tf.uint8)
        return tf.concat(chunks, 0) if len(chunks) > 1 else chunks[0]

    def unpack(self, message: Any) -> dict[str, Any]:
        """The values :meth:`pack` packed into ``message``, by part name."""
        out: dict[str, Any] = {}
        offset = 0
        counts = None
        if self.rows:
            width = len(self.rows) * ROW_INDEX_DTYPE.size
            counts = from_bytes(message[:width], ROW_INDEX_DTYPE, [len(self.rows)])
            offset = width
        for part in self.fixed:
            out[part.name] = from_bytes(message[offset : offset + part.item_bytes], part.dtype, part.shape)
            offset += part.item_bytes
        if counts is None:
            return out
        at = tf.constant(offset, tf.int64)
        for index, part in enumerate(self.rows):
            count = counts[index]
            end = at + count * ROW_INDEX_DTYPE.size
            indices = from_bytes(message[at:end], ROW_INDEX_DTYPE, [-1])
            at, end = end, end + count * part.item_bytes
            values = from_bytes(message[at:end], part.dtype, [-1, *part.shape])
            at = end
            out[part.name] = tf.IndexedSlices(values, indices)
        return out
