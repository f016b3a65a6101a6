"""``ttj operator``: run the operator against the cluster in KUBECONFIG, or in-cluster."""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
from typing import TYPE_CHECKING

from ttj import __version__
from ttj_contract import CHIEF_STARTUP_SECONDS

if TYPE_CHECKING:  # imported where used: ``ttj --help`` and the other commands start without kopf
    import kopf
    from kubernetes.client import ApiClient

    from ttj.controller.context import OperatorContext
    from ttj.controller.leader import LeaderElector
    from ttj.controller.placement import PlacementSource
    from ttj.cost.prices import PriceSource

DEFAULT_LIVENESS = "http://0.0.0.0:8080/healthz"
OPERATOR_USER_AGENT = f"ttj-operator/{__version__}"
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
    """Whether kopf has logged the failure of one of its lasting tasks: a root task (a watcher that gave up
    stops the operator) or the watcher of one resource kind, which kopf never starts again: a watch stream
    that ends with an ERROR event other than 410 (kube-apiserver sends 504 "Too large resource version"
    after an etcd restore, for one) leaves that kind unwatched, the indexes frozen and every job's passes
    planning on them, while the operator looks alive.

    kopf returns from ``kopf.operator`` only once every task of the event loop has ended, which can take
    indefinitely, and offers no public flag for either failure. A leader whose operator failed must stop
    renewing at once, or the standby would wait forever: these log records are the signal."""

    #: kopf's loggers of its lasting tasks; at ERROR they log only their failures (request retries are
    #: logged by the clients' loggers).
    LOGGERS = ("kopf._core.reactor.running", "kopf._core.reactor.orchestration")

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.failed = False

    def emit(self, record: logging.LogRecord) -> None:
        self.failed = True

    def attach(self) -> KopfFailure:
        for name in self.LOGGERS:
            logging.getLogger(name).addHandler(self)
        return self

    def detach(self) -> None:
        for name in self.LOGGERS:
            logging.getLogger(name).removeHandler(self)

    def none(self) -> bool:
        return not self.failed


class StartRefused(Exception):
    """A setting the operator cannot start with; its message says which and what to do."""


def main(args: argparse.Namespace) -> int:
    _configure_logging(args.verbose)
    _trace_allocations_if_asked()
    try:
        api = _api_client()
        prices, placement = _price_and_placement_sources(args)
    except StartRefused as exc:
        logging.getLogger("ttj").error("%s", exc)
        return 2
    elector = _elector(args, api)
    ctx = _operator_context(args, api, elector, prices, placement)
    try:
        _run(ctx, elector, args.namespace or [], None if args.liveness.lower() == "none" else args.liveness)
    except KeyboardInterrupt:
        pass
    finally:
        ctx.api.close()  # type: ignore[no-untyped-call]
    return 0


def _configure_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not verbose:  # kopf logs every handled event at INFO
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)


def _trace_allocations_if_asked() -> None:
    """A measurement run's heap summary (ttj.controller.heap), when its environment variable names a file."""
    from ttj.controller import heap

    if heap.install_from_env():
        logging.getLogger("ttj").warning("tracing allocations (%s): slower, for measurements only", heap.ENV)


def _api_client() -> ApiClient:
    """A client of the cluster in KUBECONFIG, or of the one the operator's pod runs in."""
    from kubernetes import client, config

    from ttj.controller.context import API_THREADS

    configuration = client.Configuration()
    try:
        if os.environ.get("KUBECONFIG") or not os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except config.ConfigException as exc:
        raise StartRefused(f"no cluster to talk to: {exc} (set KUBECONFIG, or run in a pod)") from exc
    # a connection for each thread that sends requests: the passes', and asyncio's default executor's
    configuration.connection_pool_maxsize = API_THREADS + min(32, (os.cpu_count() or 1) + 4)
    api = client.ApiClient(configuration)
    api.user_agent = OPERATOR_USER_AGENT  # the operator's requests told apart in audit logs and request counts
    return api


def _price_and_placement_sources(args: argparse.Namespace) -> tuple[PriceSource | None, PlacementSource | None]:
    from ttj.controller.placement import PlacementSource
    from ttj.cost.gke import GkeSettingsError
    from ttj.cost.prices import PriceSource, PriceTableError

    prices: PriceSource | None = None
    if not args.no_cost:
        prices = PriceSource(args.prices)
        try:
            prices.current()  # a broken file stops the start; later broken edits keep the last good table
        except PriceTableError as exc:
            raise StartRefused(str(exc)) from exc
    try:
        placement = None if args.no_placement_check else PlacementSource.from_env()
    except GkeSettingsError as exc:
        raise StartRefused(str(exc)) from exc
    return prices, placement


def _elector(args: argparse.Namespace, api: ApiClient) -> LeaderElector | None:
    """The leader election of ``--leader-elect``; None: this replica leads alone."""
    if not args.leader_elect:
        return None
    from ttj.controller.leader import ElectionTiming, LeaderElector, default_identity, default_namespace
    from ttj.kubeapi import KubeClient

    duration = args.leader_election_lease_duration
    return LeaderElector(
        KubeClient(api),
        namespace=args.leader_election_namespace or default_namespace(),
        identity=args.leader_election_identity or default_identity(),
        timing=ElectionTiming(lease_duration=duration, renew_deadline=duration * 2 / 3, retry_period=duration / 7.5),
    )


def _operator_context(
    args: argparse.Namespace,
    api: ApiClient,
    elector: LeaderElector | None,
    prices: PriceSource | None,
    placement: PlacementSource | None,
) -> OperatorContext:
    from prometheus_client import CollectorRegistry

    from ttj.controller.context import OperatorContext
    from ttj.controller.leader import Fenced
    from ttj.controller.metrics import Metrics
    from ttj.kubeapi import KubeClient
    from ttj.planner import PlannerConfig

    return OperatorContext(
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
        namespaces=tuple(args.namespace or ()),
        prices=prices,
        placement=placement,
    )


def _run(ctx: OperatorContext, elector: LeaderElector | None, namespaces: list[str], liveness: str | None) -> None:
    """Runs kopf with the handlers of ``ctx`` until it stops, as the leader's while ``elector`` is given."""
    import kopf

    from ttj.controller.handlers import register

    registry = kopf.OperatorRegistry()
    kopf.on.login(registry=registry)(kopf.login_via_client)
    register(registry, ctx)
    operate = functools.partial(_operate, registry, namespaces, liveness)
    if elector is None:
        asyncio.run(operate())
        return
    from ttj.controller.leader import run_as_leader

    failed = KopfFailure().attach()
    asyncio.run(run_as_leader(elector, operate, _exit_lost_leadership, standby_health=liveness, healthy=failed.none))


async def _operate(registry: kopf.OperatorRegistry, namespaces: list[str], liveness: str | None) -> None:
    import kopf

    await kopf.operator(
        registry=registry,
        standalone=True,
        clusterwide=not namespaces,
        namespaces=namespaces,
        liveness_endpoint=liveness,
    )


def _exit_lost_leadership() -> None:
    logging.shutdown()
    os._exit(LOST_LEADERSHIP)  # now: no write in flight in any thread may still go out
