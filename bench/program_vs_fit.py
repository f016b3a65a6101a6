"""ttj with one worker and one PS vs plain ``model.fit`` in one process: the same program, model and batches.

Run from the repository root (each round ~1 min; rounds alternate ttj, fit, ttj, fit ...):

    .venv/bin/python bench/program_vs_fit.py [--rounds 4] [--window 20] [--batch-size 32]

ttj: real trainer processes (``python -m ttj_trainer``, a PS and worker 0) with the Lease served by the HTTP
double of tests/trainer, training ``bench.user_program:program`` (the small CNN, SGD with momentum); its
rate is the global step published by the chief over the window. fit: a child process runs ``model.fit`` of
the same program on the same batches. ttj runs with its exchange over the PS's wire (the default) and through
TensorFlow's call (``TTJ_WIRE=0``). All run twice a round: with the trainer's thread settings (intra 1,
inter 2 on ≤ 4 CPUs) and with TensorFlow's defaults (``TTJ_INTRA_OP_THREADS=0``, ``TTJ_INTER_OP_THREADS=0``).
Then, where a ttj step's time goes: one worker against a real PS, timed per part (the step on local
variables; the same step against the PS, exact and with the exchange overlapped, over the wire and through
TensorFlow's call; its computation and its exchange alone, both ways; the PS's own part of an exchange; one
RPC round trip; reading every variable) with the bytes the step moves (kernel counters of the worker–PS
connections), and the exchange's floor: the same bytes sent and answered over a plain loopback socket in
the same process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.trainer.lease_double import LeaseDouble
from tests.trainer.processes import TrainerJob, free_port, wait_for

from ttj_contract import lease_name

ROOT = Path(__file__).resolve().parents[1]
ENTRYPOINT = "bench.user_program:program"
STARTUP = 240.0
THREADS = {"intra": 1, "inter": 2}
#: The trainer's thread settings, and TensorFlow's own (every core), for both sides alike.
THREADINGS = ("trainer", "default")
#: A step's exchange over the PS's wire (the trainer's default), and through TensorFlow's call.
TRANSPORTS = ("wire", "tensorflow")
WHO = (*(f"ttj-{transport}" for transport in TRANSPORTS), "fit")


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def child_env() -> dict[str, str]:
    return dict(os.environ) | {"PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}


def ttj_rate(workdir: Path, args: argparse.Namespace, threads: str, workers: int = 1, transport: str = "wire") -> float:
    """Global steps per second of a ttj job (PS + ``workers`` workers) over the window, after warm-up.
    ``threads``: "trainer" (its own settings: intra 1, inter 2 on ≤ 4 CPUs) or "default" (TensorFlow's);
    ``transport``: the exchange over the PS's "wire" (the trainer's default) or "tensorflow"'s call."""
    knobs = {} if threads == "trainer" else {"TTJ_INTRA_OP_THREADS": "0", "TTJ_INTER_OP_THREADS": "0"}
    if transport == "tensorflow":
        knobs["TTJ_WIRE"] = "0"
    workdir.mkdir()
    with LeaseDouble("default", lease_name("job"), holder="job-worker-0") as lease:
        job = TrainerJob(
            workdir,
            lease.write_kubeconfig(workdir / "kubeconfig"),
            slots=workers,
            TTJ_MODEL="",
            TTJ_DATASET="",
            TTJ_PROGRAM=ENTRYPOINT,
            PYTHONPATH=str(ROOT),
            TTJ_BATCH_SIZE=str(args.batch_size),
            TTJ_CHECKPOINT_INTERVAL_STEPS="0",
            TTJ_LEASE_POLL_SECONDS="0.2",
            **knobs,
        )
        try:
            job.start("ps", 0)
            for slot in range(workers):
                job.start("worker", slot)
            wait_for(lambda: (p := lease.progress()) and p.global_step >= 30, STARTUP, "warm-up", interval=0.5)
            time.sleep(args.warmup)
            first = lease.progress()
            start = time.monotonic()
            time.sleep(args.window)
            last = lease.progress()
            assert first is not None
            assert last is not None
            return (last.global_step - first.global_step) / (time.monotonic() - start)
        finally:
            job.stop_all()


