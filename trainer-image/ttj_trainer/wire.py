"""A step's exchange with a parameter server over a plain TCP stream: one frame each way per step.

TensorFlow's cross-process function call costs about 2 ms of CPU on each side per call, whatever it carries
(measured: a call that only reads the global step costs as much as the exchange), which on a fast device sets
a worker's pace. Here the exchange is a function *resident* on the PS: the worker traces it once (its
variables opened by name inside it, so it captures nothing of the worker), sends its graph when it connects,
and then each step sends its packed gradients as one frame and reads the packed weights back as one frame;
the PS runs the function in its own TensorFlow context, on the same named variables the workers open.

Everything else between a worker and the PS (reads, checkpoints, restores, heartbeats) still goes through
TensorFlow. A frame is a header (its kind, one byte; its length, eight) and its body. The PS answers a frame
it cannot run with an ``ERROR`` frame carrying TensorFlow's error code, so the worker raises the same
``OpError`` the TensorFlow call would have (a PS that lost its state says ``FailedPrecondition``); a broken
or silent stream raises ``UnavailableError``: both are how a worker learns it lost its PS.

Where the PS listens is a named variable on the PS (:data:`PORT_VARIABLE`): a PS whose preferred port is
taken (pods sharing one network namespace) listens on another and says so there.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import struct
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from ttj_trainer.logs import event

log = logging.getLogger("ttj_trainer.wire")

#: The named variable (int64) holding the port a PS's wire listens on.
PORT_VARIABLE = "ttj:ttj/wire-port"
#: How long a worker waits for the PS's answer to one frame before it counts the PS as lost. A step's update
#: takes milliseconds; the first frame (the function's graph, loaded on the PS) takes up to seconds.
ANSWER_TIMEOUT_SECONDS = 60.0
#: How long a worker tries to reach a PS's wire: one that cannot (a NetworkPolicy without the wire's port, made
#: for an older ttj) exchanges through TensorFlow's call instead.
CONNECT_TIMEOUT_SECONDS = 5.0
#: TCP keepalive: a PS whose node vanished without closing the stream is noticed in about 10 s.
KEEPALIVE = {"TCP_KEEPIDLE": 4, "TCP_KEEPINTVL": 2, "TCP_KEEPCNT": 3}

HEADER = struct.Struct("!BQ")
#: Frame kinds. FUNCTION (worker → PS): the resident function; READY (PS → worker): it is loaded;
#: STEP: packed gradients (worker → PS), packed weights (PS → worker); ERROR (PS → worker): code and message.
FUNCTION, READY, STEP, ERROR = 1, 2, 3, 4
#: An ERROR frame's TensorFlow error code, and a FUNCTION frame's length of its names.
U32 = struct.Struct("!I")
#: TensorFlow's error code (tensorflow/core/protobuf/error_codes.proto) for what the PS cannot say better.
UNKNOWN = 2


def port_handle(tf: Any) -> Any:
    """A handle on :data:`PORT_VARIABLE` (on the device in scope)."""
    return tf.raw_ops.VarHandleOp(dtype=tf.int64, shape=[], container="", shared_name=PORT_VARIABLE)


class WireClosedError(ConnectionError):
    """The stream ended between frames or inside one."""


#: Where a frame's body starts in memory: TensorFlow takes a buffer this aligned as a tensor without copying it.
ALIGNMENT = 64


def _empty(size: int) -> np.ndarray:
    """An aligned buffer of ``size`` bytes, not zero-filled first (a bytearray is: 50-100 ms for 100 MB here)."""
    raw = np.empty(size + ALIGNMENT, np.uint8)
    offset = -raw.ctypes.data % ALIGNMENT
    return raw[offset : offset + size]


class _DLPack:
    """A DLPack capsule of a host tensor, as numpy's ``from_dlpack`` takes one."""

    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule

    def __dlpack__(self, **_: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # DLPack's CPU


def as_array(tf: Any, tensor: Any) -> np.ndarray:
    """A read-only view of a host tensor's bytes (``.numpy()`` copies them: 33 ms for 100 MB here)."""
    try:
        return np.from_dlpack(_DLPack(tf.experimental.dlpack.to_dlpack(tensor)))
    except (BufferError, RuntimeError, TypeError, ValueError):
        return np.asarray(tensor.numpy())


def as_tensor(tf: Any, array: np.ndarray) -> Any:
    """A uint8 tensor on a received frame's bytes, without copying them (the tensor keeps the buffer); a copy
    for bytes that are not aligned (TensorFlow's kernels require it of a tensor's memory)."""
    if array.ctypes.data % ALIGNMENT:
        return tf.constant(array)
    return tf.experimental.dlpack.from_dlpack(array.__dlpack__())


def _receive_exactly(sock: socket.socket, size: int) -> np.ndarray:
    buffer = _empty(size)
    view = memoryview(buffer)
    received = 0
    while received < size:
        count = sock.recv_into(view[received:], size - received)
        if count == 0:
            raise WireClosedError(f"the stream ended after {received} of {size} bytes")
        received += count
    return buffer


def receive_frame(sock: socket.socket) -> tuple[int, np.ndarray]:
    kind, size = HEADER.unpack(_receive_exactly(sock, HEADER.size))
    return kind, _receive_exactly(sock, size)


def send_frame(sock: socket.socket, kind: int, *parts: Any) -> None:
    """One frame of ``kind`` whose body is ``parts`` (bytes-like) one after the other, never joined in a copy."""
    views = [memoryview(part).cast("B") for part in parts]
    total = sum(len(view) for view in views)
    pieces = [memoryview(HEADER.pack(kind, total)), *views]
    while pieces:
        sent = sock.sendmsg(pieces)
        while pieces and sent >= len(pieces[0]):
            sent -= len(pieces[0])
            pieces.pop(0)
        if pieces and sent:
            pieces[0] = pieces[0][sent:]


def _tune(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in KEEPALIVE.items():
        if hasattr(socket, name):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


@dataclass(frozen=True)
class ResidentFunction:
    """A traced function of one uint8 message to one uint8 message, as the PS receives it: its graph and the
    names of its input and output tensors."""

    graph: bytes
    input_name: str
    output_name: str

    def encode(self) -> list[bytes]:
        names = json.dumps({"input": self.input_name, "output": self.output_name}).encode()
        return [U32.pack(len(names)), names, self.graph]

    @classmethod
    def decode(cls, body: Any) -> ResidentFunction:
        (length,) = U32.unpack_from(body)
        names = json.loads(bytes(body[U32.size : U32.size + length]))
        return cls(bytes(body[U32.size + length :]), names["input"], names["output"])


def load(tf: Any, function: ResidentFunction) -> Any:
    """The PS's callable of ``function``: its graph imported with every device left to the PS (the worker's
    trace names none; the PS has one CPU), pruned to its input and output."""
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(function.graph)
    for node in graph_def.node:
        node.device = ""
    for library_function in graph_def.library.function:
        for node in library_function.node_def:
            node.device = ""
    wrapped = tf.compat.v1.wrap_function(lambda: tf.compat.v1.import_graph_def(graph_def, name=""), [])
    graph = wrapped.graph
    return wrapped.prune(
        feeds=[graph.get_tensor_by_name(function.input_name)], fetches=graph.get_tensor_by_name(function.output_name)
    )


class WireServer:
    """The PS's side: one thread per connected worker, each running that worker's resident function on the
    frames it sends."""

    def __init__(self, tf: Any, host: str, preferred_port: int) -> None:
        self.tf = tf
        self.listener = _listen(host, preferred_port)
        self.port = int(self.listener.getsockname()[1])
        self._stopped = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._accept, name="ttj-wire-accept", daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError):
            self.listener.close()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, peer = self.listener.accept()
            except OSError:
                return
            _tune(conn)
            threading.Thread(target=self._serve, args=(conn, peer), name="ttj-wire", daemon=True).start()

    def _serve(self, conn: socket.socket, peer: Any) -> None:
        tf = self.tf
        function: Any = None
        with conn:
            while True:
                try:
                    kind, body = receive_frame(conn)
                except OSError:  # a WireClosedError too
                    return
                try:
                    if kind == FUNCTION:
                        function = load(tf, ResidentFunction.decode(body))
                        event(log, "exchange function loaded", peer=f"{peer[0]}:{peer[1]}", bytes=len(body))
                        send_frame(conn, READY)
                    elif kind == STEP and function is not None:
                        message = as_tensor(tf, body)
                        # on its flat inputs: the function's own call binds and checks its arguments in Python
                        answer = as_array(tf, function._call_flat([message], function.captured_inputs))
                        send_frame(conn, STEP, answer)
                    else:
                        _send_error(
                            conn, UNKNOWN, f"unexpected frame kind {kind} (function loaded: {function is not None})"
                        )
                except tf.errors.OpError as err:
                    _send_error(conn, err.error_code, err.message)
                except OSError:
                    return
                except Exception as err:
                    _send_error(conn, UNKNOWN, f"{type(err).__name__}: {err}")


def _send_error(conn: socket.socket, code: int, message: str) -> None:
    with contextlib.suppress(OSError):
        send_frame(conn, ERROR, U32.pack(code), message.encode())


def _listen(host: str, preferred_port: int) -> socket.socket:
    """A listening socket on ``preferred_port``, or on any free port when that one is taken."""
    for port in (preferred_port, 0):
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.bind((host, port))
        except OSError:
            listener.close()
            continue
        listener.listen(64)
        return listener
    raise OSError(f"cannot listen on {host}")


def error_of(code: int) -> Any:
    """TensorFlow's ``OpError`` class of an error code (``UnknownError`` for a code it does not know)."""
    from tensorflow.python.framework import errors

    return errors.exception_type_from_error_code(code)


class WireClient:
    """A worker's side, to one PS: sends the resident function, then one frame each way per step."""

    def __init__(self, tf: Any, host: str, port: int) -> None:
        self.tf = tf
        self.address = f"{host}:{port}"
        self.installed: Any = None  # what the PS runs (a key the caller chooses)
        try:
            self.sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_SECONDS)
        except OSError as err:
            raise self._lost(err) from err
        self.sock.settimeout(ANSWER_TIMEOUT_SECONDS)
        _tune(self.sock)

    def install(self, key: Any, function: ResidentFunction) -> None:
        self._ask(FUNCTION, *function.encode())
        self.installed = key

    def exchange(self, message: Any) -> np.ndarray:
        """The PS's answer to one step's packed gradients (a bytes-like ``message``): its packed weights."""
        return self._ask(STEP, message)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def _ask(self, kind: int, *parts: Any) -> np.ndarray:
        try:
            send_frame(self.sock, kind, *parts)
            answer, body = receive_frame(self.sock)
        except OSError as err:  # a WireClosedError too
            raise self._lost(err) from err
        if answer == ERROR:
            (code,) = U32.unpack_from(body)
            text = bytes(body[U32.size :]).decode(errors="replace")
            raise error_of(code)(None, None, f"parameter server {self.address}: {text}")
        return body

    def _lost(self, err: BaseException) -> Exception:
        error: Exception = self.tf.errors.UnavailableError(
            None, None, f"parameter server {self.address}: the exchange's stream failed ({type(err).__name__}: {err})"
        )
        return error
