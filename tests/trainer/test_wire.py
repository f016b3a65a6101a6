"""The exchange's wire: frames over a real socket, a resident function run on named variables of the serving
process's own TensorFlow context, and every failure a worker can meet raised as TensorFlow's ``OpError``."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from ttj_trainer import wire

pytestmark = pytest.mark.tensorflow


def test_frames_carry_their_parts_whole_and_in_order_however_large() -> None:
    left, right = socket.socketpair()
    large = np.arange(3_000_000, dtype=np.uint8)  # more than one send of the kernel's buffers
    received: list[tuple[int, bytearray]] = []
    reader = threading.Thread(target=lambda: received.extend(wire.receive_frame(right) for _ in range(3)))
    reader.start()
    with left, right:
        wire.send_frame(left, wire.STEP, b"head", large, bytearray(b"tail"))
        wire.send_frame(left, wire.READY)
        wire.send_frame(left, wire.ERROR, np.array([7], np.uint8))
        reader.join(timeout=30)
    assert [kind for kind, _ in received] == [wire.STEP, wire.READY, wire.ERROR]
    assert bytes(received[0][1]) == b"head" + large.tobytes() + b"tail"
    assert [bytes(body) for _, body in received[1:]] == [b"", b"\x07"]


def test_a_stream_that_ends_inside_a_frame_is_said_so() -> None:
    left, right = socket.socketpair()
    with right:
        left.sendall(wire.HEADER.pack(wire.STEP, 10) + b"12345")
        left.close()
        with pytest.raises(wire.WireClosedError, match="after 5 of 10 bytes"):
            wire.receive_frame(right)


def test_a_resident_function_travels_as_its_graph_and_names() -> None:
    function = wire.ResidentFunction(b"\x00graph\xff", "message:0", "Identity:0")
    body = bytearray(b"".join(function.encode()))
    assert wire.ResidentFunction.decode(body) == function


@pytest.fixture
def served() -> Iterator[tuple[Any, wire.WireServer]]:
    """A wire server in this process, and a named variable ``ttj:counter`` of this process's context that
    functions sent to it open by name."""
    import tensorflow as tf

    handle = tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[4], container="", shared_name="ttj:counter")
    tf.raw_ops.AssignVariableOp(resource=handle, value=tf.zeros([4]))
    server = wire.WireServer(tf, "127.0.0.1", 0)
    server.start()
    try:
        yield tf, server
    finally:
        server.stop()
        tf.raw_ops.DestroyResourceOp(resource=handle)


def resident(tf: Any, body: Any) -> wire.ResidentFunction:
    traced = tf.function(body, autograph=False).get_concrete_function(tf.TensorSpec([None], tf.uint8))
    assert not traced.captured_inputs
    return wire.ResidentFunction(
        traced.graph.as_graph_def().SerializeToString(), traced.inputs[0].name, traced.outputs[0].name
    )


def adds_to_the_counter(tf: Any) -> wire.ResidentFunction:
    """The message as 4 floats added to ``ttj:counter``; the counter's new value back as bytes."""

    def body(message: Any) -> Any:
        handle = tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[4], container="", shared_name="ttj:counter")
        added = tf.raw_ops.AssignAddVariableOp(
            resource=handle, value=tf.bitcast(tf.reshape(message, [4, 4]), tf.float32)
        )
        with tf.control_dependencies([added]):
            value = tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.float32)
        return tf.reshape(tf.bitcast(value, tf.uint8), [-1])

    return resident(tf, body)


def test_a_step_runs_the_workers_function_on_the_named_variables_of_the_server(served: Any) -> None:
    tf, server = served
    client = wire.WireClient(tf, "127.0.0.1", server.port)
    try:
        client.install("v1", adds_to_the_counter(tf))
        assert client.installed == "v1"
        step = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
        answers = [np.frombuffer(client.exchange(step.view(np.uint8)), np.float32) for _ in range(3)]
    finally:
        client.close()
    np.testing.assert_array_equal(answers, [step, 2 * step, 3 * step])
    handle = tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[4], container="", shared_name="ttj:counter")
    np.testing.assert_array_equal(tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.float32).numpy(), 3 * step)


def test_the_servers_error_is_the_workers_op_error_and_the_stream_goes_on(served: Any) -> None:
    """A variable the PS does not hold (a PS that lost its state): FailedPrecondition or NotFound, as
    TensorFlow's call would raise, naming the PS; the same connection then serves a good function."""
    tf, server = served

    def reads_a_missing_variable(message: Any) -> Any:
        handle = tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[4], container="", shared_name="ttj:missing")
        value = tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.float32)
        return tf.concat([message, tf.reshape(tf.bitcast(value, tf.uint8), [-1])], 0)

    client = wire.WireClient(tf, "127.0.0.1", server.port)
    try:
        client.install(1, resident(tf, reads_a_missing_variable))
        with pytest.raises((tf.errors.FailedPreconditionError, tf.errors.NotFoundError)) as raised:
            client.exchange(np.zeros(16, np.uint8))
        assert f"parameter server 127.0.0.1:{server.port}" in str(raised.value)
        client.install(2, adds_to_the_counter(tf))
        assert np.frombuffer(client.exchange(np.zeros(16, np.uint8)), np.float32).shape == (4,)
    finally:
        client.close()


def test_a_step_before_any_function_is_refused_as_unknown(served: Any) -> None:
    tf, server = served
    client = wire.WireClient(tf, "127.0.0.1", server.port)
    try:
        with pytest.raises(tf.errors.UnknownError, match="unexpected frame kind 3"):
            client.exchange(np.zeros(4, np.uint8))
    finally:
        client.close()


def test_a_lost_or_absent_server_is_unavailable(served: Any) -> None:
    tf, server = served
    client = wire.WireClient(tf, "127.0.0.1", server.port)
    client.install(1, adds_to_the_counter(tf))
    client.sock.shutdown(socket.SHUT_RDWR)  # the stream breaks under the worker (its PS's node went away)
    with pytest.raises(tf.errors.UnavailableError, match="the exchange's stream failed"):
        client.exchange(np.zeros(16, np.uint8))
    client.close()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        nobody = probe.getsockname()[1]
    with pytest.raises(tf.errors.UnavailableError, match=f"127.0.0.1:{nobody}"):
        wire.WireClient(tf, "127.0.0.1", nobody)


def test_a_taken_preferred_port_gives_another() -> None:
    import tensorflow as tf

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        server = wire.WireServer(tf, "127.0.0.1", port)
        try:
            assert server.port not in (port, 0)
        finally:
            server.stop()
