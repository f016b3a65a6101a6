"""ttj_contract says what docs/contract.md says: one vocabulary, pinned to the published contract.

The parts of ttj import these names rather than spelling them; this test is the one place that holds the
module to the document users read, so a rename shows up here before it reaches a cluster.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import ttj_contract as contract
from ttj_contract import Env, LeaseProgress, Provisioning

DOC = (Path(__file__).resolve().parents[2] / "docs" / "contract.md").read_text()


@pytest.mark.parametrize(
    "name",
    [
        contract.LABEL_JOB,
        contract.LABEL_ROLE,
        contract.LABEL_SLOT,
        contract.LABEL_CHIEF,
        contract.LABEL_WORKER_GROUP,
        contract.ANNOTATION_ACTIVE_WORKERS,
        contract.ANNOTATION_DESIRED_WORKERS,
        contract.ANNOTATION_PROGRESS,
        contract.API_VERSION,
        contract.KIND,
        contract.lease_name("NAME"),
        *(member.value for member in Env),
    ],
)
def test_every_published_name_is_in_the_contract_document(name: str) -> None:
    assert re.search(rf"(?<![\w/.-]){re.escape(name)}(?![\w/-])", DOC), f"{name!r} is not in docs/contract.md"


def test_roles_are_the_documented_label_values() -> None:
    assert f"`{contract.LABEL_ROLE}` = `{contract.Role.PS}` or `{contract.Role.WORKER}`" in DOC


def test_the_progress_record_has_the_documented_keys() -> None:
    documented = re.search(r"annotation `transient\.training/progress`, JSON\s+`(\{[^`]*\})`", DOC)
    assert documented is not None
    keys = re.findall(r'"(\w+)"', documented.group(1))
    full = LeaseProgress(
        7,
        checkpoint_step=5,
        checkpoint_path="/ckpt/model.ckpt-5",
        checkpoint_time="t",
        checkpoint_write_seconds=1.5,
        epoch=2,
        last_error="e",
        evaluation_step=4,
        evaluation={"loss": 0.5, "accuracy": 0.75},
        export_path="/ckpt/export/step-5",
        parameter_bytes=(1024, 2048),
        slot_steps_per_second={0: 2.5, 3: 7.25},
        loss=0.25,
    )
    assert list(json.loads(full.to_annotation())) == keys
    assert LeaseProgress.from_annotation(full.to_annotation()) == full


@pytest.mark.parametrize(
    ("rates", "read"),
    [
        ('{"0": 2.5, "12": 0}', {0: 2.5, 12: 0.0}),
        ("{}", {}),
        ('{"a": 1}', None),
        ('{"0": "fast"}', None),
        ('{"-1": 1}', None),
        ('{"0": -1}', None),
        ("[1, 2]", None),
        ("3", None),
    ],
)
def test_slot_rates_read_tolerantly(rates: str, read: dict[int, float] | None) -> None:
    """A malformed slotStepsPerSecond is dropped; the rest of the report stands."""
    text = f'{{"globalStep": 9, "epoch": 1, "slotStepsPerSecond": {rates}}}'
    assert LeaseProgress.from_annotation(text) == LeaseProgress(9, epoch=1, slot_steps_per_second=read)


@given(
    step=st.integers(min_value=0, max_value=2**53),
    checkpoint=st.none() | st.integers(min_value=0, max_value=2**53),
    path=st.none() | st.text(),
)
def test_progress_survives_the_annotation(step: int, checkpoint: int | None, path: str | None) -> None:
    record = LeaseProgress(
        step, checkpoint_step=checkpoint, checkpoint_path=path, checkpoint_time="2026-11-21T10:00:00Z"
    )
    assert LeaseProgress.from_annotation(record.to_annotation()) == record


@pytest.mark.parametrize("text", [None, "", "not json", "[]", '{"globalStep": "many"}', '"7"'])
def test_a_malformed_progress_report_reads_as_none(text: str | None) -> None:
    assert LeaseProgress.from_annotation(text) is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("[1024, 0, 512]", (1024, 0, 512)),
        ("[]", ()),
        ('"many"', None),
        ("[1.5]", None),
        ("[-1]", None),
        ("[true]", None),
        ("null", None),
    ],
)
def test_a_malformed_parameter_bytes_is_dropped_alone(raw: str, expected: tuple[int, ...] | None) -> None:
    assert LeaseProgress.from_annotation(f'{{"globalStep": 9, "parameterBytes": {raw}}}') == LeaseProgress(
        9, parameter_bytes=expected
    )


def test_only_the_global_step_is_needed_before_the_first_checkpoint() -> None:
    assert LeaseProgress(12).to_annotation() == '{"globalStep":12}'
    assert LeaseProgress.from_annotation('{"globalStep": -3}') == LeaseProgress(0)


def test_time_and_micro_time_have_the_api_servers_formats() -> None:
    moment = datetime(2026, 11, 21, 11, 0, 0, 123456, tzinfo=timezone(timedelta(hours=1)))
    assert contract.format_time(moment) == "2026-11-21T10:00:00Z"
    # kube-apiserver refuses "+00:00" and a missing fraction in a MicroTime field.
    assert contract.format_micro_time(moment) == "2026-11-21T10:00:00.123456Z"
    assert contract.format_epoch_time(moment.timestamp()) == "2026-11-21T10:00:00Z"
    assert contract.parse_time("2026-11-21T10:00:00.123456Z") == moment
    assert contract.parse_time("2026-11-21T10:00:00Z") == datetime(2026, 11, 21, 10, tzinfo=UTC)
    assert contract.parse_time(None) is None


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({}, Provisioning.ON_DEMAND),
        (None, Provisioning.ON_DEMAND),
        ({contract.SPOT_LABEL: "true"}, Provisioning.SPOT),
        ({contract.PREEMPTIBLE_LABEL: "true"}, Provisioning.PREEMPTIBLE),
        ({contract.SPOT_LABEL: "false"}, Provisioning.ON_DEMAND),
        ({contract.SPOT_LABEL: "true", contract.PREEMPTIBLE_LABEL: "true"}, Provisioning.PREEMPTIBLE),
    ],
)
def test_one_classifier_of_how_a_node_was_bought(labels: dict[str, str] | None, expected: Provisioning) -> None:
    assert contract.provisioning_of(labels) == expected


@pytest.mark.parametrize("provisioning", list(Provisioning))
def test_the_labels_of_a_provisioning_classify_back_to_it(provisioning: Provisioning) -> None:
    assert contract.provisioning_of(contract.provisioning_labels(provisioning)) == provisioning


def test_child_names_follow_the_documented_pattern() -> None:
    assert contract.lease_name("train") == "train-chief"
    assert contract.worker_pod_name("train", 2, 3) == "train-worker-2-3"
    assert contract.worker_hostname("train", 2) == "train-worker-2"
    assert contract.ps_name("train", 0) == "train-ps-0"
    assert contract.dns_address("train", "ml", "train-ps-0") == f"train-ps-0.train.ml.svc:{contract.TF_PORT}"
    assert contract.worker_selector("train") == f"{contract.LABEL_JOB}=train,{contract.LABEL_ROLE}=worker"


@pytest.mark.parametrize(
    ("amount", "text"),
    [(0.0023326063027777778, "$0.0023"), (0.0, "$0.0000"), (12.404, "$12.40"), (1234.5, "$1,234.50")],
)
def test_money_reads_as_money(amount: float, text: str) -> None:
    assert contract.format_usd(amount) == text


@pytest.mark.parametrize(("loss", "read"), [("0.5", 0.5), ("2", 2.0), ('"low"', None), ("true", None), ("1e999", None)])
def test_a_loss_that_is_not_a_finite_number_is_left_out(loss: str, read: float | None) -> None:
    text = f'{{"globalStep": 9, "loss": {loss}}}'
    assert LeaseProgress.from_annotation(text) == LeaseProgress(9, loss=read)