def fit_rate(args: argparse.Namespace, threads: str) -> float:
    """``threads``: "trainer" (the trainer's settings) or "default" (TensorFlow's own: every core)."""
    command = [sys.executable, __file__, "--fit-child", threads, f"--batch-size={args.batch_size}"]
    command += [f"--warmup={args.warmup}", f"--window={args.window}"]
    out = subprocess.run(command, env=child_env(), capture_output=True, text=True, timeout=600, check=True).stdout
    return float(json.loads(out.strip().splitlines()[-1])["steps_per_second"])


def fit_child(threads: str, args: argparse.Namespace) -> None:
    """``model.fit`` of the program for warm-up + window seconds; prints the rate over the window."""
    import keras
    import tensorflow as tf

    from ttj_trainer import program

    if threads == "trainer":
        tf.config.threading.set_intra_op_parallelism_threads(THREADS["intra"])
        tf.config.threading.set_inter_op_parallelism_threads(THREADS["inter"])
    keras.utils.set_random_seed(0)
    p = program.load(ENTRYPOINT, {})
    p.model.compile(optimizer=p.optimizer, loss=p.loss, jit_compile=False)
    ends: list[float] = []

    class Clock(keras.callbacks.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            ends.append(time.monotonic())
            if ends[-1] - ends[0] > args.warmup + args.window + 5:
                self.model.stop_training = True

    p.model.fit(
        p.train_input(program.InputContext(0, 1, args.batch_size, 0)),
        steps_per_epoch=10**6,
        verbose=0,
        callbacks=[Clock()],
    )
    # The first step traces; the warm-up is as long as ttj's after its first 30 steps.
    start = next(i for i, t in enumerate(ends) if t >= ends[0] + args.warmup)
    window = [t for t in ends[start:] if t <= ends[start] + args.window]
    print(json.dumps({"steps_per_second": (len(window) - 1) / (window[-1] - window[0])}))


def exchange_times(store: Any, wire: Any, weights: Any, batches: list[Any], count: int) -> list[float]:
    """ms of the exchange alone (over ``wire``, or TensorFlow's call when None), each on the gradients of a
    step computed (untimed) just before: a message sent again would not be sent again (TensorFlow keeps a
    copy of a tensor where it once sent it)."""
    import tensorflow as tf

    functions = store._step_functions()
    scale = tf.constant(1.0, tf.float32)
    times = []
    for i in range(count):
        messages, _, loss = functions.call_compute(weights, functions.no_changes, *batches[i % len(batches)], scale)
        loss.numpy()
        started = time.perf_counter()
        weights, _ = store._exchange_over(wire, functions, messages)
        times.append((time.perf_counter() - started) * 1000)
    return times[3:]


def ps_part_of_wire_exchange_ms(store: Any, messages: list[Any], count: int) -> float:
    """The PS's own part of an exchange over the wire, timed here: the resident function the PS runs (the
    update, the weights packed) on this process's copies of the PS's variables, with the message taken as a
    tensor and the answer's bytes as the PS does; median ms of ``count``. The exchange less this is the
    transport's."""
    import numpy as np
    import tensorflow as tf

    from ttj_trainer import wire
    from ttj_trainer.parameters import open_shared

    values = store.read_all()
    with tf.device(store.local_device):
        for slot in store.slots:
            value = values.get(slot.name, np.zeros(slot.shape, slot.dtype.as_numpy_dtype))
            tf.raw_ops.AssignVariableOp(resource=open_shared(slot), value=tf.constant(value, slot.dtype))
    function = wire.load(tf, store._step_functions().resident_exchange())
    payload = messages[0].numpy()
    times = []
    for _ in range(count + 3):
        started = time.perf_counter()
        message = wire.as_tensor(tf, payload)
        wire.as_array(tf, function._call_flat([message], function.captured_inputs))
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times[3:])


