"""The trainer keeps its temporary files (autograph's generated modules among them) in a directory it owns."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ttj_trainer import scratch

AUTOGRAPH_IN_A_TRAINER = """
import tempfile
from pathlib import Path
from ttj_trainer import scratch
own = scratch.claim()
import tensorflow as tf

@tf.function
def clipped(x):
    if x > 0:  # a Python branch on a tensor: autograph converts it, writing a module to the temp dir
        return x
    return -x

clipped(tf.constant(3.0))
generated = sorted(p.name for p in own.iterdir())
assert any(n.startswith("__autograph_generated_file") for n in generated), generated
assert tempfile.gettempdir() == str(own)
scratch.release(own)
print(own)
"""


def test_autograph_files_land_in_the_trainers_own_directory_and_go_with_it(tmp_path: Path) -> None:
    script = tmp_path / "trainer.py"  # autograph converts only functions whose source it can read
    script.write_text(AUTOGRAPH_IN_A_TRAINER)
    given = tmp_path / "tmp"
    given.mkdir()
    env = {**os.environ, "TMPDIR": str(given), "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    own = Path(done.stdout.strip().splitlines()[-1])
    assert own.parent == given
    assert list(given.iterdir()) == [], "nothing is left in the temp directory the trainer was given"


def test_a_dead_trainers_directory_is_swept_and_a_live_ones_kept(tmp_path: Path) -> None:
    finished = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    dead = tmp_path / f"{scratch.PREFIX}{finished.stdout.strip()}-abc"
    live = tmp_path / f"{scratch.PREFIX}{os.getppid()}-def"
    unrelated = tmp_path / "someone-else"
    for directory in (dead, live, unrelated):
        (directory / "x").mkdir(parents=True)
    assert scratch.sweep(tmp_path) == [dead]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, unrelated.name])
