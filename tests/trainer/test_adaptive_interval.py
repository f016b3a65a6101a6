"""The trainer's side of the adaptive checkpoint interval: it reads the operator's interval from the Lease and
publishes its measured write time in its progress report."""

from __future__ import annotations

from types import SimpleNamespace

from ttj_contract import ANNOTATION_CHECKPOINT_INTERVAL, LeaseProgress


def _lease(annotations: dict[str, str]) -> SimpleNamespace:
    spec = SimpleNamespace(holder_identity="w-0", lease_transitions=2, lease_duration_seconds=30)
    return SimpleNamespace(spec=spec, metadata=SimpleNamespace(annotations=annotations, resource_version="7"))


def test_lease_view_reads_the_published_interval() -> None:
    from ttj_trainer.lease import _view

    assert _view(_lease({ANNOTATION_CHECKPOINT_INTERVAL: "420"})).checkpoint_interval_seconds == 420
    # absent or broken: the trainer keeps the spec's own intervals
    assert _view(_lease({})).checkpoint_interval_seconds is None
    assert _view(_lease({ANNOTATION_CHECKPOINT_INTERVAL: "soon"})).checkpoint_interval_seconds is None
    assert _view(_lease({ANNOTATION_CHECKPOINT_INTERVAL: "0"})).checkpoint_interval_seconds == 1


def test_progress_carries_the_write_time_and_stays_readable_without_it() -> None:
    report = LeaseProgress(global_step=10, checkpoint_step=8, checkpoint_write_seconds=1.25)
    assert '"checkpointWriteSeconds":1.25' in report.to_annotation()
    assert LeaseProgress.from_annotation(report.to_annotation()) == report
    older = LeaseProgress.from_annotation('{"globalStep": 3, "checkpointStep": 2}')
    assert older is not None
    assert older.checkpoint_write_seconds is None
    assert LeaseProgress(global_step=1).to_annotation() == '{"globalStep":1}'


def test_the_contract_document_names_the_interval_annotation() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "contract.md").read_text(encoding="utf-8")
    assert ANNOTATION_CHECKPOINT_INTERVAL in doc
    assert "checkpointWriteSeconds" in doc
