"""`ttj simulate` end to end: the table, the policy comparison, the chart, the JSON, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ttj.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "simulate"


def test_examples_are_valid_jobs() -> None:
    from ttj.simulate.cli import load_job

    names = sorted(p.name for p in EXAMPLES.glob("*.yaml"))
    assert "k80-transient-4.yaml" in names
    for path in EXAMPLES.glob("*.yaml"):
        job = load_job(path)
        assert job.spec.model == "resnet32"
        assert job.spec.dataset == "cifar10"
        assert job.spec.workers.accelerator_type == "nvidia-tesla-k80"
        assert job.spec.checkpoint.uri.startswith("gs://")


def test_simulate_writes_table_chart_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chart = tmp_path / "chart.png"
    report = tmp_path / "summary.json"
    rc = main(
        [
            "simulate",
            str(EXAMPLES / "k80-transient-4.yaml"),
            "--runs", "12",
            "--workers", "2,4",
            "--deadline", "3",
            "--chart", str(chart),
            "--json", str(report),
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    assert "K80 transient x4" in out
    assert "ttj-planner" in out
    assert "tfjob-like" in out
    assert "paper-static" in out
    assert "Recommendation (ttj-planner)" in out
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summaries = json.loads(report.read_text())["summaries"]
    assert len(summaries) == 2 * 2 * 3  # workers × (preemptible, on-demand) × policies
    assert all(s["runs"] == 12 for s in summaries)


def test_bad_manifest_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: transient.training/v1alpha1\nkind: TransientTrainingJob\nspec: {trainSteps: 0}\n")
    assert main(["simulate", str(bad), "--no-chart"]) == 2
    err = capsys.readouterr().err
    assert "not a valid TransientTrainingJob" in err
    assert "trainSteps" in err
    assert main(["simulate", str(tmp_path / "missing.yaml"), "--no-chart"]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_the_simulator_core_imports_no_kubernetes() -> None:
    code = (
        "import sys, ttj.simulate.study, ttj.simulate.cli, ttj.simulate.report;"
        "bad = [m for m in ('kopf', 'kubernetes', 'aiohttp') if m in sys.modules];"
        "sys.exit(', '.join(bad) or None)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_a_job_with_defaults_simulates_with_notes_and_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CRD's default GPU (T4) has no runs and no price in the paper's table: priced from the default
    table with a note, flagged extrapolated with intervals; the single-GPU baseline is compared; an
    impossible deadline says which constraint failed."""
    manifest = tmp_path / "defaults.yaml"
    manifest.write_text(
        "apiVersion: transient.training/v1alpha1\nkind: TransientTrainingJob\nmetadata: {name: defaults}\n"
        "spec: {trainSteps: 20000, model: resnet32, dataset: cifar10, checkpoint: {uri: 'gs://bucket/ckpt'}}\n"
    )
    report = tmp_path / "out.json"
    rc = main(
        [
            "simulate", str(manifest), "--runs", "6", "--workers", "4", "--single-gpu", "--policies", "ttj",
            "--deadline", "0.01", "--no-chart", "--json", str(report),
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    assert "nvidia-tesla-t4 is not in price table icac19-table2 of ttj/data/prices.yaml" in out
    assert "TOO FEW REVOCATIONS TO TRUST" in out
    assert "T4 transient x1 no PS" in out
    assert "miss the deadline of 0.01 h at p95" in out
    payload = json.loads(report.read_text())
    rows = payload["summaries"]
    assert all(row["extrapolated"] for row in rows)
    assert all(row["throughput_low_steps_s"] < row["throughput_high_steps_s"] for row in rows)
    assert all(row["completion_low"] <= row["completion_rate"] <= row["completion_high"] for row in rows)
    assert payload["priceNotes"]
