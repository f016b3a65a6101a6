"""``python -m ttj_trainer --self-check``: the image check the trainer image runs after every build."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ttj_contract import Env, Role, dns_address, ps_name
from ttj_trainer import __version__, selfcheck

ROOT = Path(__file__).resolve().parents[2]


def test_the_sample_is_what_the_operator_gives_worker_zero() -> None:
    report = selfcheck.check()
    assert report.role == Role.WORKER
    assert report.task_index == 0
    job, namespace = selfcheck.SAMPLE_JOB, selfcheck.SAMPLE_NAMESPACE
    assert report.ps == [dns_address(job, namespace, ps_name(job, 0))]
    assert len(report.workers) == selfcheck.SAMPLE_WORKERS
    assert report.trainer == __version__


def test_reports_tensorflow_and_its_devices() -> None:
    import tensorflow as tf

    report = selfcheck.check()
    assert report.tensorflow == tf.__version__
    assert report.devices == [device.name for device in tf.config.list_physical_devices()]
    assert any("CPU" in name for name in report.devices)


def test_a_bad_tf_config_fails_with_the_loader_s_message() -> None:
    env = {**selfcheck.sample_env(), Env.TF_CONFIG: json.dumps({"cluster": {"ps": []}, "task": {}})}
    with pytest.raises(selfcheck.SelfCheckError, match=r"sample TF_CONFIG does not load: TF_CONFIG cluster\.ps"):
        selfcheck.check(env)


def test_require_gpu_fails_where_tensorflow_sees_only_a_cpu(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import tensorflow as tf

    cpu_only: list[Any] = [SimpleNamespace(name="/physical_device:CPU:0", device_type="CPU")]
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda *_: cpu_only)
    assert selfcheck.main(["--self-check", "--require-gpu"]) == selfcheck.EXIT_FAILED
    assert "TensorFlow sees no GPU (devices: /physical_device:CPU:0)" in capsys.readouterr().err
    assert selfcheck.main(["--self-check"]) == 0
    assert json.loads(capsys.readouterr().out)["gpus"] == 0


def test_the_module_entry_point_runs_it() -> None:
    """The image's entrypoint (``python -m ttj_trainer``) with ``--self-check``: one JSON report, exit 0."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(ROOT / d) for d in ("contract", "trainer-image"))}
    done = subprocess.run(
        [sys.executable, "-m", "ttj_trainer", "--self-check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["role"] == Role.WORKER
    assert report["trainer"] == __version__
