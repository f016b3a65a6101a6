"""Per-second cost accrual against hand-computed timelines: preemptions, deletions, operator restarts."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from ttj.api.models import CostStatus, TransientTrainingJobSpec
from ttj.cost.model import (
    NodeShape,
    PodObservation,
    accrue,
    expected_worker_node,
    hourly_rate,
    worker_hourly_rate,
)
from ttj.cost.prices import load_price_table
from ttj_contract import Provisioning

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
PRICES = load_price_table(table="gce-us-central1")
SPOT_T4 = NodeShape.from_labels(
    {
        "cloud.google.com/gke-spot": "true",
        "cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
        "node.kubernetes.io/instance-type": "n1-standard-4",
    },
    gpu_capacity=1,
)
ON_DEMAND_CPU = NodeShape.from_labels({"node.kubernetes.io/instance-type": "n1-standard-4"})
# Hourly prices of the gce-us-central1 table, written out so the expectations are computed by hand.
SPOT_T4_NODE = 0.11 + 0.04
ON_DEMAND_T4_NODE = 0.35 + 0.19
PS_NODE = 0.19


def minutes(n: float) -> datetime:
    return T0 + timedelta(minutes=n)


def worker(
    name: str, start: float | None, end: float | None = None, node: NodeShape | None = SPOT_T4
) -> PodObservation:
    return PodObservation(
        name=name,
        uid=f"uid-{name}",
        role="worker",
        started_at=minutes(start) if start is not None else None,
        ended_at=minutes(end) if end is not None else None,
        node=node,
        gpus=1,
    )


def ps(start: float, end: float | None = None) -> PodObservation:
    return PodObservation(
        "job-ps-0", "uid-ps", "ps", minutes(start), minutes(end) if end is not None else None, ON_DEMAND_CPU
    )


def through_status(cost: CostStatus) -> CostStatus:
    """What a restarted operator reads back: the ledger as JSON in the object's status."""
    return CostStatus.model_validate(json.loads(json.dumps(cost.model_dump(by_alias=True, exclude_none=True))))


def test_labels_say_how_the_node_was_bought() -> None:
    assert NodeShape("n1-standard-4", "nvidia-tesla-t4", 1, Provisioning.SPOT) == SPOT_T4
    assert NodeShape.from_labels({"cloud.google.com/gke-preemptible": "true"}).provisioning == Provisioning.PREEMPTIBLE
    assert ON_DEMAND_CPU.provisioning == Provisioning.ON_DEMAND
    assert ON_DEMAND_CPU.accelerator_count == 0


def test_two_hours_of_one_spot_worker_and_an_on_demand_ps() -> None:
    cost = accrue(None, [worker("w0", 0), ps(0)], minutes(120), PRICES)
    assert cost.usd == pytest.approx(2 * SPOT_T4_NODE + 2 * PS_NODE)
    assert cost.on_demand_equivalent_usd == pytest.approx(2 * ON_DEMAND_T4_NODE + 2 * PS_NODE)
    assert cost.usd_per_hour == pytest.approx(SPOT_T4_NODE + PS_NODE)
    assert cost.price_table == "gce-us-central1"
    assert cost.accrued_at == "2026-11-21T14:00:00.000000Z"  # MicroTime: accrual keeps sub-second precision


def test_pending_pods_cost_nothing_and_ps_is_always_on_demand() -> None:
    spot_ps = PodObservation("ps", "uid-ps", "ps", minutes(0), None, SPOT_T4)
    cost = accrue(None, [worker("pending", None), spot_ps], minutes(60), PRICES)
    assert [entry.name for entry in cost.pods or []] == ["ps"]
    assert cost.usd == pytest.approx(ON_DEMAND_T4_NODE)  # a PS on a spot GPU node is still charged on-demand


def test_preemption_replacement_and_deletion_lose_no_second() -> None:
    # w0 runs 0-30 min and is preempted; the replacement w0b starts at 35 and runs; the PS runs all along.
    cost = accrue(None, [worker("w0", 0), ps(0)], minutes(20), PRICES)
    cost = accrue(cost, [worker("w0", 0, end=30), ps(0)], minutes(33), PRICES)  # seen preempted
    assert cost.usd == pytest.approx(0.5 * SPOT_T4_NODE + 33 / 60 * PS_NODE)
    assert cost.usd_per_hour == pytest.approx(PS_NODE)
    # the operator deleted w0 after this accrual was stored; w0b is running
    cost = accrue(through_status(cost), [worker("w0b", 35), ps(0)], minutes(120), PRICES)
    assert cost.settled_usd == pytest.approx(0.5 * SPOT_T4_NODE)
    assert [entry.name for entry in cost.pods or []] == ["job-ps-0", "w0b"]
    expected = (30 + 85) / 60 * SPOT_T4_NODE + 2 * PS_NODE
    assert cost.usd == pytest.approx(expected)
    assert cost.on_demand_equivalent_usd == pytest.approx((30 + 85) / 60 * ON_DEMAND_T4_NODE + 2 * PS_NODE)


def test_operator_restart_recomputes_running_pods_from_their_start() -> None:
    timeline = [worker("w0", 0), worker("w1", 10, end=70), ps(0)]
    # The operator accrues every minute until 50 min, is down until 100 min, then reads its ledger back.
    cost: CostStatus | None = None
    for minute in range(0, 51):
        cost = accrue(cost, timeline, minutes(minute), PRICES)
    assert cost is not None
    restarted = accrue(through_status(cost), timeline, minutes(100), PRICES)
    once = accrue(None, timeline, minutes(100), PRICES)
    assert restarted.usd == pytest.approx(once.usd)
    assert restarted.usd == pytest.approx((100 + 60) / 60 * SPOT_T4_NODE + 100 / 60 * PS_NODE)


