"""The wide-and-deep model (examples/programs/ctr.py): bytes a training step moves to and from the PS tasks,
with ttj's sparse embedding lookups and with Keras's own (dense) lookup, measured side by side.

Run from the repository root (~3 min):

    .venv/bin/python bench/ctr_bytes.py [--rows 1000000] [--batch-size 512] [--ps 2] [--steps 12] [--rounds 2]

Two PS processes (``python -m ttj_trainer`` as ps 0 and 1, as the example's manifest has) and, per mode, a
child that trains the program as a worker does (ttj's ParameterStore and step function) and counts the
bytes of every step on the worker–PS TCP connections (the kernel's ``bytes_sent``/``bytes_received`` of
each connection, read with ``ss`` before and after the step). "dense" is the same program with ttj's
``sparse_embedding_lookups`` left out, so Keras's ``Embedding`` reads its whole table each step. The rows
a step touches are counted from its batch: the lower bound of what sparse traffic can be.
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

from tests.trainer.processes import TrainerJob, free_port

ROOT = Path(__file__).resolve().parents[1]
ENTRYPOINT = "ctr:program"
FLOAT_BYTES = 4
ID_BYTES = 8


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def run_child(ps: list[str], mode: str, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", mode, ",".join(ps), f"127.0.0.7:{free_port()}"]
    command += [f"--rows={args.rows}", f"--batch-size={args.batch_size}", f"--steps={args.steps}"]
    env = dict(os.environ) | {
        "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'examples' / 'programs'}",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, check=False)
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def child(mode: str, ps_addresses: str, own: str, args: argparse.Namespace) -> None:
    import keras
    import numpy as np
    import tensorflow as tf
    from tests.trainer.program_probe import socket_bytes

    from ttj_trainer import devices, parameters, program

    ps = ps_addresses.split(",")
    tf.config.experimental_connect_to_cluster(
        tf.train.ClusterSpec({"ps": ps, "worker": {0: own}}), job_name="worker", task_index=0, protocol="grpc"
    )
    keras.utils.set_random_seed(0)
    p = program.load(ENTRYPOINT, {"rows": str(args.rows)})
    prepared = program.prepare(ENTRYPOINT, p, program.InputContext(0, 1, args.batch_size, 0))
    if mode == "dense":
        parameters.sparse_embedding_lookups = lambda _model: 0  # Keras's own Embedding.call stays
    store = parameters.ParameterStore.of(
        prepared,
        ps_count=len(ps),
        worker_slots=1,
        local_device=devices.worker_cpu(0),
    )
    store.open()
    store.assign_all(store.initial_values())
    own_port = own.rsplit(":", 1)[1]
    ports = [address.rsplit(":", 1)[1] for address in ps]
    moved: list[int] = []
    seconds: list[float] = []
    rows: list[int] = []
    batches = [prepared.first, *(next(prepared.batches) for _ in range(args.steps - 1))]
    for features, labels in batches:
        # The PS tasks' servers and this worker's own (the PS connects back to it) see all the traffic.
        total_before = socket_bytes(ports, own_port)
        started = time.perf_counter()
        store.train_step(features, labels, 1.0)
        seconds.append(time.perf_counter() - started)
        moved.append(socket_bytes(ports, own_port) - total_before)
        rows.append(int(np.unique(features["ids"].numpy()).size))
    width = int(p.model.get_layer("table").output_dim)
    ids_per_batch = args.batch_size * int(features["ids"].shape[1])
    # What a step must move at least: the unique rows read (both tables), one gradient row per id looked up
    # (IndexedSlices are not de-duplicated) with its index, for both tables.
    floor = statistics.median(rows) * (width + 1) * FLOAT_BYTES + ids_per_batch * (
        (width + 1) * FLOAT_BYTES + 2 * ID_BYTES
    )
    tables = sum(int(np.prod(v.shape)) * FLOAT_BYTES for v in p.model.variables if v.path.endswith("embeddings"))
    print(
        json.dumps(
            {
                "mode": mode,
                "bytes_per_step": statistics.median(moved[2:]),
                "seconds_per_step": statistics.median(seconds[2:]),
                "unique_rows_per_step": statistics.median(rows),
                "rows_floor_bytes": floor,
                "table_bytes": tables,
            }
        )
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--ps", type=int, default=2)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", nargs=3, metavar=("MODE", "PS", "OWN"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, ps, own = args.child
        child(mode, ps, own, args)
        return 0
    root = Path(tempfile.mkdtemp(prefix="ttj-bench-ctr-"))
    loads = [load_average()]
    results: dict[str, list[dict[str, Any]]] = {"sparse": [], "dense": []}
    for round_ in range(args.rounds):
        for mode in ("sparse", "dense"):
            # Fresh PS processes for every run: a run's variables are not left behind for the next.
            workdir = root / f"{mode}-{round_}"
            workdir.mkdir()
            job = TrainerJob(workdir, workdir / "unused-kubeconfig", slots=1, ps_count=args.ps)
            for index in range(args.ps):
                job.start("ps", index)
            try:
                results[mode].append(run_child(job.ps_addresses, mode, args))
            finally:
                job.stop_all()
            loads.append(load_average())
            print(json.dumps(results[mode][-1]), flush=True)
    print(f"rows={args.rows} batch={args.batch_size} ps={args.ps}; load average over the run: {loads}")
    for mode, runs in results.items():
        per_step = [r["bytes_per_step"] for r in runs]
        print(
            f"{mode}: {[round(b / 1e6, 3) for b in per_step]} MB per step, "
            f"{[round(r['seconds_per_step'], 3) for r in runs]} s per step"
        )
    sparse, dense = results["sparse"][0], results["dense"][0]
    sparse_bytes = statistics.median(r["bytes_per_step"] for r in results["sparse"])
    dense_bytes = statistics.median(r["bytes_per_step"] for r in results["dense"])
    print(
        f"tables {sparse['table_bytes'] / 1e6:.1f} MB; unique rows per step {sparse['unique_rows_per_step']}; "
        f"floor {sparse['rows_floor_bytes'] / 1e6:.3f} MB; dense / sparse bytes {dense_bytes / sparse_bytes:.0f}x; "
        f"a dense step moves {dense['bytes_per_step'] / dense['table_bytes']:.2f} x the tables"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
