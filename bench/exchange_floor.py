"""A step's exchange with the parameter server where the compute is negligible: how close to the wire it runs.

Run from the repository root:

    .venv/bin/python bench/exchange_floor.py dense [--steps 30]    # ~25 M parameters, ResNet-50's size
    .venv/bin/python bench/exchange_floor.py sparse [--steps 30]   # a 10 M-row table looked up by row

dense: 25 Dense layers of 1000 x 1000 (25.0 M parameters, 100 MB of float32, 50 variables) on batches of 4,
SGD with momentum, so a step's computation is small beside moving 100 MB each way. One worker process
against a real PS process (``python -m ttj_trainer``): the exchange alone (the gradients to the PS, the
update there, the weights back), over the PS's wire and through TensorFlow's call, the step exact and
overlapped both ways, the computation alone; against the floor, the same bytes sent and answered over a plain
loopback socket in the same process. Then TensorFlow's ``ParameterServerStrategy`` with one worker and the
same PS-side thread settings trains the same model (the tutorial's ``ClusterCoordinator`` loop, 1 worker +
1 PS, steps scheduled and joined in chunks): its time per step.

sparse: a 10 M x 16 table (640 MB, on the PS; plain SGD, whose update of a table is a scatter of its
rows) looked up by 4,096 ids per batch (skewed, so ids repeat as in click logs), averaged into a small
tower. The bytes a step moves on the
worker–PS connections (kernel counters) against the floor from the batch: each distinct id up once, its
row down once, its summed gradient row up once with its index, and the tower's weights both ways.
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

from bench.program_vs_fit import (
    child_env,
    exchange_times,
    load_average,
    ps_part_of_wire_exchange_ms,
    socket_exchange_ms,
)
from bench.ps_strategy import coordinator_strategy, coordinator_train_step
from tests.trainer.processes import TrainerJob, free_port, wait_for

from ttj_trainer.program import InputContext, Program

ROOT = Path(__file__).resolve().parents[1]
DENSE_BATCH = 4
#: The dense model's size (``--width``; its layers stay 25): in the environment, so the worker child builds the same.
WIDTH_VARIABLE = "BENCH_DENSE_WIDTH"
LAYERS, WIDTH = 25, int(os.environ.get(WIDTH_VARIABLE, "1000"))
ROWS, TABLE_WIDTH, IDS_PER_BATCH = 10_000_000, 16, 4096
INTRA, INTER = 1, 2


def dense_model() -> Any:
    import keras

    return keras.Sequential(
        [
            keras.Input((WIDTH,)),
            *(keras.layers.Dense(WIDTH, activation="relu") for _ in range(LAYERS - 1)),
            keras.layers.Dense(WIDTH),
        ]
    )


def dense_dataset(batch: int, seed: int) -> Any:
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    features = rng.standard_normal((64, WIDTH)).astype(np.float32)
    labels = rng.integers(0, WIDTH, 64).astype(np.int32)
    return tf.data.Dataset.from_tensor_slices((features, labels)).repeat().batch(batch, drop_remainder=True)


def dense_program(args: dict[str, str]) -> Program:
    import keras

    def train_input(ctx: InputContext) -> Any:
        return dense_dataset(ctx.per_worker_batch, ctx.seed)

    return Program(
        model=dense_model(),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=keras.optimizers.SGD(0.001, momentum=0.9),
        train_input=train_input,
    )


def sparse_program(args: dict[str, str]) -> Program:
    import keras
    import numpy as np
    import tensorflow as tf

    ids = keras.Input((IDS_PER_BATCH // 256,), dtype="int32")
    embedded = keras.layers.Embedding(ROWS, TABLE_WIDTH)(ids)
    pooled = keras.layers.GlobalAveragePooling1D()(embedded)
    hidden = keras.layers.Dense(64, activation="relu")(pooled)
    model = keras.Model(ids, keras.layers.Dense(1)(hidden))

    def train_input(ctx: InputContext) -> Any:
        rng = np.random.default_rng(ctx.seed)
        # Zipf-like: a few ids very often, most rarely, as in click logs.
        examples = ctx.per_worker_batch * 64
        drawn = np.minimum(rng.zipf(1.2, (examples, IDS_PER_BATCH // 256)), ROWS) - 1
        labels = rng.integers(0, 2, (examples, 1)).astype(np.float32)
        return (
            tf.data.Dataset.from_tensor_slices((drawn.astype(np.int32), labels))
            .repeat()
            .batch(ctx.per_worker_batch, drop_remainder=True)
        )

    return Program(
        model=model,
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
        # Plain SGD: its update of a table is a scatter of the rows. Keras's Adagrad and Adam take the square
        # root of (or decay) the whole accumulator every step, IndexedSlices or not: dense work over the table.
        optimizer=keras.optimizers.SGD(0.05),
        train_input=train_input,
    )


# -- ttj's side --------------------------------------------------------------------------------------------
def ttj_child(ps: str, own: str, kind: str, steps: int) -> None:
    import keras
    import numpy as np
    import tensorflow as tf
    from tests.trainer.program_probe import socket_bytes

    from ttj_trainer import devices, program
    from ttj_trainer.parameters import ParameterStore

    tf.config.threading.set_intra_op_parallelism_threads(INTRA)
    tf.config.threading.set_inter_op_parallelism_threads(INTER)
    tf.config.experimental_connect_to_cluster(
        tf.train.ClusterSpec({"ps": [ps], "worker": {0: own}}), job_name="worker", task_index=0, protocol="grpc"
    )
    keras.utils.set_random_seed(0)
    entrypoint = f"bench.exchange_floor:{kind}_program"
    batch = DENSE_BATCH if kind == "dense" else 256
    prepared = program.prepare(entrypoint, program.load(entrypoint, {}), InputContext(0, 1, batch, 0))
    host = ps.rsplit(":", 1)[0]
    store = ParameterStore.of(
        prepared, ps_count=1, worker_slots=1, local_device=devices.worker_cpu(0), overlap=False, wire_hosts=[host]
    )
    store.open()
    store.assign_all(store.initial_values())
    batches = [prepared.first, *(next(prepared.batches) for _ in range(9))]
    ps_ports, own_port = [ps.rsplit(":", 1)[1], str(store.wire_port())], own.rsplit(":", 1)[1]

    def timed(action: Any, count: int = steps) -> list[float]:
        times = []
        for i in range(count + 3):
            started = time.perf_counter()
            action(i)
            times.append((time.perf_counter() - started) * 1000)
        return times[3:]  # the first calls trace

    moved: list[int] = []

    def counted(i: int) -> None:
        before = socket_bytes(ps_ports, own_port)
        store.train_step(*batches[i % 10], 1.0)
        moved.append(socket_bytes(ps_ports, own_port) - before)

    timed(counted, 10)
    result: dict[str, Any] = {"bytes_per_step": statistics.median(moved[3:])}
    functions = store._step_functions()
    weights, _ = functions.pull()
    scale = tf.constant(1.0, tf.float32)
    messages, _, _ = functions.call_compute(weights, functions.no_changes, *batches[0], scale)
    up, down = sum(int(m.shape[0]) for m in messages), sum(int(m.shape[0]) for m in weights)
    if kind == "sparse":
        distinct = [len(np.unique(features.numpy())) for features, _ in batches]
        row = TABLE_WIDTH * 4
        tower = down - 8  # the weights message: the tower's variables and the global step
        # ids up (int32), rows down, summed gradient rows up with int64 indices; the tower both ways.
        floors = [d * (4 + row) + d * (8 + row) + 2 * tower for d in distinct]
        result |= {"floor_bytes_from_batch": statistics.median(floors), "distinct_ids": statistics.median(distinct)}
        result["ids_per_batch"] = int(np.prod(batches[0][0].shape))
    for transport in ("wire", "tensorflow"):  # the PS's wire (the default), then TensorFlow's call
        store.flush()
        store.wire_hosts = (host,) if transport == "wire" else ()
        store.reset_transport()
        store.overlap = False
        result[f"step_exact_{transport}_ms"] = statistics.median(
            timed(lambda i: store.train_step(*batches[i % 10], 1.0))
        )
        store.overlap = True
        result[f"step_overlap_{transport}_ms"] = statistics.median(
            timed(lambda i: store.train_step(*batches[i % 10], 1.0))
        )
    store.flush()
    store.wire_hosts = (host,)
    store.reset_transport()
    store.overlap = False
    store.train_step(*batches[0], 1.0)
    compute = timed(lambda i: functions.call_compute(weights, functions.no_changes, *batches[i % 10], scale)[2].numpy())
    round_trip = timed(lambda _i: store.global_step())
    floor = socket_exchange_ms(up, down, 10 if up > 10**7 else 40)
    for transport, wire in (("wire", store._wire), ("tensorflow", None)):
        exchange = statistics.median(exchange_times(store, wire, weights, batches, steps + 3))
        result |= {
            f"exchange_{transport}_ms": exchange,
            f"exchange_{transport}_over_floor": exchange / floor,
            f"exchange_{transport}_bytes_per_second": (up + down) / exchange * 1000,
        }
    if kind == "dense":
        ps_part = ps_part_of_wire_exchange_ms(store, messages, min(steps, 10))
        result |= {
            "ps_part_of_wire_exchange_ms": ps_part,
            "exchange_wire_less_ps_part_over_floor": (result["exchange_wire_ms"] - ps_part) / floor,
        }
    result |= {
        "message_bytes_up_down": [up, down],
        "compute_ms": statistics.median(compute),
        "round_trip_ms": statistics.median(round_trip),
        "socket_exchange_floor_ms": floor,
        "socket_bytes_per_second": (up + down) / floor * 1000,
        "parameters": int(sum(int(np.prod(v.shape)) for v in prepared.program.model.trainable_variables)),
    }
    print(json.dumps(result))


def ttj(workdir: Path, kind: str, steps: int) -> dict[str, Any]:
    workdir.mkdir()
    job = TrainerJob(workdir, workdir / "unused-kubeconfig", slots=1)
    job.start("ps", 0)
    try:
        command = [sys.executable, __file__, "--ttj-child", job.ps_addresses[0], f"127.0.0.7:{free_port()}", kind]
        command.append(f"--steps={steps}")
        out = subprocess.run(command, env=child_env(), capture_output=True, text=True, timeout=1800, check=False)
        if out.returncode:
            raise RuntimeError(out.stderr[-3000:])
        result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
        return result
    finally:
        job.stop_all()


# -- TensorFlow's ParameterServerStrategy --------------------------------------------------------------------
def tf_coordinator_child(cluster: str, steps: int) -> None:
    import keras
    import tensorflow as tf

    strategy = coordinator_strategy(cluster)
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = dense_model()
        optimizer = keras.optimizers.SGD(0.001, momentum=0.9)
        optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    train_step = coordinator_train_step(strategy, model, optimizer, loss_fn)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    iterator = iter(coordinator.create_per_worker_dataset(lambda _context=None: dense_dataset(DENSE_BATCH, 0)))
    for _ in range(3):
        coordinator.schedule(train_step, args=(iterator,))
    coordinator.join()
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        coordinator.schedule(train_step, args=(iterator,))
        coordinator.join()
        times.append((time.perf_counter() - started) * 1000)
    started = time.perf_counter()
    for _ in range(steps):
        coordinator.schedule(train_step, args=(iterator,))
    coordinator.join()
    print(
        json.dumps(
            {
                "step_joined_each_ms": statistics.median(times),
                "step_in_a_chunk_ms": (time.perf_counter() - started) * 1000 / steps,
            }
        )
    )


def tensorflow_pss(workdir: Path, steps: int) -> dict[str, Any]:
    workdir.mkdir()
    cluster = {
        "chief": [f"127.0.0.1:{free_port()}"],
        "ps": [f"127.0.0.1:{free_port()}"],
        "worker": [f"127.0.0.1:{free_port()}"],
    }
    servers = []
    try:
        for job in ("ps", "worker"):
            command = [
                sys.executable,
                str(ROOT / "bench" / "ps_strategy.py"),
                "--server",
                json.dumps(cluster),
                job,
                "0",
            ]
            log = (workdir / f"{job}.log").open("w")
            servers.append(subprocess.Popen(command, env=child_env(), stdout=log, stderr=subprocess.STDOUT))
        for address in (*cluster["ps"], *cluster["worker"]):
            host, port = address.rsplit(":", 1)
            wait_for(lambda host=host, port=port: _listening(host, int(port)), 120, f"server {address}")
        command = [sys.executable, __file__, "--tf-child", json.dumps(cluster), f"--steps={steps}"]
        out = subprocess.run(command, env=child_env(), capture_output=True, text=True, timeout=1800, check=False)
        if out.returncode:
            raise RuntimeError(out.stderr[-3000:])
        result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
        return result
    finally:
        for server in servers:
            server.kill()
            server.wait()


def _listening(host: str, port: int) -> bool:
    import socket

    try:
        socket.create_connection((host, port), timeout=1.0).close()
        return True
    except OSError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", nargs="?", choices=["dense", "sparse"], default="dense")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--width", type=int, default=1000, help="dense: the layers' width (1000: 25 M parameters)")
    parser.add_argument("--no-tf", action="store_true", help="dense: skip TensorFlow's ParameterServerStrategy")
    parser.add_argument("--tf-only", action="store_true", help="dense: only TensorFlow's ParameterServerStrategy")
    parser.add_argument("--ttj-child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--tf-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ttj_child:
        ttj_child(*args.ttj_child[:2], args.ttj_child[2], args.steps)
        return 0
    if args.tf_child:
        tf_coordinator_child(args.tf_child, args.steps)
        return 0
    os.environ[WIDTH_VARIABLE] = str(args.width)  # for the children
    root = Path(tempfile.mkdtemp(prefix="ttj-bench-exchange-"))
    loads = [load_average()]
    if not args.tf_only:
        print(f"ttj, {args.kind}: {json.dumps(ttj(root / 'ttj', args.kind, args.steps))}", flush=True)
        loads.append(load_average())
    if args.kind == "dense" and not args.no_tf:
        print(f"TF ParameterServerStrategy, dense: {json.dumps(tensorflow_pss(root / 'tf', args.steps))}", flush=True)
        loads.append(load_average())
    print(f"load average (1/5/15 min) over the run: {loads}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