def test_a_pod_deleted_behind_the_operators_back_keeps_its_last_accrual() -> None:
    cost = accrue(None, [worker("w0", 0), ps(0)], minutes(30), PRICES)
    cost = accrue(through_status(cost), [ps(0)], minutes(60), PRICES)
    assert cost.settled_usd == pytest.approx(0.5 * SPOT_T4_NODE)
    assert cost.usd == pytest.approx(0.5 * SPOT_T4_NODE + PS_NODE)


def test_container_restart_or_clock_step_never_takes_money_back() -> None:
    first = accrue(None, [worker("w0", 0)], minutes(60), PRICES)
    # the container restarted: its running startedAt moved to 50 min; the pod's first start stands
    later = accrue(first, [worker("w0", 50)], minutes(61), PRICES)
    assert later.usd == pytest.approx(61 / 60 * SPOT_T4_NODE)
    # a clock that stepped back does not lower the total
    assert accrue(later, [worker("w0", 0)], minutes(30), PRICES).usd == pytest.approx(later.usd)


def test_rate_is_frozen_at_first_sight() -> None:
    cost = accrue(None, [worker("w0", 0)], minutes(60), PRICES)
    expensive = load_price_table(table="icac19-table2")
    again = accrue(cost, [worker("w0", 0)], minutes(120), expensive)
    assert again.usd == pytest.approx(2 * SPOT_T4_NODE)


def test_a_pod_pays_its_gpu_share_of_a_bigger_node() -> None:
    four_gpus = NodeShape("n1-standard-16", "nvidia-tesla-t4", 4, Provisioning.SPOT)
    cost = accrue(None, [worker("w0", 0, node=four_gpus)], minutes(60), PRICES)
    assert cost.usd == pytest.approx((4 * 0.11 + 0.16) / 4)
    shared_ps = PodObservation("ps", "uid-ps", "ps", minutes(0), None, ON_DEMAND_CPU, node_share=0.25)
    assert accrue(None, [shared_ps], minutes(60), PRICES).usd == pytest.approx(PS_NODE / 4)


def test_unknown_node_is_priced_as_expected_and_noted() -> None:
    spec = TransientTrainingJobSpec.model_validate({"trainSteps": 10, "checkpoint": {"uri": "/ckpt"}})
    orphan = worker("w0", 0, node=None)
    cost = accrue(None, [orphan], minutes(60), PRICES, fallback_worker_node=expected_worker_node(spec, PRICES))
    assert cost.usd == pytest.approx(SPOT_T4_NODE)
    assert cost.notes
    assert "node unknown" in cost.notes[0]
    lost_ps = PodObservation("ps", "uid-ps", "ps", minutes(0), None, None)
    assert accrue(None, [lost_ps], minutes(60), PRICES).usd == pytest.approx(PS_NODE)  # as n1-standard-4


def test_a_workers_unknown_node_is_priced_as_its_groups_expected_node() -> None:
    l4_spot = NodeShape("g2-standard-4", "nvidia-l4", 1, Provisioning.SPOT)
    in_l4 = PodObservation("w0", "uid-w0", "worker", minutes(0), node=None, gpus=1, group="l4")
    in_other = PodObservation("w1", "uid-w1", "worker", minutes(0), node=None, gpus=1, group="t4")
    cost = accrue(
        None, [in_l4, in_other], minutes(60), PRICES, fallback_worker_node=SPOT_T4, group_worker_nodes={"l4": l4_spot}
    )
    assert {e.name: round(e.usd, 6) for e in cost.pods or []} == {
        "w0": round(0.224 + 0.058733, 6),  # spot L4 on its g2-standard-4 host
        "w1": round(SPOT_T4_NODE, 6),  # no node for its group: the job's expected node
    }


def test_projected_rates_of_the_desired_set() -> None:
    spec = TransientTrainingJobSpec.model_validate(
        {"trainSteps": 10, "checkpoint": {"uri": "/ckpt"}, "workers": {"replicas": 4, "acceleratorType": "nvidia-l4"}}
    )
    one = 0.224 + 0.058733  # spot L4 on its g2-standard-4 host
    assert worker_hourly_rate(spec, PRICES) == pytest.approx(one)
    assert hourly_rate(spec, PRICES, workers=4) == pytest.approx(4 * one + PS_NODE)


def test_naive_now_is_refused() -> None:
    with pytest.raises(ValueError, match="aware datetime"):
        accrue(None, [], datetime(2026, 1, 1), PRICES)


def _crd_status_cost_schema() -> dict[str, Any]:
    crd_file = Path(__file__).resolve().parents[2] / "crds" / "transient.training_transienttrainingjobs.yaml"
    crd = yaml.safe_load(crd_file.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema["properties"]["status"]["properties"]["cost"]  # type: ignore[no-any-return]


def test_every_ledger_field_survives_the_apiservers_pruning() -> None:
    """Fields unknown to the CRD schema are dropped by the apiserver: the ledger would not survive a restart."""
    cost = accrue(None, [worker("w0", 0, end=30), ps(0)], minutes(60), PRICES)
    dumped = cost.model_dump(by_alias=True, exclude_none=True)
    schema = _crd_status_cost_schema()
    assert set(dumped) <= set(schema["properties"])
    pod_schema = schema["properties"]["pods"]["items"]["properties"]
    for entry in dumped["pods"]:
        assert set(entry) <= set(pod_schema)