def socket_exchange_ms(up: int, down: int, count: int = 40) -> float:
    """The floor of one exchange on this machine: ``up`` bytes sent and ``down`` bytes answered over a plain
    loopback TCP connection (one round trip and the bytes at loopback speed), median ms of ``count``."""
    import socket
    import threading

    def read_exactly(connection: socket.socket, size: int, buffer: bytearray) -> None:
        view, got = memoryview(buffer), 0
        while got < size:
            got += connection.recv_into(view[got:size])

    listener = socket.create_server(("127.0.0.1", 0))
    answer = bytes(down)

    def serve() -> None:
        connection, _ = listener.accept()
        buffer = bytearray(max(up, 1))
        with connection:
            for _ in range(count):
                read_exactly(connection, up, buffer)
                connection.sendall(answer)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    request, buffer, times = bytes(up), bytearray(max(down, 1)), []
    with socket.create_connection(listener.getsockname()) as client:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(count):
            started = time.perf_counter()
            client.sendall(request)
            read_exactly(client, down, buffer)
            times.append((time.perf_counter() - started) * 1000)
    server.join()
    listener.close()
    return statistics.median(times[3:])


def cpu_seconds(pid: int | str = "self") -> float:
    """CPU seconds (user + system) the process ``pid`` has used so far, all its threads (NaN once it is gone:
    a PS that failed to start is started again under another pid)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ps_update_alone(store: Any, functions: Any, messages: list[Any]) -> Any:
    """A function that runs on the PS what one exchange runs there (unpack the gradients, the optimizer's
    update, pack the weights) on a message already on the PS, and answers only the global step: its time
    less a call that only reads the global step is the PS's own compute in an exchange."""
    import tensorflow as tf

    from ttj_trainer.packing import from_bytes
    from ttj_trainer.variables import GLOBAL_STEP

    device = store.ps_device_of(0)
    with tf.device(device):
        resident = [tf.identity(message) for message in messages]

    def update() -> Any:
        functions._update(resident)
        with tf.device(device):
            return from_bytes(functions._packed()[0][-8:], tf.int64, [])

    def read() -> Any:
        with tf.device(device):
            return tf.raw_ops.ReadVariableOp(resource=store.handles[GLOBAL_STEP], dtype=tf.int64)

    return tf.function(update, autograph=False), tf.function(read, autograph=False)


