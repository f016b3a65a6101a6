"""Check the built operator and trainer images from their root filesystems (``make image-test``).

Each image's entrypoint runs in chroot as the image's own user (see imageroot.py), so the checks prove
the entrypoint, the user, the environment and the installed dependencies, not just that a build ended:

operator  runs as the non-root user manifests/base/deployment.yaml runs it as, on a root filesystem as
          read-only as there; ``ttj --version`` reports the operator's version; ``ttj crd`` prints
          exactly crds/; ``ttj operator --help`` starts the CLI with every import the operator needs; and
          the image holds no TensorFlow, no local cluster or demo code, no trainer, and no compilers.
trainer   runs as a non-root user; ``--self-check`` imports TensorFlow, runs an operation, lists the
          devices, parses a sample TF_CONFIG and reports the versions.

Prints one line per check and exits 1 when any failed. Needs root, podman, buildah and PyYAML.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from imageroot import ImageRoot, open_image  # beside this script, not a package

ROOT = Path(__file__).resolve().parents[1]
CRD = ROOT / "crds" / "transient.training_transienttrainingjobs.yaml"
DEPLOYMENT = ROOT / "manifests" / "base" / "deployment.yaml"
#: Nothing the operator does needs these; their presence would mean the wrong extras or stage were copied.
FORBIDDEN_MODULES = ("tensorflow", "keras", "ttj_localcluster", "ttj_demo", "ttj_trainer", "matplotlib")
#: Compiler drivers, by the names distributions install them under (exact, or a versioned/triplet form).
COMPILERS = re.compile(r"^(?:[\w-]+-linux-gnu-)?(?:gcc|g\+\+|cc|c\+\+|clang|clang\+\+|tcc|rustc|gfortran)(?:-[\d.]+)?$")
BIN_DIRS = ("bin", "sbin", "usr/bin", "usr/sbin", "usr/local/bin", "usr/local/sbin")

Check = Callable[[ImageRoot], str]


@dataclass(frozen=True)
class PodRuntime:
    """How the operator's Deployment runs the image: its user and group, and, when the root filesystem is
    read-only, the directories its emptyDir volumes make writable."""

    uid: int | None
    gid: int | None
    writable: tuple[str, ...] | None


def operator_pod_runtime() -> PodRuntime:
    pod = yaml.safe_load(DEPLOYMENT.read_text())["spec"]["template"]["spec"]
    container = pod["containers"][0]
    security = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
    empty_dirs = {volume["name"] for volume in pod.get("volumes", []) if "emptyDir" in volume}
    mounts = container.get("volumeMounts", [])
    writable = tuple(mount["mountPath"] for mount in mounts if mount["name"] in empty_dirs)
    return PodRuntime(
        security.get("runAsUser"),
        security.get("runAsGroup"),
        writable if security.get("readOnlyRootFilesystem") else None,
    )


def operator_checks() -> Iterator[tuple[str, Check]]:
    pod = operator_pod_runtime()

    def deployment_user(root: ImageRoot) -> str:
        wanted = (pod.uid if pod.uid is not None else root.uid, pod.gid if pod.gid is not None else root.gid)
        if (root.uid, root.gid) != wanted:
            raise CheckFailed(
                f"USER {root.user}, but {DEPLOYMENT.relative_to(ROOT)} runs it as {wanted[0]}:{wanted[1]}"
            )
        if pod.writable is None:
            return f"{root.uid}:{root.gid}, writable root filesystem"
        return f"{root.uid}:{root.gid}, read-only root filesystem but {', '.join(pod.writable) or 'nothing'}"

    def succeed_as_deployed(root: ImageRoot, args: list[str]) -> str:
        return succeed(root, args, pod.writable)

    def version(root: ImageRoot) -> str:
        expected = tomllib.loads((ROOT / "operator" / "pyproject.toml").read_text())["project"]["version"]
        out = succeed_as_deployed(root, ["--version"]).strip()
        if not out.endswith(expected):
            raise CheckFailed(f"`ttj --version` said {out!r}, the operator's version is {expected}")
        return out

    def crd(root: ImageRoot) -> str:
        out = succeed_as_deployed(root, ["crd"])
        if out != CRD.read_text():
            raise CheckFailed(f"`ttj crd` differs from {CRD.relative_to(ROOT)}: rebuild the image, or `make crds`")
        return f"equal to {CRD.relative_to(ROOT)} ({len(out.splitlines())} lines)"

    def operator_help(root: ImageRoot) -> str:
        out = succeed_as_deployed(root, ["operator", "--help"])
        if "--all-namespaces" not in out:
            raise CheckFailed(f"`ttj operator --help` does not describe --all-namespaces:\n{out}")
        return out.splitlines()[0]

    def no_forbidden_modules(root: ImageRoot) -> str:
        found = sorted(
            str(path.relative_to(root.path))
            for name in FORBIDDEN_MODULES
            for pattern in (f"**/site-packages/{name}", f"**/dist-packages/{name}")
            for path in root.path.glob(pattern)
        )
        if found:
            raise CheckFailed(f"the operator image holds {', '.join(found)}")
        return f"none of {', '.join(FORBIDDEN_MODULES)}"

    def no_compilers(root: ImageRoot) -> str:
        found = sorted(
            f"/{directory}/{path.name}"
            for directory in BIN_DIRS
            if (root.path / directory).is_dir() and not (root.path / directory).is_symlink()
            for path in (root.path / directory).iterdir()
            if COMPILERS.match(path.name)
        )
        if found:
            raise CheckFailed(f"the operator image holds compilers: {', '.join(found)}")
        return f"no compiler in {', '.join('/' + d for d in BIN_DIRS)}"

    yield "runs as a non-root user", non_root
    yield "the Deployment's user and filesystem", deployment_user
    yield "ttj --version", version
    yield "ttj crd", crd
    yield "ttj operator --help", operator_help
    yield "no TensorFlow, local cluster, demo or trainer", no_forbidden_modules
    yield "no compilers", no_compilers


def trainer_checks() -> Iterator[tuple[str, Check]]:
    yield "runs as a non-root user", non_root

    def self_check(root: ImageRoot) -> str:
        report = json.loads(succeed(root, ["--self-check"]).strip().splitlines()[-1])
        if not any("CPU" in device for device in report["devices"]):
            raise CheckFailed(f"TensorFlow lists no CPU: {report['devices']}")
        return (
            f"trainer {report['trainer']}, TensorFlow {report['tensorflow']}, Python {report['python']}, "
            f"devices {report['devices']}, sample TF_CONFIG -> {report['role']} {report['task_index']}"
        )

    yield "python -m ttj_trainer --self-check", self_check


class CheckFailed(Exception):
    pass


def succeed(root: ImageRoot, args: list[str], writable: tuple[str, ...] | None = None) -> str:
    """The entrypoint's stdout with ``args``, as the image's user; CheckFailed unless it exits 0."""
    done = root.run(args, writable=writable)
    if done.returncode != 0:
        raise CheckFailed(f"entrypoint {args} exited {done.returncode}:\n{done.stderr.strip()[-2000:]}")
    return done.stdout


def non_root(root: ImageRoot) -> str:
    if root.uid == 0:
        raise CheckFailed(f"the image runs as root (USER {root.user!r})")
    return f"USER {root.user} (uid {root.uid}, gid {root.gid}), entrypoint {root.entrypoint}"


def run_checks(image: str, checks: Iterator[tuple[str, Check]]) -> int:
    failures = 0
    print(f"== {image}")
    with open_image(image) as root:
        for name, check in checks:
            try:
                print(f"ok    {name}: {check(root)}")
            except CheckFailed as failed:
                failures += 1
                print(f"FAIL  {name}: {failed}")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operator", metavar="IMAGE", help="the operator image to check")
    parser.add_argument("--trainer", metavar="IMAGE", help="the trainer image to check")
    args = parser.parse_args()
    if not (args.operator or args.trainer):
        parser.error("name at least one image: --operator IMAGE, --trainer IMAGE")
    failures = 0
    if args.operator:
        failures += run_checks(args.operator, operator_checks())
    if args.trainer:
        failures += run_checks(args.trainer, trainer_checks())
    print(f"{failures} check(s) failed" if failures else "all image checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
