"""The ``ttj`` command: one entry point, a subcommand per part of the product.

Each subcommand lives beside the code it runs, in a ``cli`` module exposing
``add_arguments(parser)`` and ``main(args) -> int``; heavy imports happen inside ``main``.
Other distributions add subcommands through the ``ttj.commands`` entry-point group (the local
cluster adds ``local-cluster``): the value names such a module, with a one-line ``HELP`` besides.
The operator never imports them; an installation without them simply has fewer commands.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, entry_points, version
from types import ModuleType

#: Entry-point group through which other distributions add ``ttj`` subcommands.
PLUGIN_GROUP = "ttj.commands"

#: subcommand → (module with add_arguments/main, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "crd": ("ttj.api.cli", "print the TransientTrainingJob CustomResourceDefinition (YAML)"),
    "operator": ("ttj.controller.cli", "run the operator against the cluster in KUBECONFIG or in-cluster"),
    "simulate": ("ttj.simulate.cli", "predict time, cost and failure odds of a job under preemptions"),
    "timeline": ("ttj.timeline.cli", "show a job's timeline (pods, chiefs, preemptions and their cost); -o draws it"),
}


def _version() -> str:
    try:
        return version("ttj")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree without an install
        return "unknown"


def _commands() -> dict[str, tuple[ModuleType, str]]:
    found: dict[str, tuple[ModuleType, str]] = {}
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        found[name] = (importlib.import_module(module_name), help_text)
    for entry in sorted(entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        if entry.name in found:
            continue
        module = importlib.import_module(entry.value)
        help_text = str(getattr(module, "HELP", entry.name))
        found[entry.name] = (module, help_text)
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ttj",
        description="TransientTrainingJob: distributed TensorFlow training on spot/preemptible GPUs "
        "that survives preemption.",
        epilog="Run `ttj COMMAND --help` for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"ttj {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in _commands().items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(command)
        command.set_defaults(_main=module.main)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "_main", None) is None:
        parser.print_help()
        return 0
    return int(args._main(args))


if __name__ == "__main__":
    sys.exit(main())
