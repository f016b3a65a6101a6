"""What the operator and the trainer both know comes from ttj_contract: the CRD's enums and defaults, the
trainer's catalogue and checks, and the chief's start-up allowance on both sides."""

from __future__ import annotations

from pathlib import Path

import yaml

import ttj_contract as contract

CRD = Path(__file__).resolve().parents[2] / "crds" / "transient.training_transienttrainingjobs.yaml"


def _spec_schema() -> dict[str, object]:
    crd = yaml.safe_load(CRD.read_text())
    schema: dict[str, object] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def test_the_crds_enums_are_the_contracts_names() -> None:
    properties = _spec_schema()["properties"]
    assert isinstance(properties, dict)
    assert tuple(properties["model"]["enum"]) == contract.BUILTIN_MODELS
    assert tuple(properties["dataset"]["enum"]) == contract.BUILTIN_DATASETS
    assert properties["learningRateScaling"]["enum"] == [value.value for value in contract.LearningRateScaling]
    assert properties["learningRateScaling"]["default"] == contract.LearningRateScaling.ACTIVE_WORKERS


def test_the_operator_and_the_trainer_use_the_contracts_knowledge() -> None:
    from ttj.api import models
    from ttj.planner.config import PlannerConfig
    from ttj_trainer import config, data

    assert models.LearningRateScaling is contract.LearningRateScaling
    assert (models.DEFAULT_MODEL, models.DEFAULT_DATASET) == (
        contract.DEFAULT_BUILTIN_MODEL,
        contract.DEFAULT_BUILTIN_DATASET,
    )
    assert contract.DEFAULT_BUILTIN_MODEL in contract.BUILTIN_MODELS
    assert contract.DEFAULT_BUILTIN_DATASET in contract.BUILTIN_DATASETS
    assert data.DATASET_NAMES == contract.BUILTIN_DATASETS
    assert PlannerConfig().chief_startup_seconds == contract.CHIEF_STARTUP_SECONDS
    # The trainer's configuration of a job naming no model trains the default one through the built-in program.
    tf_config = contract.TFConfig(("p:1",), ("w:2",), contract.Role.WORKER, 0).to_json()
    env = {
        contract.Env.TF_CONFIG: tf_config,
        contract.Env.POD_NAME: "job-worker-0",
        contract.Env.POD_IP: "10.0.0.1",
        contract.Env.JOB_NAME: "job",
        contract.Env.CHECKPOINT_URI: "/ckpt",
    }
    cfg = config.load(env)
    assert (cfg.model, cfg.dataset, cfg.learning_rate_scaling) == (
        contract.DEFAULT_BUILTIN_MODEL,
        contract.DEFAULT_BUILTIN_DATASET,
        contract.LearningRateScaling.ACTIVE_WORKERS,
    )
    assert config.program_of(cfg)[0] == contract.BUILTIN_ENTRYPOINT


def test_a_trainer_renews_before_its_first_step_within_the_operators_allowance() -> None:
    from ttj_trainer.liveness import Liveness

    liveness = Liveness(grace_seconds=10)
    liveness.beat_at -= contract.CHIEF_STARTUP_SECONDS - 5  # the loop last beat (tracing) 175 s ago
    assert liveness.alive(lease_seconds=30, stepped=False)
    assert not liveness.alive(lease_seconds=30, stepped=True)
    liveness.beat_at -= 10
    assert not liveness.alive(lease_seconds=30, stepped=False)
