"""TF_CONFIG, written by the operator and read by the trainer through one type: ttj_contract.TFConfig."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ttj_contract import TF_PORT, Role, TFConfig, TFConfigError, address_port

TWO_SLOTS = TFConfig(
    ps=("job-ps-0.job.ns.svc:2222",),
    worker=("job-worker-0.job.ns.svc:2222", "job-worker-1.job.ns.svc:2223"),
    task_type=Role.WORKER,
    task_index=1,
)


def test_it_is_written_in_the_tfjob_convention() -> None:
    assert json.loads(TWO_SLOTS.to_json()) == {
        "cluster": {
            "ps": ["job-ps-0.job.ns.svc:2222"],
            "worker": ["job-worker-0.job.ns.svc:2222", "job-worker-1.job.ns.svc:2223"],
        },
        "task": {"type": "worker", "index": 1},
    }
    assert TWO_SLOTS.own_port == 2223
    assert TWO_SLOTS.task_addresses == TWO_SLOTS.worker


HOSTS = ["job-ps-0.job.ns.svc", "job-worker-3.job.ns.svc", "10.0.0.7", "localhost"]
addresses = st.lists(st.builds("{}:{}".format, st.sampled_from(HOSTS), st.integers(1, 65535)), min_size=1, max_size=4)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ps=addresses, workers=addresses, data=st.data())
def test_what_is_written_is_read_back_unchanged(ps: list[str], workers: list[str], data: st.DataObject) -> None:
    role = data.draw(st.sampled_from(list(Role)))
    index = data.draw(st.integers(0, len(ps if role == Role.PS else workers) - 1))
    written = TFConfig(tuple(ps), tuple(workers), role, index)
    assert TFConfig.parse(written.to_json()) == written


def test_empty_slots_and_addresses_without_a_port_are_accepted() -> None:
    parsed = TFConfig.parse(
        json.dumps({"cluster": {"ps": ["p"], "worker": ["", "w:2300"]}, "task": {"type": "ps", "index": 0}})
    )
    assert parsed == TFConfig(("p",), ("", "w:2300"), Role.PS, 0)
    assert parsed.own_port == TF_PORT
    assert address_port("w:2300") == 2300


def _tf(cluster: object, task: object) -> str:
    return json.dumps({"cluster": cluster, "task": task})


CLUSTER = {"ps": ["a:1"], "worker": ["b:1"]}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            "{",
            "TF_CONFIG is not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        ),
        ("[]", "TF_CONFIG must be a JSON object with 'cluster' and 'task'"),
        (_tf(["a:1"], {"type": "ps"}), "TF_CONFIG 'cluster' and 'task' must be JSON objects"),
        (
            _tf({"worker": ["b:1"]}, {"type": "worker", "index": 0}),
            "TF_CONFIG cluster.ps must be a non-empty list of 'host:port' strings",
        ),
        (
            _tf({"ps": ["a:1"], "worker": "b:1"}, {"type": "worker", "index": 0}),
            "TF_CONFIG cluster.worker must be a list of 'host:port' strings, one per slot",
        ),
        (
            _tf(CLUSTER, {"type": "chief", "index": 0}),
            "TF_CONFIG task.type must be 'ps' or 'worker', not 'chief' (this trainer has no 'chief' task)",
        ),
        (_tf(CLUSTER, {"type": "worker", "index": -1}), "TF_CONFIG task.index must be a non-negative integer, not -1"),
        (
            _tf(CLUSTER, {"type": "worker", "index": True}),
            "TF_CONFIG task.index must be a non-negative integer, not True",
        ),
        (_tf(CLUSTER, {"type": "worker", "index": 1}), "TF_CONFIG task.index 1 is outside cluster.worker (1 entries)"),
        (
            _tf({"ps": ["a:x"], "worker": ["b:1"]}, {"type": "worker", "index": 0}),
            "TF_CONFIG address 'a:x' has a non-numeric port",
        ),
    ],
)
def test_a_malformed_tf_config_is_refused_naming_the_part(raw: str, message: str) -> None:
    with pytest.raises(TFConfigError) as info:
        TFConfig.parse(raw)
    assert str(info.value) == message


def test_the_operator_writes_it() -> None:
    from tests.unit.planner.builders import job
    from ttj.api.models import TransientTrainingJobSpec
    from ttj.planner.children import tf_config

    spec = TransientTrainingJobSpec.model_validate(job("mnist")["spec"])
    written = TFConfig.parse(tf_config("mnist", "ns", spec, "worker", 1))
    assert written == TFConfig(
        ps=("mnist-ps-0.mnist.ns.svc:2222",),
        worker=tuple(f"mnist-worker-{slot}.mnist.ns.svc:2222" for slot in range(spec.workers.slots)),
        task_type=Role.WORKER,
        task_index=1,
    )
