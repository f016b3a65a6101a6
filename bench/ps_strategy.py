"""ttj vs TensorFlow's own ParameterServerStrategy + ClusterCoordinator (the TF tutorial's custom training loop,
what a TFJob user runs): the same program, the same workers and PS, all local processes.

Run from the repository root (~7 min):

    .venv/bin/python bench/ps_strategy.py [--workers 2] [--rounds 4] [--window 20] [--batch-size 32] [--no-faults]

Both train bench/user_program.py (the small CNN, SGD with momentum, the same synthetic batches) with
``--workers`` workers and one PS. ttj: real trainer processes (``python -m ttj_trainer``) with the Lease
served by the HTTP double of tests/trainer; its rate is the global step the chief publishes. TensorFlow:
``tf.distribute.Server`` processes for the PS and the workers (the trainer's thread settings) and a
coordinator process running the tutorial's loop (``coordinator.schedule`` of a ``strategy.run`` step,
``join`` and a checkpoint every ``--chunk`` steps); its rate is the optimizer's iterations, read every
0.25 s. Throughput rounds alternate ttj, TF, ttj, TF. Then, for each, once: a worker is SIGKILLed and
restarted 5 s later, and the chief (ttj: worker 0, the Lease moved to worker 1 at once, as the operator
does once it sees the pod gone) or the coordinator (TF: started again at once, restoring its last
checkpoint, as a restarted chief pod would) is SIGKILLed: steps lost and the time until training goes on.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.trainer_bench import Sampler
from tests.trainer.lease_double import LeaseDouble
from tests.trainer.processes import TrainerJob, free_port, wait_for

from ttj_contract import lease_name

ROOT = Path(__file__).resolve().parents[1]
ENTRYPOINT = "bench.user_program:program"
STARTUP = 240.0
INTRA, INTER = 1, 2


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def child_env() -> dict[str, str]:
    return dict(os.environ) | {"PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}


def rate(samples: list[tuple[float, int]], start: float, end: float) -> float:
    """Steps per second between the samples nearest ``start`` and ``end`` (monotonic times)."""
    inside = [(t, s) for t, s in samples if start <= t <= end]
    if len(inside) < 2:
        return 0.0
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


# -- ttj ---------------------------------------------------------------------------------------------------
class TtjRun:
    def __init__(self, workdir: Path, args: argparse.Namespace) -> None:
        workdir.mkdir()
        self.lease = LeaseDouble("default", lease_name("job"), holder="job-worker-0")
        self.lease.__enter__()
        self.job = TrainerJob(
            workdir,
            self.lease.write_kubeconfig(workdir / "kubeconfig"),
            slots=args.workers,
            TTJ_MODEL="",
            TTJ_DATASET="",
            TTJ_PROGRAM=ENTRYPOINT,
            PYTHONPATH=str(ROOT),
            TTJ_BATCH_SIZE=str(args.batch_size),
            TTJ_CHECKPOINT_INTERVAL_STEPS=str(args.chunk),
            TTJ_LEASE_POLL_SECONDS="0.2",
        )
        self.sampler = Sampler(self.lease)
        self.workers = args.workers

    def start(self) -> None:
        self.job.start("ps", 0)
        for slot in range(self.workers):
            self.job.start("worker", slot)
        self.sampler.start()
        wait_for(lambda: self.sampler.last_step() >= 30 * self.workers, STARTUP, "ttj warm-up", interval=0.5)

    def samples(self) -> list[tuple[float, int]]:
        return [(t, s) for t, _, s in self.sampler.samples]

    def stop(self) -> None:
        self.sampler.stop.set()
        self.job.stop_all()
        self.lease.__exit__(None, None, None)


# -- TensorFlow's ParameterServerStrategy --------------------------------------------------------------------
def server_child(cluster: str, job: str, index: int) -> None:
    import tensorflow as tf

    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=INTRA, inter_op_parallelism_threads=INTER)
    server = tf.distribute.Server(
        tf.train.ClusterSpec(json.loads(cluster)), job_name=job, task_index=index, config=config, start=True
    )
    server.join()


def coordinator_strategy(cluster: str) -> Any:
    """The coordinator's ParameterServerStrategy over ``cluster`` (JSON), with the trainer's thread pools."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(INTRA)
    tf.config.threading.set_inter_op_parallelism_threads(INTER)
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(json.loads(cluster)), task_type="chief", task_id=0, rpc_layer="grpc"
    )
    return tf.distribute.experimental.ParameterServerStrategy(resolver)


def coordinator_train_step(strategy: Any, model: Any, optimizer: Any, loss_fn: Any) -> Any:
    """The TF tutorial's step: one batch from the per-worker iterator, gradients applied on the parameter
    servers."""
    import tensorflow as tf

    @tf.function
    def train_step(iterator: Any) -> Any:
        def replica_step(features: Any, labels: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_fn(labels, model(features, training=True)))
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
            return loss

        features, labels = next(iterator)
        return strategy.run(replica_step, args=(features, labels))

    return train_step