def profile(workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    workdir.mkdir()
    job = TrainerJob(workdir, workdir / "unused-kubeconfig", slots=1)
    ps = job.start("ps", 0)
    try:
        command = [sys.executable, __file__, "--profile-child", job.ps_addresses[0], f"127.0.0.7:{free_port()}"]
        command += [f"--batch-size={args.batch_size}", f"--ps-pid={ps.pid}"]
        out = subprocess.run(command, env=child_env(), capture_output=True, text=True, timeout=600, check=False)
        if out.returncode:
            raise RuntimeError(out.stderr[-3000:])
        result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
        return result
    finally:
        job.stop_all()


def profile_child(ps: str, own: str, args: argparse.Namespace) -> None:
    """As a worker does, against the PS at ``ps``: each part of a step timed on its own (median ms)."""
    import keras
    import tensorflow as tf
    from tests.trainer.program_probe import socket_bytes

    from ttj_trainer import devices, program
    from ttj_trainer.parameters import ParameterStore

    tf.config.threading.set_intra_op_parallelism_threads(THREADS["intra"])
    tf.config.threading.set_inter_op_parallelism_threads(THREADS["inter"])
    tf.config.experimental_connect_to_cluster(
        tf.train.ClusterSpec({"ps": [ps], "worker": {0: own}}), job_name="worker", task_index=0, protocol="grpc"
    )
    keras.utils.set_random_seed(0)
    p = program.load(ENTRYPOINT, {})
    prepared = program.prepare(ENTRYPOINT, p, program.InputContext(0, 1, args.batch_size, 0))
    batches = [prepared.first, *(next(prepared.batches) for _ in range(9))]
    local = devices.worker_cpu(0)
    n = 60
    #: CPU ms per call of each part, of this process and of the PS (the machine's 2 cores are what both share).
    cpu: dict[str, list[float]] = {}

    def timed(action: Any, count: int = n, name: str = "") -> list[float]:
        times = []
        for i in range(count):
            if i == 5:
                own, theirs = cpu_seconds(), cpu_seconds(args.ps_pid)
            started = time.perf_counter()
            action(i)
            times.append((time.perf_counter() - started) * 1000)
        if name:
            calls = count - 5
            cpu[name] = [
                round((cpu_seconds() - own) / calls * 1000, 2),
                round((cpu_seconds(args.ps_pid) - theirs) / calls * 1000, 2),
            ]
        return times[5:]  # the first calls trace

    # The step on this process's own variables (what model.fit runs, in the trainer's step function).
    @tf.function
    def local_step(features: Any, labels: Any) -> Any:
        with tf.device(local):
            return prepared.step(p.model, p.optimizer, features, labels)

    on_local = timed(lambda i: float(local_step(*batches[i % 10]).numpy()), 200, "step_local")
    host = ps.rsplit(":", 1)[0]
    store = ParameterStore.of(
        prepared, ps_count=1, worker_slots=1, local_device=local, overlap=False, wire_hosts=[host]
    )
    store.open()
    store.assign_all(store.initial_values())
    ps_ports, own_port = [ps.rsplit(":", 1)[1], str(store.wire_port())], own.rsplit(":", 1)[1]
    moved: list[int] = []

    def counted_step(i: int) -> None:
        before = socket_bytes(ps_ports, own_port)
        store.train_step(*batches[i % 10], 1.0)
        moved.append(socket_bytes(ps_ports, own_port) - before)

    timed(counted_step, 20)
    steps: dict[str, list[float]] = {}
    # each side twice, alternating: the wire, then TensorFlow's call (the wire dropped and turned off)
    for transport in ("wire", "tensorflow", "wire", "tensorflow"):
        store.flush()
        store.wire_hosts = (host,) if transport == "wire" else ()
        store.reset_transport()
        store.overlap = False
        steps.setdefault(f"exact_{transport}", []).extend(
            timed(lambda i: store.train_step(*batches[i % 10], 1.0), 200, f"step_exact_{transport}")
        )
        store.overlap = True
        steps.setdefault(f"overlap_{transport}", []).extend(
            timed(lambda i: store.train_step(*batches[i % 10], 1.0), 200, f"step_overlap_{transport}")
        )
    store.flush()
    store.wire_hosts = (host,)
    store.reset_transport()
    store.train_step(*batches[0], 1.0)
    store.flush()
    functions = store._step_functions()
    weights, _ = functions.pull()
    scale = tf.constant(1.0, tf.float32)
    messages, _, _ = functions.call_compute(weights, functions.no_changes, *batches[0], scale)
    compute = timed(
        lambda i: functions.call_compute(weights, functions.no_changes, *batches[i % 10], scale)[2].numpy(),
        200,
        "compute",
    )
    exchange = exchange_times(store, None, weights, batches, n)
    exchange_wire = exchange_times(store, store._wire, weights, batches, n)
    update, read = ps_update_alone(store, functions, messages)
    ps_update = timed(lambda _i: update().numpy(), name="ps_update_on_resident_message")
    ps_call = timed(lambda _i: read().numpy(), name="ps_call_reading_the_global_step")
    ps_compute = max(0.0, statistics.median(ps_update) - statistics.median(ps_call))
    pull = timed(lambda _i: functions.pull()[1].numpy())
    round_trip = timed(lambda _i: store.global_step())
    read_all = timed(lambda _i: store.read_all(), 20)
    parameters = int(sum(v.numpy().size for v in p.model.trainable_variables))
    state_bytes = sum(v.nbytes for v in store.read_all().values())
    up = sum(int(m.shape[0]) for m in messages)
    down = sum(int(m.shape[0]) for m in weights)
    floor = socket_exchange_ms(up, down)
    ps_part = ps_part_of_wire_exchange_ms(store, messages, n)
    # Through TensorFlow's call the design needs one of its round trips per PS per step, plus the bytes; over
    # the wire one plain round trip with the bytes, which is the floor itself.
    round_trip_floor = statistics.median(round_trip) + floor
    print(
        json.dumps(
            {
                "step_local_ms": statistics.median(on_local),
                **{f"step_against_ps_{name}_ms": statistics.median(times) for name, times in steps.items()},
                "compute_ms": statistics.median(compute),
                "exchange_wire_ms": statistics.median(exchange_wire),
                "exchange_wire_over_floor": statistics.median(exchange_wire) / floor,
                "ps_part_of_wire_exchange_ms": ps_part,
                "exchange_wire_less_ps_part_over_floor": (statistics.median(exchange_wire) - ps_part) / floor,
                "exchange_ms": statistics.median(exchange),
                "pull_ms": statistics.median(pull),
                "exchange_floor_ms": floor,
                "exchange_over_floor": statistics.median(exchange) / floor,
                "exchange_over_floor_with_one_rpc": statistics.median(exchange) / round_trip_floor,
                "ps_update_compute_ms": ps_compute,
                "exchange_less_ps_compute_over_floor_with_one_rpc": (statistics.median(exchange) - ps_compute)
                / round_trip_floor,
                "cpu_ms_per_call_worker_ps": cpu,
                "round_trip_ms": statistics.median(round_trip),
                "read_all_variables_ms": statistics.median(read_all),
                "bytes_per_step": statistics.median(moved[5:]),
                "exchange_floor_with_one_rpc_ms": round_trip_floor,
                "message_bytes_up_down": [up, down],
                "state_bytes": state_bytes,
                "parameters": parameters,
                "variables": len(prepared.shared),
            }
        )
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--fit-child", choices=["trainer", "default"], help=argparse.SUPPRESS)
    parser.add_argument("--profile-child", nargs=2, metavar=("PS", "OWN"), help=argparse.SUPPRESS)
    parser.add_argument("--ps-pid", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fit_child:
        fit_child(args.fit_child, args)
        return 0
    if args.profile_child:
        ps, own = args.profile_child
        profile_child(ps, own, args)
        return 0
    root = Path(tempfile.mkdtemp(prefix="ttj-bench-fit-"))
    rates: dict[str, list[float]] = {f"{who} {threads}": [] for threads in THREADINGS for who in WHO}
    loads = [load_average()]
    for round_ in range(args.rounds):
        for threads in THREADINGS:
            for transport in TRANSPORTS:
                workdir = root / f"ttj-{transport}-{threads}-{round_}"
                rates[f"ttj-{transport} {threads}"].append(ttj_rate(workdir, args, threads, transport=transport))
                loads.append(load_average())
            rates[f"fit {threads}"].append(fit_rate(args, threads))
            loads.append(load_average())
        print(f"round {round_ + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in rates.items()), flush=True)
    parts = profile(root / "profile", args)
    loads.append(load_average())
    print(f"batch {args.batch_size}, {args.window:.0f} s windows, load average (1/5/15 min) over the run: {loads}")
    for threads in THREADINGS:
        fit = rates[f"fit {threads}"]
        for transport in TRANSPORTS:
            ttj = rates[f"ttj-{transport} {threads}"]
            ratios = [t / f for t, f in zip(ttj, fit, strict=True)]
            print(
                f"{threads} threads, exchange over {transport}: ttj 1 worker + 1 PS {[round(r, 1) for r in ttj]} "
                f"steps/s, model.fit in one process {[round(r, 1) for r in fit]} steps/s; ratio ttj / fit per round "
                f"{[round(r, 2) for r in ratios]}, median {statistics.median(ratios) if ratios else float('nan'):.2f}"
                " (goal >= 0.85)"
            )
    print(f"where a ttj step's time goes: {json.dumps(parts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
