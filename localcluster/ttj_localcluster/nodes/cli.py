"""Options of ``ttj local-cluster`` for node pools, pods and preemption, and the add-ons they build.

Used by ``ttj_localcluster.cli``: ``add_arguments(parser)``, ``check_arguments(args)``, ``build_addons(args)``
and ``run_command(args)`` (the control options talk to an already running cluster and exit). The add-ons
are imported when built: the kubeconfig is written before the Kubernetes client's import is paid for.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .pools import NodePool, check_pools, default_pools, load_pools_file, parse_pool_option

if TYPE_CHECKING:
    from ..cluster import Addon

POOL_HELP = (
    "add a node pool: name=NAME,nodes=N,provisioning=on-demand|spot|preemptible,accelerator=TYPE,gpus=N,"
    "cpu=Q,memory=Q,machine-type=T,zone=Z,preemption=none|scripted|lifetime,preempt-at=S[:S...],seed=N,"
    "time-scale=X,grace=S,stop-seconds=S,restore-after=S|never,speed=X,step-seconds=S,stocked-out=true|false,"
    "stock-out-window=FROM:UNTIL,trace=FILE,trace-start=S,compute-class=NAME (repeatable; replaces the default "
    "pools; trace: the pool's stock follows a spot availability trace at time-scale trace seconds per second)"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("nodes and pods")
    group.add_argument("--pool", action="append", default=[], metavar="SPEC", help=POOL_HELP)
    group.add_argument(
        "--pools", metavar="FILE", help="node pools from a YAML file ('pools:' list, same keys as --pool)"
    )
    pods = group.add_mutually_exclusive_group()
    pods.add_argument(
        "--run-pods",
        dest="run_pods",
        action="store_true",
        default=True,
        help="run pods' containers as local processes (default)",
    )
    pods.add_argument(
        "--simulate-pods", dest="run_pods", action="store_false", help="do not run containers: pods are Running at once"
    )
    group.add_argument(
        "--pod-network",
        choices=("namespaces", "host"),
        default="namespaces",
        help="namespaces: each pod its own network namespace and IP on a cluster bridge (needs root; falls back "
        "to host when impossible); host: pods share this machine's network, with 127.x pod IPs [%(default)s]",
    )
    group.add_argument(
        "--state-dir", metavar="DIR", help="pod logs and hosts files go here [a new temporary directory]"
    )
    group.add_argument(
        "--program-path",
        action="append",
        default=[],
        metavar="DIR",
        help="a directory of your own Python code (e.g. the module spec.program.entrypoint names), put first on "
        "every container's PYTHONPATH, as your image's ENV PYTHONPATH would (repeatable)",
    )
    group.add_argument(
        "--scheduler-seed", type=int, default=None, metavar="N", help="seed the scheduler's tie-breaking"
    )
    attach = parser.add_argument_group("nodes only: simulated nodes for an existing API server")
    attach.add_argument(
        "--nodes-only",
        action="store_true",
        help="start no API server: register the node pools with the API server the existing --kubeconfig names "
        "(kind, k3s, a kube-apiserver of your own) and act as their kubelets",
    )
    attach.add_argument(
        "--with-scheduler",
        action="store_true",
        help="with --nodes-only: run the local scheduler too (for a control plane without kube-scheduler)",
    )
    attach.add_argument(
        "--with-controllers",
        action="store_true",
        help="with --nodes-only: run the local Deployment/ReplicaSet controllers and pod garbage collector too "
        "(without kube-controller-manager)",
    )
    control = parser.add_argument_group("control of a running local cluster (found through --kubeconfig)")
    control.add_argument(
        "--preempt-node", metavar="NODE", help="preempt this node, as GKE preempts a spot VM, and exit"
    )
    control.add_argument(
        "--preempt-pod", metavar="NAMESPACE/NAME", help="preempt the node that runs this pod, and exit"
    )
    control.add_argument(
        "--migrate-node",
        metavar="NODE",
        help="drain this node as GKE's cluster autoscaler does for a compute class's active migration (its "
        "ToBeDeletedByClusterAutoscaler taint, each pod evicted), delete it, and exit",
    )
    control.add_argument("--restore-pool", metavar="POOL", help="bring this pool back to its size now, and exit")
    control.add_argument(
        "--stock-out",
        metavar="POOL",
        help="the pool runs out of capacity: its nodes are preempted, no node can join, and the simulated cluster "
        "autoscaler answers pending pods with GKE's FailedScaleUp/NotTriggerScaleUp Events; and exit",
    )
    control.add_argument(
        "--keep-nodes", action="store_true", help="with --stock-out: the pool's running nodes stay (no new ones)"
    )
    control.add_argument("--restock", metavar="POOL", help="capacity is back: the pool returns to its size; and exit")
    control.add_argument(
        "--replay-trace",
        metavar="POOL",
        help="replay the pool's spot availability trace over from now (from its trace-start, or --trace-from); "
        "and exit",
    )
    control.add_argument(
        "--trace-from", type=float, metavar="SECONDS", help="with --replay-trace: the trace second to replay from"
    )
    control.add_argument("--status", action="store_true", help="print pools, nodes and preemptions as JSON, and exit")
    control.add_argument(
        "--wait", action="store_true", help="with --preempt-* or --migrate-node: return once the node is gone"
    )


def pools_from_args(args: argparse.Namespace) -> list[NodePool]:
    """The pools the options give, which replace the defaults: a ``--pools`` file with ``pools: []`` and no
    ``--pool`` means no pools at all."""
    pools_file, options = getattr(args, "pools", None), getattr(args, "pool", []) or []
    if not pools_file and not options:
        return default_pools()
    pools = load_pools_file(pools_file) if pools_file else []
    pools.extend(parse_pool_option(text) for text in options)
    return check_pools(pools)


def check_arguments(args: argparse.Namespace) -> None:
    """Bad pool options stop the command before the API server starts (and before a kubeconfig is written)."""
    try:
        pools_from_args(args)
    except (ValueError, OSError) as exc:
        raise SystemExit(f"ttj local-cluster: {exc}") from exc
    for directory in getattr(args, "program_path", []) or []:
        if not Path(directory).is_dir():
            raise SystemExit(f"ttj local-cluster: --program-path {directory}: no such directory")
    nodes_only = getattr(args, "nodes_only", False)
    if not nodes_only and (getattr(args, "with_scheduler", False) or getattr(args, "with_controllers", False)):
        raise SystemExit("ttj local-cluster: --with-scheduler and --with-controllers go with --nodes-only")
    if nodes_only and not Path(args.kubeconfig).is_file():
        raise SystemExit(
            f"ttj local-cluster: --nodes-only attaches to the API server of an existing kubeconfig; "
            f"there is none at {args.kubeconfig}"
        )


def build_addons(args: argparse.Namespace) -> list[Addon]:
    """Fleet (nodes, kubelets, pods, control server), scheduler, Deployment/ReplicaSet controllers and pod
    garbage collector; with ``--nodes-only`` the fleet, and the others only when asked for."""
    from .deployments import DeploymentController
    from .fleet import NodeFleet
    from .podgc import PodGarbageCollector
    from .scheduler import Scheduler

    try:
        pools = pools_from_args(args)
    except (ValueError, OSError) as exc:
        raise SystemExit(f"ttj local-cluster: {exc}") from exc
    fleet = NodeFleet(
        pools,
        run_pods=getattr(args, "run_pods", True),
        state_dir=getattr(args, "state_dir", None),
        pod_network=getattr(args, "pod_network", "namespaces") == "namespaces",
        program_path=getattr(args, "program_path", []) or [],
        announce=lambda message: print(f"ttj local-cluster: {message}", flush=True),
    )
    nodes_only = getattr(args, "nodes_only", False)
    addons: list[Addon] = [fleet]
    if not nodes_only or getattr(args, "with_scheduler", False):
        addons.append(Scheduler(seed=getattr(args, "scheduler_seed", None)))
    if not nodes_only or getattr(args, "with_controllers", False):
        addons += [DeploymentController(), PodGarbageCollector()]
    return addons


def run_command(args: argparse.Namespace) -> int | None:
    """The control options: act on the running cluster and return an exit status; None: start a cluster."""
    wanted = [
        args.preempt_node,
        args.preempt_pod,
        getattr(args, "migrate_node", None),
        args.restore_pool,
        getattr(args, "stock_out", None),
        getattr(args, "restock", None),
        getattr(args, "replay_trace", None),
        args.status or None,
    ]
    if not any(wanted):
        return None
    if sum(1 for w in wanted if w) > 1:
        print(
            "ttj local-cluster: give one of --preempt-node, --preempt-pod, --migrate-node, --restore-pool, "
            "--stock-out, --restock, --replay-trace, --status",
            file=sys.stderr,
        )
        return 2
    from .control import ControlClient

    if not Path(args.kubeconfig).is_file():
        print(
            f"ttj local-cluster: no kubeconfig at {args.kubeconfig}: is `ttj local-cluster --kubeconfig "
            f"{args.kubeconfig}` running?",
            file=sys.stderr,
        )
        return 1
    try:
        control = ControlClient.from_kubeconfig(args.kubeconfig)
        if args.preempt_node:
            answer = control.preempt_node(args.preempt_node, wait=args.wait)
        elif args.preempt_pod:
            namespace, _, name = str(args.preempt_pod).rpartition("/")
            answer = control.preempt_pod(namespace or "default", name, wait=args.wait)
        elif getattr(args, "migrate_node", None):
            answer = control.migrate_node(args.migrate_node, wait=args.wait)
        elif args.restore_pool:
            answer = control.restore_pool(args.restore_pool)
        elif getattr(args, "stock_out", None):
            answer = control.stock_out(args.stock_out, keep_nodes=args.keep_nodes)
        elif getattr(args, "restock", None):
            answer = control.restock(args.restock)
        elif getattr(args, "replay_trace", None):
            answer = control.replay_trace(args.replay_trace, args.trace_from)
        else:
            answer = control.status()
    except Exception as exc:
        print(f"ttj local-cluster: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(answer, indent=2))
    return 0