def coordinator_child(cluster: str, checkpoint_dir: str, args: argparse.Namespace) -> None:
    """The TF tutorial's loop; prints {"t", "step"} lines (wall clock, the optimizer's iterations)."""
    import keras
    import tensorflow as tf
    from bench.user_program import dataset, model_and_optimizer

    strategy = coordinator_strategy(cluster)
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model, optimizer = model_and_optimizer()
        model.build((None, 32, 32, 3))
        optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    manager = tf.train.CheckpointManager(checkpoint, checkpoint_dir, max_to_keep=2)
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint)
        print(json.dumps({"restored": int(optimizer.iterations.numpy()), "t": time.time()}), flush=True)

    def per_worker_dataset(context: Any = None) -> Any:
        return dataset(args.batch_size, context.input_pipeline_id if context else 0)

    train_step = coordinator_train_step(strategy, model, optimizer, loss_fn)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset))

    def report() -> None:
        while True:
            try:
                print(json.dumps({"t": time.time(), "step": int(optimizer.iterations.numpy())}), flush=True)
            except tf.errors.OpError as err:  # seen once while a worker was lost: say so, read again
                print(json.dumps({"t": time.time(), "read_error": type(err).__name__}), flush=True)
            time.sleep(0.25)

    threading.Thread(target=report, daemon=True).start()
    while True:
        for _ in range(args.chunk):
            coordinator.schedule(train_step, args=(iterator,))
        coordinator.join()
        manager.save()


