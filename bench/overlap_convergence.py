"""Does overlapping a step's exchange with the next step's computation hurt training? Held-out loss after the
same number of steps, exact (``TTJ_OVERLAP_EXCHANGE=0``) against overlapped (the default), several seeds.

Run from the repository root:

    .venv/bin/python bench/overlap_convergence.py [--seeds 3] [--steps 300]

Each run: a real PS process (``python -m ttj_trainer``) and one worker process that trains the program as a
worker does (``ParameterStore.train_step``) for ``--steps`` steps from the program's seeded initial weights,
then scores held-out batches with the PS's weights (``ParameterStore.evaluate_batch``, the chief's
evaluation). Held out: the program's ``eval_input`` when it has one, else batches of its ``train_input``
drawn with a seed no training run uses. With one worker, overlap computes each step on weights that lack
exactly that worker's previous gradient: the staleness it adds, at its largest relative to the others'.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.program_vs_fit import load_average
from tests.trainer.processes import TrainerJob, free_port

ROOT = Path(__file__).resolve().parents[1]
HELD_OUT_SEED = 1_000_003
HELD_OUT_BATCHES = 8


@dataclass(frozen=True)
class Example:
    entrypoint: str
    args: dict[str, str]
    batch: int
    path: str


EXAMPLES = {
    "small-cnn": Example(
        "heldout_small_cnn:program", {"model": "small-cnn", "dataset": "synthetic"}, 32, "bench/programs"
    ),
    "ctr": Example("ctr:program", {"rows": "50000", "width": "8"}, 64, "examples/programs/ctr"),
    "custom_step": Example("custom_step:program", {}, 64, "examples/programs/custom_step"),
}


def run(workdir: Path, name: str, seed: int, overlap: bool, steps: int) -> float:
    example = EXAMPLES[name]
    workdir.mkdir(parents=True)
    job = TrainerJob(workdir, workdir / "unused-kubeconfig", slots=1)
    job.start("ps", 0)
    try:
        env = dict(os.environ) | {
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / example.path)]),
            "TF_CPP_MIN_LOG_LEVEL": "2",
        }
        command = [sys.executable, __file__, "--child", job.ps_addresses[0], f"127.0.0.7:{free_port()}", name]
        command += [str(seed), "1" if overlap else "0", str(steps)]
        out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, check=False)
        if out.returncode:
            raise RuntimeError(out.stderr[-3000:])
        return float(json.loads(out.stdout.strip().splitlines()[-1])["held_out_loss"])
    finally:
        job.stop_all()


def child(ps: str, own: str, name: str, seed: int, *, overlap: bool, steps: int) -> None:
    import keras
    import numpy as np
    import tensorflow as tf

    from ttj_trainer import devices, program
    from ttj_trainer.parameters import ParameterStore

    example = EXAMPLES[name]
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    tf.config.experimental_connect_to_cluster(
        tf.train.ClusterSpec({"ps": [ps], "worker": {0: own}}), job_name="worker", task_index=0, protocol="grpc"
    )
    keras.utils.set_random_seed(seed)
    args = example.args | {"seed": str(seed)}
    loaded = program.load(example.entrypoint, args)
    prepared = program.prepare(example.entrypoint, loaded, program.InputContext(0, 1, example.batch, seed))
    store = ParameterStore.of(prepared, ps_count=1, worker_slots=1, local_device=devices.worker_cpu(0), overlap=overlap)
    store.open()
    store.assign_all(store.initial_values())
    features, labels = prepared.first
    for _ in range(steps):
        store.train_step(features, labels, 1.0)
        features, labels = next(prepared.batches)
    store.flush()
    if loaded.eval_input is not None:
        held_out = loaded.eval_input(program.InputContext(0, 1, example.batch, seed))
    else:
        held_out = loaded.train_input(program.InputContext(0, 1, example.batch, HELD_OUT_SEED))
    losses, counts = [], []
    for taken, (features, labels) in enumerate(held_out):
        if taken >= HELD_OUT_BATCHES:
            break
        _, loss = store.evaluate_batch(features, labels, loaded.loss)
        losses.append(float(loss))
        counts.append(int(tf.shape(labels)[0]))
    print(json.dumps({"held_out_loss": float(np.average(losses, weights=counts)), "global_step": store.global_step()}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--programs", default=",".join(EXAMPLES))
    parser.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        ps, own, name, seed, overlap, steps = args.child
        child(ps, own, name, int(seed), overlap=overlap == "1", steps=int(steps))
        return 0
    root = Path(tempfile.mkdtemp(prefix="ttj-bench-overlap-"))
    loads = [load_average()]
    results: dict[str, dict[str, list[float]]] = {}
    for name in args.programs.split(","):
        results[name] = {"exact": [], "overlap": []}
        for seed in range(args.seeds):
            for mode in ("exact", "overlap") if seed % 2 == 0 else ("overlap", "exact"):
                loss = run(root / f"{name}-{seed}-{mode}", name, seed, mode == "overlap", args.steps)
                results[name][mode].append(loss)
                loads.append(load_average())
            print(
                f"{name} seed {seed}: held-out loss exact {results[name]['exact'][-1]:.4f}, "
                f"overlap {results[name]['overlap'][-1]:.4f}",
                flush=True,
            )
    print(f"{args.steps} steps, {args.seeds} seeds; load average (1/5/15 min) over the run: {loads}")
    for name, by_mode in results.items():
        exact, overlap = by_mode["exact"], by_mode["overlap"]
        print(
            f"{name}: exact {[round(x, 4) for x in exact]} mean {statistics.mean(exact):.4f}; "
            f"overlap {[round(x, 4) for x in overlap]} mean {statistics.mean(overlap):.4f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
