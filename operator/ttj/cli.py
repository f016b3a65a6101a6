"""The ``ttj`` command: one entry point, a subcommand per part of the product.

Each subcommand lives beside the code it runs, in a ``cli`` module exposing
``add_arguments(parser)`` and ``main(args) -> int``; heavy imports happen inside ``main``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

#: subcommand → (module with add_arguments/main, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "crd": ("ttj.api.cli", "print the TransientTrainingJob CustomResourceDefinition (YAML)"),
    "operator": ("ttj.controller.cli", "run the operator against the cluster in KUBECONFIG or in-cluster"),
    "local-cluster": ("ttj.localcluster.cli", "run the embedded local Kubernetes cluster in the foreground"),
    "simulate": ("ttj.simulate.cli", "predict time, cost and failure odds of a job under preemptions"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ttj",
        description="TransientTrainingJob: distributed TensorFlow training on spot/preemptible GPUs "
        "that survives preemption.",
        epilog="Run `ttj COMMAND --help` for a command's options.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue  # a part not built into this installation
        command = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(command)
        command.set_defaults(_main=module.main)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args._main(args))


if __name__ == "__main__":
    sys.exit(main())