class TfRun:
    def __init__(self, workdir: Path, args: argparse.Namespace) -> None:
        workdir.mkdir()
        self.workdir = workdir
        self.args = args
        self.cluster = {
            "ps": [f"127.0.0.1:{free_port()}"],
            "worker": [f"127.0.0.1:{free_port()}" for _ in range(args.workers)],
            "chief": [f"127.0.0.1:{free_port()}"],
        }
        self.servers: dict[tuple[str, int], subprocess.Popen[bytes]] = {}
        self.coordinator: subprocess.Popen[str] | None = None
        self.lines: list[dict[str, Any]] = []  # every line the coordinators printed, with the monotonic time

    def _spawn(self, *extra: str) -> list[str]:
        return [sys.executable, __file__, *extra, f"--batch-size={self.args.batch_size}", f"--chunk={self.args.chunk}"]

    def start_server(self, job: str, index: int) -> None:
        log = open(self.workdir / f"{job}-{index}.log", "ab")  # noqa: SIM115 - the child owns it
        self.servers[job, index] = subprocess.Popen(
            self._spawn("--server", json.dumps(self.cluster), job, str(index)),
            env=child_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()

    def start_coordinator(self) -> None:
        log = open(self.workdir / "coordinator.log", "ab")  # noqa: SIM115 - the child owns it
        process = subprocess.Popen(
            self._spawn("--coordinator", json.dumps(self.cluster), str(self.workdir / "checkpoints")),
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        log.close()
        self.coordinator = process

        def read() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                if line.startswith("{"):
                    self.lines.append(json.loads(line) | {"m": time.monotonic()})

        threading.Thread(target=read, daemon=True).start()

    def start(self) -> None:
        self.start_server("ps", 0)
        for index in range(self.args.workers):
            self.start_server("worker", index)
        self.start_coordinator()
        wait_for(lambda: self.last_step() >= 30 * self.args.workers, STARTUP, "TF warm-up", interval=0.5)

    def last_step(self) -> int:
        steps = [line["step"] for line in self.lines if "step" in line]
        return steps[-1] if steps else 0

    def samples(self) -> list[tuple[float, int]]:
        return [(line["m"], line["step"]) for line in self.lines if "step" in line]

    def stop(self) -> None:
        for process in [*self.servers.values(), *([self.coordinator] if self.coordinator else [])]:
            if process.poll() is None:
                process.kill()
            process.wait(10)


# -- the runs ------------------------------------------------------------------------------------------------
def throughput(run: TtjRun | TfRun, args: argparse.Namespace) -> float:
    run.start()
    try:
        time.sleep(args.warmup)
        start = time.monotonic()
        time.sleep(args.window)
        return rate(run.samples(), start, time.monotonic())
    finally:
        run.stop()


def worker_loss(run: TtjRun | TfRun, kill: Any, restart: Any, args: argparse.Namespace) -> dict[str, Any]:
    """SIGKILL a worker, restart it 5 s later: rates before, while down, after; did the global step go back?"""
    time.sleep(args.warmup)
    killed = time.monotonic()
    before = rate(run.samples(), killed - 10, killed)
    at_kill = max(s for _, s in run.samples())
    kill()
    time.sleep(5)
    restarted = time.monotonic()
    restart()
    down = rate(run.samples(), killed, restarted)
    time.sleep(25)
    samples = run.samples()
    after = rate(samples, time.monotonic() - 10, time.monotonic())
    later = [s for t, s in samples if t > killed]
    return {
        "rate_before": round(before, 1),
        "rate_while_down": round(down, 1),
        "rate_20_to_30s_after_restart": round(after, 1),
        "global_step_went_back_by": max(0, at_kill - min(later)) if later else None,
    }


def ttj_faults(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    run = TtjRun(root / "ttj-faults", args)
    run.start()
    try:
        job = run.job
        worker = worker_loss(
            run,
            lambda: (job.signal("worker", 1, signal.SIGKILL), job.wait("worker", 1, 10)),
            lambda: job.start("worker", 1),
            args,
        )
        time.sleep(args.warmup)
        before = run.sampler.last_step()
        job.signal("worker", 0, signal.SIGKILL)
        job.wait("worker", 0, 10)
        killed = time.monotonic()
        epoch = run.lease.elect("job-worker-1")
        wait_for(lambda: any(e == epoch for _, e, _ in run.sampler.samples), 120, "the new chief's progress")
        first_time, _, first_step = next((t, e, s) for t, e, s in run.sampler.samples if e == epoch)
        job.start("worker", 0)
        return {
            "worker": worker,
            "chief": {
                "steps_lost": max(0, before - first_step),
                "kill_to_training_again_s": round(first_time - killed, 2),
            },
        }
    finally:
        run.stop()


def tf_faults(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    run = TfRun(root / "tf-faults", args)
    run.start()
    try:
        server = run.servers

        def kill_worker() -> None:
            server["worker", 1].kill()
            server["worker", 1].wait(10)

        worker = worker_loss(run, kill_worker, lambda: run.start_server("worker", 1), args)
        time.sleep(args.warmup)
        assert run.coordinator is not None
        before = run.last_step()
        run.coordinator.kill()
        run.coordinator.wait(10)
        killed = time.monotonic()
        seen = len(run.lines)
        run.start_coordinator()  # a restarted chief pod: the same servers, restoring its last checkpoint

        def resumed() -> Any:
            restored = [line for line in run.lines[seen:] if "restored" in line]
            if not restored:
                return None
            beyond = [line for line in run.lines[seen:] if line.get("step", -1) > restored[0]["restored"]]
            return (restored[0], beyond[0]) if beyond else None

        try:
            restored, first = wait_for(resumed, 180, "the coordinator's restart")
            coordinator: dict[str, Any] = {
                "steps_lost": before - restored["restored"],
                "kill_to_training_again_s": round(first["m"] - killed, 2),
            }
        except AssertionError as err:
            coordinator = {"error": str(err), "log": (run.workdir / "coordinator.log").read_text()[-1500:]}
        return {"worker": worker, "coordinator": coordinator}
    finally:
        run.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument(
        "--chunk", type=int, default=100, help="TF: steps per join and checkpoint (ttj: per checkpoint)"
    )
    parser.add_argument("--no-faults", action="store_true")
    parser.add_argument("--tf-faults-only", action="store_true", help="only TensorFlow's fault run")
    parser.add_argument("--server", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--coordinator", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.server:
        cluster, job, index = args.server
        server_child(cluster, job, int(index))
        return 0
    if args.coordinator:
        cluster, checkpoint_dir = args.coordinator
        coordinator_child(cluster, checkpoint_dir, args)
        return 0
    root = Path(tempfile.mkdtemp(prefix="ttj-bench-pss-"))
    loads = [load_average()]
    if args.tf_faults_only:
        print(f"TF faults: {json.dumps(tf_faults(root, args))}; load average {[*loads, load_average()]}")
        return 0
    rates: dict[str, list[float]] = {"ttj": [], "tf": []}
    for round_ in range(args.rounds):
        rates["ttj"].append(throughput(TtjRun(root / f"ttj-{round_}", args), args))
        loads.append(load_average())
        rates["tf"].append(throughput(TfRun(root / f"tf-{round_}", args), args))
        loads.append(load_average())
        print(f"round {round_ + 1}: ttj {rates['ttj'][-1]:.1f}, TF PSS {rates['tf'][-1]:.1f} steps/s", flush=True)
    ratios = [t / f for t, f in zip(rates["ttj"], rates["tf"], strict=True)]
    print(f"{args.workers} workers + 1 PS, batch {args.batch_size} per worker, {args.window:.0f} s windows")
    print(f"ttj: {[round(r, 1) for r in rates['ttj']]} steps/s; TF PSS: {[round(r, 1) for r in rates['tf']]} steps/s")
    median = statistics.median(ratios)
    print(f"ratio ttj / TF per round: {[round(r, 2) for r in ratios]}, median {median:.2f} (goal >= 1.2)", flush=True)
    if not args.no_faults:
        print(f"ttj faults: {json.dumps(ttj_faults(root, args))}", flush=True)
        loads.append(load_average())
        print(f"TF faults: {json.dumps(tf_faults(root, args))}", flush=True)
        loads.append(load_average())
    print(f"load average (1/5/15 min) over the run: {loads}; logs in {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
