"""``ttj crd``: print the CRD generated from the models."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", "-o", metavar="FILE", help="write to FILE instead of standard output")


def main(args: argparse.Namespace) -> int:
    from ttj.api.crd import crd_yaml

    text = crd_yaml()
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(text)
    else:
        sys.stdout.write(text)
    return 0
