"""The trainer's settings and pure helpers (no TensorFlow processes)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ttj_contract import ANNOTATION_ACTIVE_WORKERS, ANNOTATION_DESIRED_WORKERS, Env, lease_name
from ttj_trainer import config
from ttj_trainer.connection import serving_address
from ttj_trainer.training import scaled_learning_rate

TF_CONFIG = json.dumps(
    {
        "cluster": {"ps": ["job-ps-0.job:2222"], "worker": ["job-worker-0.job:2222", "", "job-worker-2.job:2223"]},
        "task": {"type": "worker", "index": 2},
    }
)
#: What the operator sets, by the contract's names.
BASE_ENV: dict[str, str] = {
    Env.TF_CONFIG: TF_CONFIG,
    Env.POD_NAME: "job-worker-2",
    Env.POD_NAMESPACE: "ns",
    Env.POD_IP: "10.0.0.7",
    Env.JOB_NAME: "job",
    Env.MODEL: "small-cnn",
    Env.DATASET: "synthetic",
    Env.CHECKPOINT_URI: "gs://bucket/job/",
    Env.DESIRED_WORKERS: "2",
}


def test_worker_serves_on_pod_ip_at_the_port_of_its_slot() -> None:
    cfg = config.load(BASE_ENV)
    assert cfg.role == "worker"
    assert cfg.task_index == 2
    assert cfg.own_address == "10.0.0.7:2223"
    assert cfg.lease_name == lease_name("job")
    assert cfg.checkpoint_uri == "gs://bucket/job"
    assert cfg.learning_rate_scaling == "activeWorkers"


@pytest.mark.parametrize(
    ("env", "sizes"),
    [
        ({}, (128, 128)),
        ({"TTJ_BATCH_SIZE": "256"}, (256, 256)),  # a job without groups, or a group without its own batch
        (
            {"TTJ_BATCH_SIZE": "256", "TTJ_JOB_BATCH_SIZE": "128", "TTJ_LEARNING_RATE_SCALING": "updateShare"},
            (256, 128),
        ),
    ],
)
def test_the_jobs_batch_size_is_the_workers_unless_its_group_has_its_own(
    env: dict[str, str], sizes: tuple[int, int]
) -> None:
    cfg = config.load(BASE_ENV | env)
    assert (cfg.batch_size, cfg.job_batch_size) == sizes


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"TTJ_MODEL": "vgg"}, "unknown model"),
        ({"TTJ_DATASET": "imagenet"}, "unknown dataset"),
        ({"TTJ_TRAIN_STEPS": "many"}, "TTJ_TRAIN_STEPS"),
        ({"TTJ_JOB_BATCH_SIZE": "0"}, "TTJ_JOB_BATCH_SIZE=0 must be at least 1"),
        ({"TTJ_LEARNING_RATE_SCALING": "linear"}, "TTJ_LEARNING_RATE_SCALING"),
        ({"TTJ_CHECKPOINT_URI": "relative/dir"}, "TTJ_CHECKPOINT_URI"),
        ({"TF_CONFIG": "{"}, "TF_CONFIG is not valid JSON"),
        (
            {
                "TF_CONFIG": json.dumps(
                    {"cluster": {"ps": ["a:1"], "worker": ["b:1"]}, "task": {"type": "chief", "index": 0}}
                )
            },
            "task.type",
        ),
        (
            {
                "TF_CONFIG": json.dumps(
                    {"cluster": {"ps": ["a:1"], "worker": ["b:1"]}, "task": {"type": "worker", "index": 3}}
                )
            },
            "outside",
        ),
        ({"POD_NAME": ""}, "POD_NAME"),
    ],
)
def test_bad_settings_are_named(override: dict[str, str], message: str) -> None:
    with pytest.raises(config.ConfigError, match=message):
        config.load(BASE_ENV | override)


def test_the_ps_needs_only_tf_config() -> None:
    tf_config = json.dumps(
        {"cluster": {"ps": ["p0:2222", "p1:2300"], "worker": []}, "task": {"type": "ps", "index": 1}}
    )
    cfg = config.load({"TF_CONFIG": tf_config, "POD_IP": "10.0.0.9"})
    assert cfg.own_address == "10.0.0.9:2300"


def test_learning_rate_scales_with_active_workers() -> None:
    assert scaled_learning_rate(0.1, "activeWorkers", desired=4, active=2) == pytest.approx(0.05)
    assert scaled_learning_rate(0.1, "activeWorkers", desired=4, active=6) == pytest.approx(0.1)
    assert scaled_learning_rate(0.1, "activeWorkers", desired=4, active=None) == pytest.approx(0.1)
    assert scaled_learning_rate(0.1, "none", desired=4, active=1) == pytest.approx(0.1)


def test_bad_configuration_exits_2_with_a_message() -> None:
    env = {"PATH": "/usr/bin:/bin", **BASE_ENV, "TTJ_MODEL": "vgg"}
    result = subprocess.run(
        [sys.executable, "-m", "ttj_trainer"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 2
    assert "unknown model TTJ_MODEL='vgg'" in result.stderr


def test_fatal_errors_become_the_termination_message(tmp_path: Path) -> None:
    termination_log = tmp_path / "termination-log"
    env = {"PATH": "/usr/bin:/bin", **BASE_ENV, "TTJ_MODEL": "vgg", "TTJ_TERMINATION_LOG": str(termination_log)}
    result = subprocess.run(
        [sys.executable, "-m", "ttj_trainer"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 2
    assert termination_log.read_text().startswith("configuration error: unknown model TTJ_MODEL='vgg'")


def test_a_worker_whose_port_is_taken_on_this_host_serves_on_another() -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        port = taken.getsockname()[1]
        tf_config = json.dumps(
            {"cluster": {"ps": ["p:1"], "worker": [f"w:{port}"]}, "task": {"type": "worker", "index": 0}}
        )
        cfg = config.load(BASE_ENV | {"TF_CONFIG": tf_config, "POD_IP": "127.0.0.5"})
        host, _, other = serving_address(cfg).rpartition(":")
    assert host == "127.0.0.5"
    assert int(other) != port


def test_lease_view_reads_the_worker_counts_the_operator_publishes() -> None:
    from types import SimpleNamespace

    from ttj_trainer.lease import _view

    def lease(annotations: dict[str, str]) -> SimpleNamespace:
        spec = SimpleNamespace(holder_identity="w-0", lease_transitions=2, lease_duration_seconds=30)
        return SimpleNamespace(spec=spec, metadata=SimpleNamespace(annotations=annotations, resource_version="7"))

    view = _view(lease({ANNOTATION_ACTIVE_WORKERS: "1", ANNOTATION_DESIRED_WORKERS: "1"}))
    assert (view.holder, view.epoch, view.active_workers, view.desired_workers) == ("w-0", 2, 1, 1)
    # Before the operator publishes a desired count (or with a broken one) the pod's env applies.
    assert _view(lease({})).desired_workers is None
    assert _view(lease({ANNOTATION_DESIRED_WORKERS: "many"})).desired_workers is None
