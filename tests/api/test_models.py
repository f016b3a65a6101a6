"""The API a user writes: defaults, accepted specs, and the messages refused ones get."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from ttj.api.models import ProgressStatus, TransientTrainingJob, TransientTrainingJobSpec


def spec(**overrides: Any) -> dict[str, Any]:
    """A minimal valid spec with some fields replaced (nested dicts merge one level)."""
    base: dict[str, Any] = {"trainSteps": 1000, "checkpoint": {"uri": "gs://bucket/run"}}
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return base


def errors(raw: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as info:
        TransientTrainingJobSpec.model_validate(raw)
    return str(info.value)


def test_minimal_spec_gets_the_contract_defaults() -> None:
    parsed = TransientTrainingJobSpec.model_validate(spec())
    assert (parsed.model, parsed.built_in_model) == (None, "resnet32")
    assert (parsed.dataset, parsed.built_in_dataset) == (None, "cifar10")
    assert parsed.learning_rate_scaling == "activeWorkers"
    assert parsed.parameter_servers.replicas == 1
    assert parsed.workers.provisioning == "spot"
    assert parsed.workers.accelerator_type == "nvidia-tesla-t4"
    assert parsed.workers.gpus_per_worker == 1
    assert parsed.backoff_limit == 3
    assert parsed.clean_pod_policy == "Running"
    # With no maxReplicas, the slot count is the desired count.
    assert parsed.workers.slots == parsed.workers.replicas


def test_round_trip_uses_camel_case_aliases() -> None:
    parsed = TransientTrainingJobSpec.model_validate(spec(budget={"maxCostUSD": 12.5}))
    dumped = parsed.model_dump(by_alias=True, exclude_none=True)
    assert dumped["trainSteps"] == 1000
    assert dumped["budget"] == {"maxCostUSD": 12.5}
    assert dumped["workers"]["minReplicas"] == 1


@pytest.mark.parametrize(
    ("workers", "message"),
    [
        ({"replicas": 2, "minReplicas": 3}, "workers.minReplicas (3) must not exceed workers.replicas (2)"),
        ({"replicas": 5, "maxReplicas": 4}, "workers.replicas (5) must not exceed workers.maxReplicas (4)"),
        ({"replicas": 0}, "greater than or equal to 1"),
        ({"provisioning": "reserved"}, "'spot', 'preemptible' or 'on-demand'"),
        ({"gpusPerWorker": -1}, "greater than or equal to 0"),
        ({"surprise": True}, "Extra inputs are not permitted"),
    ],
)
def test_bad_worker_specs_are_refused_with_a_clear_message(workers: dict[str, Any], message: str) -> None:
    assert message in errors(spec(workers=workers))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"trainSteps": -5}, "greater than or equal to 1"),
        ({"trainSteps": 0}, "greater than or equal to 1"),
        ({"checkpoint": {"uri": "relative/path"}}, "should match pattern"),
        ({"checkpoint": {"uri": "s3://bucket/x"}}, "should match pattern"),
        ({"checkpoint": {"uri": "/ckpt", "intervalSteps": -1}}, "greater than or equal to 0"),
        ({"model": "resnet50"}, "'resnet32' or 'small-cnn'"),
        ({"dataset": "imagenet"}, "'cifar10' or 'synthetic'"),
        ({"learningRate": 0}, "greater than 0"),
        ({"learningRateScaling": "sqrt"}, "'none', 'activeWorkers' or 'updateShare'"),
        ({"cleanPodPolicy": "Some"}, "'All', 'Running' or 'None'"),
        ({"budget": {"maxCostUSD": 0}}, "greater than 0"),
        ({"backoffLimit": -1}, "greater than or equal to 0"),
        ({"deadline": {}}, "deadline needs completeBy or completeWithinSeconds"),
        ({"deadline": {"completeBy": "friday 9am"}}, "Invalid isoformat string"),
        ({"deadline": {"completeWithinSeconds": 0}}, "greater than or equal to 1"),
        ({"deadline": {"completeWithinSeconds": 60, "maxCatchUpWorkers": -1}}, "greater than or equal to 0"),
        (
            {"deadline": {"completeWithinSeconds": 60, "catchUpGroup": "on-demand"}},
            "deadline.catchUpGroup must name a workers.groups entry other than the first",
        ),
        (
            {
                "deadline": {"completeWithinSeconds": 60, "catchUpGroup": "spot"},
                "workers": {"groups": [{"name": "spot"}, {"name": "on-demand", "provisioning": "on-demand"}]},
            },
            "deadline.catchUpGroup must name a workers.groups entry other than the first",
        ),
    ],
)
def test_bad_specs_are_refused(overrides: dict[str, Any], message: str) -> None:
    assert message in errors(spec(**overrides))


def test_missing_required_fields_are_named() -> None:
    text = errors({})
    assert "trainSteps" in text
    assert "checkpoint" in text


@pytest.mark.parametrize("uri", ["gs://bucket/a/b", "gs://my-bucket", "/mnt/checkpoints", "/"])
def test_checkpoint_uris_accepted(uri: str) -> None:
    TransientTrainingJobSpec.model_validate(spec(checkpoint={"uri": uri}))


def test_volume_claim_needs_an_absolute_path() -> None:
    mounted = TransientTrainingJobSpec.model_validate(spec(checkpoint={"uri": "/ckpt", "volumeClaimName": "pvc"}))
    assert mounted.checkpoint.volume_claim_name == "pvc"
    text = errors(spec(checkpoint={"uri": "gs://bucket/x", "volumeClaimName": "pvc"}))
    assert "checkpoint.volumeClaimName needs checkpoint.uri to be an absolute path" in text


def test_whole_object_ignores_server_fields_but_keeps_spec() -> None:
    job = TransientTrainingJob.model_validate(
        {
            "apiVersion": "transient.training/v1alpha1",
            "kind": "TransientTrainingJob",
            "metadata": {"name": "a", "resourceVersion": "7"},
            "spec": spec(),
            "status": {"phase": "Running", "chief": {"pod": "a-worker-0", "epoch": 2}},
        }
    )
    assert job.spec.train_steps == 1000
    assert job.status is not None
    assert job.status.chief is not None
    assert job.status.chief.epoch == 2


def test_a_program_is_exclusive_with_model_and_dataset() -> None:
    program = {"entrypoint": "my_pkg.train:program", "args": {"units": "64"}}
    parsed = TransientTrainingJobSpec.model_validate(spec(program=program))
    assert parsed.program is not None
    assert parsed.program.args == {"units": "64"}
    assert "program is exclusive with model and dataset" in errors(spec(program=program, model="small-cnn"))
    assert "entrypoint" in errors(spec(program={"entrypoint": "not a function"}))


GROUPS = [
    {"name": "l4-spot", "acceleratorType": "nvidia-l4", "batchSize": 256},
    {"name": "t4-spot-b", "zone": "us-central1-b"},
    {"name": "t4-on-demand", "provisioning": "on-demand", "maxReplicas": 2},
    {"name": "flex", "computeClass": "gpu-fallback"},
]


def test_worker_groups_leave_unset_fields_to_the_workers_defaults() -> None:
    parsed = TransientTrainingJobSpec.model_validate(spec(workers={"replicas": 4, "groups": GROUPS}))
    groups = parsed.workers.groups
    assert groups is not None
    assert [
        (g.name, g.accelerator_type, g.provisioning, g.max_replicas, g.batch_size, g.zone, g.compute_class)
        for g in groups
    ] == [
        ("l4-spot", "nvidia-l4", None, None, 256, None, None),
        ("t4-spot-b", None, None, None, None, "us-central1-b", None),
        ("t4-on-demand", None, "on-demand", 2, None, None, None),
        ("flex", None, None, None, None, None, "gpu-fallback"),
    ]
    # the job's counts are the total over its groups; without groups nothing changes
    assert (parsed.workers.replicas, parsed.workers.slots) == (4, 4)
    assert TransientTrainingJobSpec.model_validate(spec()).workers.groups is None


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        ([{"name": "a"}, {"name": "a", "provisioning": "on-demand"}], "a name of its own (a repeated)"),
        ([{"name": "A"}], "should match pattern"),
        ([], "at least 1 item"),
        ([{"name": f"g{i}"} for i in range(9)], "at most 8 items"),
        (
            [{"name": "a", "zone": "z1", "nodeSelector": {"topology.kubernetes.io/zone": "z2"}}],
            "a group with zone may not also set topology.kubernetes.io/zone in its nodeSelector",
        ),
        ([{"name": "a", "maxReplicas": 300}], "less than or equal to 256"),
        (
            [{"name": "a", "computeClass": "c", "acceleratorType": "nvidia-l4"}],
            "a group with computeClass may not also set acceleratorType or provisioning",
        ),
        (
            [{"name": "a", "computeClass": "c", "provisioning": "spot"}],
            "a group with computeClass may not also set acceleratorType or provisioning",
        ),
        ([{"name": "a", "computeClass": "Not A Label"}], "String should match pattern"),
        ([{"name": "a", "template": {}}], "Extra inputs are not permitted"),
    ],
)
def test_bad_worker_groups_are_refused(groups: list[dict[str, Any]], message: str) -> None:
    assert message in errors(spec(workers={"groups": groups}))


@pytest.mark.parametrize(
    ("progress", "message"),
    [
        ({"evaluation": {f"m{i}": 0.5 for i in range(33)}}, "at most 32 items"),
        ({"evaluation": {"m" * 64: 0.5}}, "longer than 63 characters"),
        ({"evaluation": {"loss": float("nan")}}, "finite number"),
        ({"exportPath": "/" + "x" * 4096}, "at most 4096 characters"),
    ],
)
def test_the_chiefs_evaluation_and_export_are_bounded(progress: dict[str, Any], message: str) -> None:
    """status.progress holds what the API server accepts (the schema says the same: tests/conformance)."""
    fits = ProgressStatus.model_validate(
        {"evaluationStep": 5, "evaluation": {"m" * 63: 1.0, "loss": 0.25}, "exportPath": "/ckpt/export"}
    )
    assert fits.evaluation == {"m" * 63: 1.0, "loss": 0.25}
    with pytest.raises(ValidationError) as info:
        ProgressStatus.model_validate(progress)
    assert message in str(info.value)
