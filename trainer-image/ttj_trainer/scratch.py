"""The trainer's own temporary directory.

TensorFlow's autograph writes a ``__autograph_generated_file*.py`` per converted function into the
temporary directory and never removes it; on a shared /tmp (a developer's machine, the local cluster) they
pile up by the hundred, and under a read-only root filesystem only a mounted emptyDir is writable. So the
trainer points ``tempfile`` (and ``TMPDIR`` for its children) at a directory of its own under the one it
was given, removes it when it exits, and sweeps the directories of trainers that died without doing so.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path

PREFIX = "ttj-trainer-"
_OWNED = re.compile(rf"^{re.escape(PREFIX)}(\d+)-")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep(parent: Path) -> list[Path]:
    """Remove the directories of trainers on this machine that are no longer running."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            owner = _OWNED.match(entry.name)
            if owner and int(owner.group(1)) != os.getpid() and not _alive(int(owner.group(1))):
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
    return removed


def claim() -> Path:
    """Make this process's temporary directory and point ``tempfile`` and ``TMPDIR`` at it."""
    parent = Path(tempfile.gettempdir())
    sweep(parent)
    own = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=parent))
    tempfile.tempdir = str(own)
    os.environ["TMPDIR"] = str(own)
    return own


def release(own: Path) -> None:
    shutil.rmtree(own, ignore_errors=True)
