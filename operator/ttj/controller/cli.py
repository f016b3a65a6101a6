"""``ttj operator``: run the operator against the cluster in KUBECONFIG, or in-cluster."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os

from ttj_contract import CHIEF_STARTUP_SECONDS

DEFAULT_LIVENESS = "http://0.0.0.0:8080/healthz"
#: The exit code of a replica that lost the leader Lease (its pod restarts and stands by).
LOST_LEADERSHIP = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        metavar="NS",
        help="watch only this namespace (repeatable; kopf glob patterns allowed); default: all namespaces",
    )
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace (the default)")
    parser.add_argument(
        "--metrics-port", type=int, default=8000, help="port of the Prometheus /metrics endpoint; 0 turns it off [8000]"
    )
    parser.add_argument(
        "--liveness", default=DEFAULT_LIVENESS, help=f"liveness endpoint URL, or 'none' [{DEFAULT_LIVENESS}]"
    )
    parser.add_argument(
        "--lease-duration",
        type=int,
        default=30,
        metavar="SECONDS",
        help="leaseDurationSeconds of the chief Lease; a chief silent this long is replaced [30]",
    )
    parser.add_argument(
        "--chief-startup",
        type=int,
        default=CHIEF_STARTUP_SECONDS,
        metavar="SECONDS",
        help=f"time a newly elected chief gets before its first renewal [{CHIEF_STARTUP_SECONDS}]",
    )
    parser.add_argument(
        "--node-grace",
        type=int,
        default=30,
        metavar="SECONDS",
        help="a node NotReady (or gone) this long has lost its pods [30]",
    )
    parser.add_argument(
        "--resync", type=float, default=60.0, metavar="SECONDS", help="replan every job at least this often [60]"
    )
    parser.add_argument(
        "--prices",
        default=None,
        metavar="FILE",
        help="price file for cost accrual (default: TTJ_PRICES_FILE or the packaged prices)",
    )
    parser.add_argument(
        "--no-cost", action="store_true", help="do not accrue cost (status.cost stays 0; budgets are not checked)"
    )
    parser.add_argument(
        "--no-placement-check",
        action="store_true",
        help="do not match jobs against the node pools (GKE API with TTJ_GKE_* settings, else Node labels)",
    )
    election = parser.add_argument_group("leader election (run 2+ replicas, one acts)")
    election.add_argument(
        "--leader-elect",
        action="store_true",
        help="act only while holding the coordination.k8s.io Lease ttj-operator-leader; the others wait",
    )
    election.add_argument(
        "--leader-election-namespace",
        default=None,
        metavar="NS",
        help="namespace of the leader Lease (default: POD_NAMESPACE, else the service account's namespace)",
    )
    election.add_argument(
        "--leader-election-identity",
        default=None,
        metavar="ID",
        help="this replica's holderIdentity (default: POD_NAME or the hostname, and a random suffix)",
    )
    election.add_argument(
        "--leader-election-lease-duration",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="a standby takes over a Lease unrenewed this long; the leader stops after 2/3 of it [15]",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")


class KopfFailure(logging.Handler):
    """Whether kopf's runner has logged a failure of one of its root tasks (a watcher that gave up...).

    kopf then stops, but returns from ``kopf.operator`` only once every task of the event loop has ended,
    which can take indefinitely; it offers no public flag for it. A leader whose operator failed must
    stop renewing at once, or the standby would wait forever: this log record is the signal."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.failed = False

    def emit(self, record: logging.LogRecord) -> None:
        self.failed = True

    def none(self) -> bool:
        return not self.failed


def main(args: argparse.Namespace) -> int:
    import kopf
    from kubernetes import client, config
    from prometheus_client import CollectorRegistry

    from ttj.controller import heap
    from ttj.controller.handlers import OperatorContext, register
    from ttj.controller.metrics import Metrics
    from ttj.planner import PlannerConfig

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if heap.install_from_env():
        logging.getLogger("ttj").warning("tracing allocations (%s): slower, for measurements only", heap.ENV)
    if not args.verbose:  # kopf logs every handled event at INFO
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    configuration = client.Configuration()
    try:
        if os.environ.get("KUBECONFIG") or not os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except config.ConfigException as exc:
        logging.getLogger("ttj").error("no cluster to talk to: %s (set KUBECONFIG, or run in a pod)", exc)
        return 2
    from ttj.controller.placement import PlacementSource
    from ttj.cost.gke import GkeSettingsError
    from ttj.cost.prices import PriceSource, PriceTableError

    prices: PriceSource | None = None
    if not args.no_cost:
        prices = PriceSource(args.prices)
        try:
            prices.current()  # a broken file stops the start; later broken edits keep the last good table
        except PriceTableError as exc:
            logging.getLogger("ttj").error("%s", exc)
            return 2
    try:
        placement = None if args.no_placement_check else PlacementSource.from_env()
    except GkeSettingsError as exc:
        logging.getLogger("ttj").error("%s", exc)
        return 2
    api = client.ApiClient(configuration)
    elector = None
    if args.leader_elect:
        from ttj.controller.leader import ElectionTiming, Fenced, LeaderElector, default_identity, default_namespace
        from ttj.kubeapi import KubeClient

        duration = args.leader_election_lease_duration
        elector = LeaderElector(
            KubeClient(api),
            namespace=args.leader_election_namespace or default_namespace(),
            identity=args.leader_election_identity or default_identity(),
            timing=ElectionTiming(
                lease_duration=duration, renew_deadline=duration * 2 / 3, retry_period=duration / 7.5
            ),
        )
    ctx = OperatorContext(
        api=api,
        kube=Fenced(KubeClient(api), elector) if elector is not None else None,
        metrics=Metrics(CollectorRegistry()),
        planner=PlannerConfig(
            lease_duration_seconds=args.lease_duration,
            chief_startup_seconds=args.chief_startup,
            node_grace_seconds=args.node_grace,
            resync_seconds=args.resync,
        ),
        metrics_port=args.metrics_port or None,
        prices=prices,
        placement=placement,
    )
    registry = kopf.OperatorRegistry()
    kopf.on.login(registry=registry)(kopf.login_via_client)
    register(registry, ctx)
    namespaces = args.namespace or []
    liveness = None if args.liveness.lower() == "none" else args.liveness

    async def operate() -> None:
        await kopf.operator(
            registry=registry,
            standalone=True,
            clusterwide=not namespaces,
            namespaces=namespaces,
            liveness_endpoint=liveness,
        )

    def lost() -> None:
        logging.shutdown()
        os._exit(LOST_LEADERSHIP)  # now: no write in flight in any thread may still go out

    try:
        if elector is None:
            asyncio.run(operate())
        else:
            from ttj.controller.leader import run_as_leader

            failed = KopfFailure()
            logging.getLogger("kopf._core.reactor.running").addHandler(failed)
            asyncio.run(run_as_leader(elector, operate, lost, standby_health=liveness, healthy=failed.none))
    except KeyboardInterrupt:
        pass
    finally:
        ctx.api.close()  # type: ignore[no-untyped-call]
    return 0
