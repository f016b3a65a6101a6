"""`ttj simulate` prints and writes exactly what it did: each case's exit status, output and files against a
stored copy under outputs/, so moving code around the simulator cannot change a byte unnoticed.

After a deliberate change of the output, write the copies anew and read their diff:
`TTJ_WRITE_OUTPUTS=1 .venv/bin/pytest tests/simulate/test_outputs.py`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ttj.cli import main

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "simulate" / "k80-transient-4.yaml")
OUTPUTS = Path(__file__).resolve().parent / "outputs"

#: case → the arguments after `ttj simulate`; the files they write land in the working directory
CASES: dict[str, list[str]] = {
    "plan-uniform": [
        EXAMPLE, "--plan", "--max-gpus", "5", "--plan-runs", "20", "--plan-out", "plan.yaml", "--json", "plan.json",
    ],
    "plan-mixed-zones": [
        EXAMPLE, "--plan", "--accelerators", "t4,l4", "--provisioning", "spot,on-demand", "--deadline", "0.65",
        "--price-table", "gce-us-central1", "--max-gpus", "3", "--plan-runs", "10", "--available", "l4=1",
        "--zones", "l4=us-central1-b", "--ps-zone", "us-central1-a", "--plan-out", "plan.yaml", "--json", "plan.json",
    ],
    "plan-impossible": [
        EXAMPLE, "--plan", "--deadline", "0.3", "--max-gpus", "4", "--plan-runs", "10", "--json", "plan.json",
    ],
    "plan-budget": [
        EXAMPLE, "--plan", "--budget", "1.3", "--max-gpus", "3", "--plan-runs", "10", "--policies", "paper",
    ],
    "plan-bad-confidence": [EXAMPLE, "--plan", "--confidence", "1.5"],
    "compare": [
        EXAMPLE, "--runs", "6", "--workers", "2,4", "--interval-runs", "3", "--deadline", "3", "--no-chart",
        "--json", "out.json",
    ],
    "compare-bad-policy": [EXAMPLE, "--policies", "ttj,nope", "--no-chart"],
}  # fmt: skip


def _transcript(rc: int, out: str, err: str, workdir: Path) -> str:
    parts = [f"exit status {rc}\n", "=== stdout\n", out, "=== stderr\n", err]
    for path in sorted(workdir.iterdir()):
        parts += [f"=== {path.name}\n", path.read_text(encoding="utf-8"), "\n"]
    return "".join(parts)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_output_is_what_it_was(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    rc = main(["simulate", *CASES[case]])
    captured = capsys.readouterr()
    transcript = _transcript(rc, captured.out, captured.err, tmp_path)
    stored = OUTPUTS / f"{case}.txt"
    if os.environ.get("TTJ_WRITE_OUTPUTS"):
        OUTPUTS.mkdir(exist_ok=True)
        stored.write_text(transcript, encoding="utf-8")
    assert transcript == stored.read_text(encoding="utf-8")
