"""An image's root filesystem, and its entrypoint run there as the image's user, without a container runtime.

Where containers cannot run (no cgroups, no daemon) an image can still be checked: a buildah working
container gives a writable copy of its root filesystem, and ``chroot --userspec`` runs the entrypoint in
it with the image's environment, user and working directory, as a container runtime would start it. Only
the mounts are private (the host's /proc, /dev and /sys bound in, the root optionally read-only): it
shares the host's network and process table and has no resource limits. Needs root, buildah and
podman. Standard library only, so that it runs on the host Python; ``images/check.py`` and the e2e suite's
operator-from-image mode (``TTJ_E2E_OPERATOR_IMAGE``) use it.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Runs on the host, inside the new mount namespace: $1 mount(8), $2 the root, then either "--" or
#: "--read-only DIR... --" (the root read-only but for DIRs, as ``readOnlyRootFilesystem`` with volumes
#: there), then the command. /proc, /dev and /sys are the host's, bound in as a runtime provides them.
_MOUNT_AND_EXEC = """
mount=$1 root=$2
shift 2
if [ "$1" = --read-only ]; then
    shift
    "$mount" --bind "$root" "$root" || exit 125
    while [ "$1" != -- ]; do "$mount" --bind "$root$1" "$root$1" || exit 125; shift; done
    "$mount" -o remount,bind,ro "$root" || exit 125
fi
shift
for fs in proc dev sys; do "$mount" --rbind "/$fs" "$root/$fs" || exit 125; done
exec "$@"
"""


class ImageRootError(Exception):
    """The image cannot be opened, or its configuration cannot be run here."""


@dataclass(frozen=True)
class ImageRoot:
    """A mounted working container of ``image``: ``path`` is its (writable) root filesystem."""

    image: str
    path: Path
    config: Mapping[str, object]

    @property
    def env(self) -> dict[str, str]:
        """The image's environment (``ENV``), with HOME set as Docker sets it when the image does not."""
        env = dict(entry.split("=", 1) for entry in _strings(self.config.get("Env")))
        env.setdefault("HOME", self.home(self.uid))
        return env

    @property
    def user(self) -> str:
        return str(self.config.get("User") or "0")

    @property
    def uid(self) -> int:
        name, _, _ = self.user.partition(":")
        return _lookup(self.path / "etc/passwd", name)

    @property
    def gid(self) -> int:
        _, _, group = self.user.partition(":")
        if group:
            return _lookup(self.path / "etc/group", group)
        for line in _lines(self.path / "etc/passwd"):
            fields = line.split(":")
            if len(fields) > 3 and int(fields[2]) == self.uid:
                return int(fields[3])
        return self.uid

    @property
    def entrypoint(self) -> list[str]:
        return _strings(self.config.get("Entrypoint"))

    @property
    def workdir(self) -> str:
        return str(self.config.get("WorkingDir") or "/")

    def home(self, uid: int) -> str:
        for line in _lines(self.path / "etc/passwd"):
            fields = line.split(":")
            if len(fields) > 5 and int(fields[2]) == uid:
                return fields[5]
        return "/"

    def command(
        self, args: Sequence[str], env: Mapping[str, str] | None = None, writable: Sequence[str] | None = None
    ) -> tuple[list[str], dict[str, str]]:
        """(argv, environment) that start the entrypoint with ``args`` (in place of CMD) as the image does.

        In a private mount namespace (gone with its last process), ``chroot`` switches to the image's
        user; for a WORKDIR other than ``/`` the image's own ``env --chdir`` moves there. The entrypoint
        is the process ``argv`` finally becomes, so killing it kills the entrypoint. ``env`` adds to (or
        overrides) the image's environment. With ``writable`` (absolute directories of the image), the
        root filesystem is read-only but for those."""
        chroot = [_host_tool("chroot"), f"--userspec={self.uid}:{self.gid}", f"--groups={self.gid}", str(self.path)]
        if self.workdir != "/":
            chroot += ["/usr/bin/env", f"--chdir={self.workdir}"]
        mounts = ["--"] if writable is None else ["--read-only", *writable, "--"]
        argv = [_host_tool("unshare"), "--mount", "--propagation", "private", "--"]
        argv += [_host_tool("sh"), "-c", _MOUNT_AND_EXEC, "sh", _host_tool("mount"), str(self.path), *mounts]
        return [*argv, *chroot, *self.entrypoint, *args], {**self.env, **(env or {})}

    def run(
        self,
        args: Sequence[str],
        env: Mapping[str, str] | None = None,
        writable: Sequence[str] | None = None,
        timeout: float = 600,
    ) -> subprocess.CompletedProcess[str]:
        argv, environment = self.command(args, env, writable)
        return subprocess.run(argv, env=environment, capture_output=True, text=True, timeout=timeout, check=False)


@contextlib.contextmanager
def open_image(image: str) -> Iterator[ImageRoot]:
    """A buildah working container of ``image`` (already in local storage), mounted; removed on exit."""
    inspected = json.loads(_output(["podman", "image", "inspect", image]))
    config = inspected[0].get("Config") or {}
    container = _output(["buildah", "from", "--pull=never", "--quiet", image]).strip()
    try:
        path = Path(_output(["buildah", "mount", container]).strip())
        yield ImageRoot(image=image, path=path, config=config)
    finally:
        subprocess.run(["buildah", "rm", container], capture_output=True, check=False)


def _output(argv: Sequence[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    except FileNotFoundError as err:
        raise ImageRootError(f"{argv[0]} is not installed (needed to open images without a runtime)") from err
    except subprocess.CalledProcessError as err:
        raise ImageRootError(f"{' '.join(argv)} failed: {err.stderr.strip()}") from err


def _host_tool(name: str) -> str:
    """The host's ``name``, by absolute path: the command runs with the image's PATH, not the host's."""
    path = shutil.which(name)
    if path is None:
        raise ImageRootError(f"{name} is not installed on this host")
    return path


def _strings(value: object) -> list[str]:
    return [str(item) for item in value] if isinstance(value, list) else []


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []


def _lookup(database: Path, name: str) -> int:
    """A user or group id: numeric as it is, else looked up in the image's (not the host's) database."""
    if name.isdigit():
        return int(name)
    for line in _lines(database):
        fields = line.split(":")
        if fields[0] == name and len(fields) > 2:
            return int(fields[2])
    raise ImageRootError(f"{name!r} is not in the image's {database.name}")


if __name__ == "__main__":
    import sys

    if len(sys.argv) < 2:
        sys.exit("usage: python3 images/imageroot.py IMAGE [ARG...]: run IMAGE's entrypoint with ARGs in chroot")
    with open_image(sys.argv[1]) as root:
        argv, environment = root.command(sys.argv[2:])
        sys.exit(subprocess.run(argv, env=environment, check=False).returncode)
