"""The chaos soak: the checker of ``tests/chaos`` over a longer run, many operator kills and preemptions.

Same harness as the bounded test in ``make test`` (``tests/chaos/harness.py``): a local cluster with
simulated pods, ``--operators`` replicas of ``ttj operator --leader-elect``, API faults on every verb,
watch drops, forced 410 re-lists, SIGKILLs of the operator (mostly the leader) and node preemptions
under workers, chiefs and parameter servers; invariants checked at every event. It prints one JSON line:
faults injected, kills, preemptions, invariant violations, problems at the end, recovery (worker lost →
replacement created, seen by the checker) p50/p99 under faults, and leader failover (SIGKILL of the leader
→ another replica holds the leader Lease).

Run: .venv/bin/python bench/operator_chaos.py --minutes 12 --kills 200 --preemptions 1000

On an existing cluster instead (e.g. a real kube-apiserver + etcd + kube-scheduler + kube-controller-manager)
with ``ttj local-cluster --nodes-only --simulate-pods --pool name=cpu-pool,... --pool name=gpu-pool,...``
attached: ``--kubeconfig PATH`` (the operators go through a proxy that refuses and cuts connections, see
``tests/chaos/sites.py``), ``--control-plane DIR`` to restart its kube-apiserver and etcd in turn every
``--relist-every`` seconds on average (DIR/run/NAME.pid, DIR/up.sh), ``--lose-every`` for node losses.
It stops at whichever comes first: the time, or both counts reached. Exit status 1 on any violation.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=12.0, help="minutes of chaos (the settling comes after)")
    parser.add_argument("--kills", type=int, default=200, help="stop once this many operator kills were done")
    parser.add_argument("--preemptions", type=int, default=1000, help="...and this many preemptions")
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--operators", type=int, default=2)
    parser.add_argument("--kill-every", type=float, default=3.0, help="mean seconds between operator kills")
    parser.add_argument("--preempt-every", type=float, default=0.7, help="mean seconds between preemptions")
    parser.add_argument("--relist-every", type=float, default=20.0, help="mean seconds between forced 410s")
    parser.add_argument("--fault-probability", type=float, default=0.03)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--kubeconfig", help="an existing cluster with a nodes-only fleet attached")
    parser.add_argument("--control-plane", help="with --kubeconfig: DIR with run/NAME.pid and up.sh, to restart")
    parser.add_argument("--up-env", action="append", default=[], metavar="K=V", help="environment for up.sh")
    parser.add_argument("--lose-every", type=float, default=None, help="mean seconds between node losses")
    parser.add_argument("--logs", default=None, help="directory for the operators' logs (default: a temp dir)")
    args = parser.parse_args()

    from tests.chaos.harness import Chaos, ChaosPlan, quiet_kubernetes_logs

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    plan = ChaosPlan(
        seed=args.seed,
        jobs=args.jobs,
        workers=args.workers,
        operators=args.operators,
        duration=args.minutes * 60,
        kill_every=args.kill_every,
        preempt_every=args.preempt_every,
        relist_every=args.relist_every,
        fault_probability=args.fault_probability,
        max_kills=args.kills,
        max_preemptions=args.preemptions,
        settle_timeout=300.0,
        lose_every=args.lose_every,
    )
    logs = Path(args.logs) if args.logs else Path(tempfile.mkdtemp(prefix="ttj-chaos-"))
    logs.mkdir(parents=True, exist_ok=True)
    site = None
    if args.kubeconfig:
        from tests.chaos.sites import RealSite

        up_env = dict(kv.split("=", 1) for kv in args.up_env)
        control_plane = Path(args.control_plane) if args.control_plane else None
        site = RealSite(plan, args.kubeconfig, logs, control_plane, up_env)
    with quiet_kubernetes_logs():
        outcome = Chaos(plan, logs, site).run()
    print(json.dumps({**outcome.summary(), "logs": str(logs)}))
    for line in outcome.violations + outcome.problems:
        print(line, file=sys.stderr)
    return 1 if outcome.violations or outcome.problems else 0


if __name__ == "__main__":
    sys.exit(main())
