"""Trainer benchmark: throughput with 1/2/4 workers, steps lost per chief loss and per PS loss, SIGTERM-to-checkpoint.

Real trainer processes (`python -m ttj_trainer`) on this machine, with the Lease served by the HTTP
double used in tests/trainer. Run from the repository root:

    .venv/bin/python bench/trainer_bench.py [--model small-cnn] [--batch-size 32] [--rounds 3]

Steps lost are read from the chief's published progress (the Lease's progress annotation, sampled every
0.1 s; the trainer publishes every TTJ_LEASE_POLL_SECONDS=0.2 s here): the last global step published
before the loss minus the step training went on from.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.trainer.lease_double import LeaseDouble, read_progress
from tests.trainer.processes import TrainerJob, wait_for

from ttj_contract import lease_name
from ttj_trainer import checkpoints

STARTUP = 120.0


class Sampler(threading.Thread):
    def __init__(self, lease: LeaseDouble) -> None:
        super().__init__(daemon=True)
        self.lease = lease
        self.samples: list[tuple[float, int, int]] = []  # (time, epoch, globalStep)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.1):
            snapshot = self.lease.snapshot()
            progress = read_progress(snapshot)
            if progress is not None:
                epoch = int(snapshot["spec"]["leaseTransitions"])
                self.samples.append((time.monotonic(), epoch, progress.global_step))

    def last_step(self) -> int:
        return self.samples[-1][2] if self.samples else 0


def iso_now() -> str:
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"


def events(job: TrainerJob, msg: str, since: str) -> list[dict[str, Any]]:
    return sorted((e for e in job.logs() if e.get("msg") == msg and e["time"] >= since), key=lambda e: e["time"])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def new_job(
    root: Path, name: str, lease: LeaseDouble, slots: int, args: argparse.Namespace, **settings: Any
) -> TrainerJob:
    workdir = root / name
    workdir.mkdir()
    return TrainerJob(
        workdir,
        lease.write_kubeconfig(workdir / "kubeconfig"),
        slots=slots,
        TTJ_MODEL=args.model,
        TTJ_BATCH_SIZE=str(args.batch_size),
        TTJ_LEASE_POLL_SECONDS="0.2",
        **settings,
    )


def throughput(root: Path, workers: int, args: argparse.Namespace) -> float:
    with LeaseDouble("default", lease_name("job"), holder="job-worker-0") as lease:
        job = new_job(root, f"throughput-{workers}", lease, workers, args, TTJ_CHECKPOINT_INTERVAL_STEPS="0")
        try:
            job.start("ps", 0)
            for slot in range(workers):
                job.start("worker", slot)
            # Warm up until every worker has stepped (each logs "training" at least at its first hundred).
            wait_for(lambda: (p := lease.progress()) and p["globalStep"] >= 20 * workers, STARTUP, "warm-up")
            time.sleep(args.warmup)
            start_step, start = lease.progress()["globalStep"], time.monotonic()  # type: ignore[index]
            time.sleep(args.window)
            end_step, end = lease.progress()["globalStep"], time.monotonic()  # type: ignore[index]
            return float((end_step - start_step) / (end - start))
        finally:
            job.stop_all()


def recovery(root: Path, args: argparse.Namespace) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {
        "chief": [],
        "ps": [],
        "ps_interval": [],
        "sigterm": [],
        "handover": [],
        "first_step": [],
    }
    interval = 50
    with LeaseDouble("default", lease_name("job"), holder="job-worker-0") as lease:
        job = new_job(root, "recovery", lease, 3, args, TTJ_CHECKPOINT_INTERVAL_STEPS=str(interval))
        sampler = Sampler(lease)
        sampler.start()
        try:
            job.start("ps", 0)
            for slot in range(3):
                job.start("worker", slot)
            chief = 0
            wait_for(lambda: (c := checkpoints.latest(job.checkpoint_uri)) and c.step >= 50, STARTUP, "training")
            # Chief losses: SIGKILL the chief, elect the next worker, see where training goes on from.
            for _ in range(args.rounds):
                time.sleep(2)
                job.signal("worker", chief, signal.SIGKILL)
                job.wait("worker", chief, 10)
                before = sampler.last_step()
                killed = time.monotonic()
                successor = (chief + 1) % 3
                epoch = lease.elect(f"job-worker-{successor}")
                wait_for(
                    lambda epoch=epoch: any(e == epoch for _, e, _ in sampler.samples), 60, "the new chief's progress"
                )
                first = next(s for _, e, s in sampler.samples if e == epoch)
                results["handover"].append(next(t for t, e, _ in sampler.samples if e == epoch) - killed)
                results["chief"].append(max(0, before - first))
                started = iso_now()
                job.start("worker", chief)  # the replacement pod
                chief = successor
                # Start the next round only once the replacement trains (it may be elected next).
                wait_for(lambda started=started: events(job, "first step", started), STARTUP, "the replacement")
            # PS losses: SIGKILL the PS, start a new one; the chief restores the latest checkpoint. The step at
            # the loss is the highest a worker had reached (each logs it when it loses the PS).
            for _ in range(args.rounds):
                time.sleep(3)
                since = iso_now()
                job.signal("ps", 0, signal.SIGKILL)
                job.wait("ps", 0, 10)
                saved = checkpoints.latest(job.checkpoint_uri)
                assert saved is not None
                job.start("ps", 0)
                restored = wait_for(
                    lambda since=since: events(job, "parameter server restored from checkpoint", since),
                    STARTUP,
                    "the restore",
                )
                # A step in flight when the PS died may be in the checkpoint without any worker having seen its
                # result, so the step at the loss is at least the checkpoint's.
                lost_events = events(job, "lost the parameter server; reconnecting", since)
                at_loss = max([saved.step, *(e["global_step"] for e in lost_events)])
                results["ps"].append(at_loss - restored[0]["step"])
                results["ps_interval"].append(at_loss - saved.step)
            # SIGTERM: time from the signal to the chief's exit with its checkpoint committed.
            for _ in range(args.rounds + 2):
                time.sleep(2)
                step = sampler.last_step()
                sent = time.monotonic()
                job.signal("worker", chief, signal.SIGTERM)
                code = job.wait("worker", chief, 30)
                elapsed = time.monotonic() - sent
                latest = checkpoints.latest(job.checkpoint_uri)
                assert code == 143, code
                assert latest is not None
                assert latest.step >= step, (latest, step)
                results["sigterm"].append(elapsed)
                job.start("worker", chief)
                successor = (chief + 1) % 3
                epoch = lease.elect(f"job-worker-{successor}")
                chief = successor
                # The next round needs a chief that is running (it may be a replacement still starting).
                wait_for(
                    lambda epoch=epoch: (c := checkpoints.latest(job.checkpoint_uri)) and c.epoch == epoch,
                    STARTUP,
                    "the new chief's first checkpoint",
                )
            results["first_step"] = [e["seconds_since_start"] for e in events(job, "first step", "")]
        finally:
            sampler.stop.set()
            job.stop_all()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="small-cnn")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--window", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--throughput-only", action="store_true", help="skip the chief/PS/SIGTERM rounds")
    parser.add_argument("--keep", action="store_true", help="keep the processes' logs and checkpoints")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ttj-trainer-bench-"))
    try:
        rates = {int(n): throughput(root, int(n), args) for n in args.workers.split(",")}
        print(f"model={args.model} batch={args.batch_size} per worker, 1 PS, {args.window:.0f}s windows")
        base = rates[min(rates)]
        for n, rate in rates.items():
            print(f"  workers={n}: {rate:7.1f} global steps/s  ({rate / base:4.2f}x of {min(rates)} worker)")
        if args.throughput_only:
            return 0
        results = recovery(root, args)
        print(
            f"chief SIGKILL ({len(results['chief'])}x): steps lost {results['chief']} (target 0); "
            f"kill -> new chief publishing: p50 {percentile(results['handover'], 50):.2f}s "
            f"max {max(results['handover']):.2f}s (the test elects at once; the operator adds its detection time)"
        )
        print(
            f"PS SIGKILL ({len(results['ps'])}x): steps lost {results['ps']}; steps since last checkpoint at the loss "
            f"{results['ps_interval']} (interval 50 steps; the difference is steps in flight)"
        )
        first = results["first_step"]
        print(
            f"worker process start -> its first step ({len(first)}x, while the others train): "
            f"p50 {percentile(first, 50):.1f}s p90 {percentile(first, 90):.1f}s max {max(first):.1f}s"
        )
        sig = results["sigterm"]
        print(
            f"SIGTERM -> checkpoint committed + exit 143 ({len(sig)}x): p50 {percentile(sig, 50):.2f}s "
            f"p90 {percentile(sig, 90):.2f}s max {max(sig):.2f}s mean {statistics.mean(sig):.2f}s"
        )
    finally:
        if args.keep:
            print(f"logs and checkpoints kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
