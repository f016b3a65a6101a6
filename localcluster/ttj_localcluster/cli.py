"""``ttj local-cluster --kubeconfig PATH``: run the embedded cluster in the foreground until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from .nodes import cli as nodes_cli

#: The ``ttj local-cluster`` line of ``ttj --help`` (this module is the ``ttj.commands`` entry point).
HELP = "run the local Kubernetes cluster (API server, simulated GKE nodes) in the foreground"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        required=True,
        metavar="PATH",
        help="write the cluster's kubeconfig here once it is ready (with --nodes-only: the existing cluster's)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to serve the API on [%(default)s]")
    parser.add_argument(
        "--port", type=int, default=0, help="port to serve the API on; 0 picks a free one [%(default)s]"
    )
    parser.add_argument(
        "--authorization-mode",
        choices=("AlwaysAllow", "RBAC"),
        default="AlwaysAllow",
        help="AlwaysAllow: every authenticated or anonymous request is allowed; RBAC: Roles, ClusterRoles and "
        "their bindings decide, as kube-apiserver --authorization-mode=RBAC (the kubeconfig's user is in "
        "system:masters; pods get their service account's token) [%(default)s]",
    )
    nodes_cli.add_arguments(parser)


def _import_crd_validation() -> None:
    """Import what the first CRD needs (jsonschema, cel-python) once the cluster is up and idle, rather than
    in the API server's event loop when someone applies it (a pause of up to a second on this machine)."""
    try:
        import celpy  # noqa: F401
        import jsonschema  # noqa: F401
    except ImportError:
        pass  # reported when a CRD needs them


def main(args: argparse.Namespace) -> int:
    """Ready means: the kubeconfig is written as soon as the API server answers; the add-ons (nodes, scheduler,
    controllers) start right after, and a second line says when the nodes are registered and Ready."""
    from .cluster import LocalCluster

    # Control options (--preempt-node, --status, ...) act on a running cluster instead of starting one.
    status = nodes_cli.run_command(args)
    if status is not None:
        return status
    nodes_cli.check_arguments(args)  # bad pool options stop the command before the API server starts

    stop = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    if args.nodes_only:
        return attach_nodes(args, stop)
    cluster = LocalCluster(
        host=args.host, port=args.port, kubeconfig_path=args.kubeconfig, authorization_mode=args.authorization_mode
    )
    try:
        cluster.start()
    except (OSError, RuntimeError) as exc:
        print(f"ttj local-cluster: could not start: {exc}", file=sys.stderr)
        return 1
    print(f"ttj local-cluster: serving {cluster.url}; kubeconfig written to {args.kubeconfig}", flush=True)
    try:
        cluster.start_addons(nodes_cli.build_addons(args))
        print("ttj local-cluster: nodes registered; scheduler and controllers running", flush=True)
        threading.Thread(target=_import_crd_validation, name="warm-up", daemon=True).start()
        while not stop.wait(0.5):
            pass
    except Exception as exc:
        print(f"ttj local-cluster: the node add-ons did not start: {exc}", file=sys.stderr)
        return 1
    finally:
        cluster.stop()
    print("ttj local-cluster: stopped", flush=True)
    return 0


def attach_nodes(args: argparse.Namespace, stop: threading.Event) -> int:
    """``--nodes-only``: the node add-ons, as clients of the API server in the given kubeconfig, until stopped."""
    from .nodes.fleet_ownership import FleetConflict

    addons = nodes_cli.build_addons(args)
    started = []
    try:
        for addon in addons:
            addon.start(args.kubeconfig)
            started.append(addon)
        names = ", ".join(type(addon).__name__ for addon in started)
        print(f"ttj local-cluster: {names} attached to the API server of {args.kubeconfig}", flush=True)
        while not stop.wait(0.5):
            pass
    except FleetConflict as exc:
        print(f"ttj local-cluster: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        print(f"ttj local-cluster: the node add-ons did not start: {exc}", file=sys.stderr)
        return 1
    finally:
        for addon in reversed(started):
            addon.stop()
    print("ttj local-cluster: stopped", flush=True)
    return 0


def run(argv: list[str] | None = None) -> int:
    """``ttj-local-cluster``: the same command without the operator's ``ttj`` front end."""
    parser = argparse.ArgumentParser(prog="ttj-local-cluster", description=HELP)
    add_arguments(parser)
    return main(parser.parse_args(argv))
