"""The GPU the job pays for is the one it computes on: device selection, and placement of the step's ops."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ttj_trainer.devices import DeviceChoice, select_device, worker_cpu

CPU = ("/physical_device:CPU:0", "CPU")


def test_a_listed_gpu_is_chosen() -> None:
    choice = select_device([CPU, ("/physical_device:GPU:0", "GPU")])
    assert choice == DeviceChoice("GPU", 0, 1)
    assert choice.on_worker(3) == "/job:worker/replica:0/task:3/device:GPU:0"
    assert not choice.warning


def test_the_lowest_gpu_of_several_is_chosen() -> None:
    listed = [CPU, ("/physical_device:GPU:1", "GPU"), ("/physical_device:GPU:0", "GPU")]
    assert select_device(listed) == DeviceChoice("GPU", 0, 2)


def test_without_a_gpu_the_cpu_is_chosen_with_a_warning() -> None:
    choice = select_device([CPU])
    assert (choice.kind, choice.name, choice.gpus) == ("CPU", "CPU:0", 0)
    assert "no GPU" in choice.warning
    assert choice.on_worker(0) == "/job:worker/replica:0/task:0/device:CPU:0"
    assert select_device([CPU], gpus_expected=False).warning == ""


def test_checkpoint_io_stays_on_the_workers_cpu() -> None:
    assert worker_cpu(2) == "/job:worker/replica:0/task:2/device:CPU:0"


@pytest.mark.tensorflow
def test_the_training_steps_compute_is_placed_on_the_selected_device() -> None:
    probe = Path(__file__).with_name("placement_probe.py")
    result = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    placed, compute = found["placed"], found["compute"]
    assert compute == "/device:CPU:1"
    # The forward and backward passes run on the selected device...
    for op in ("Conv2D", "Conv2DBackpropFilter", "MatMul", "ReluGrad"):
        assert placed[op] == [compute], (op, placed[op])
    # ...and the optimizer's arithmetic and its writes where the variables live.
    assert found["update"] == ["device:CPU:0"]
    assert {device.rsplit("/", 1)[-1] for device in placed["AssignAddVariableOp"]} == {"device:CPU:0"}
    assert found["step"] == 1
    # One message each way: the gradients packed where they are computed, the weights where they live, and
    # the weights unpacked into the worker's copies on the compute device.
    assert found["packed"] == {"compute": [compute], "exchange": ["/device:CPU:0"]}
    assert found["mirrors_written"] == [compute]
    # The packed gradients leave the step on the worker's host (copied off a GPU inside the step), where the
    # wire sends them from; the wire's resident update names no device: the PS runs it on its own.
    assert found["messages_out"] == ["/device:CPU:0"]
    assert found["resident_devices"] == [""]


@pytest.mark.tensorflow
def test_a_users_program_and_its_evaluation_compute_on_the_selected_device() -> None:
    """A user's functional model (Dense, BatchNormalization, Dropout, a custom layer) with Adam: its forward
    and backward passes and the chief's evaluation of a batch on the selected device, Adam's update where
    the variables live."""
    probe = Path(__file__).with_name("placement_probe.py")
    command = [sys.executable, str(probe), "tests.trainer.programs.models:mlp_with_evaluation", '{"optimizer": "adam"}']
    root = str(Path(__file__).resolve().parents[2])
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=300, check=False, env=os.environ | {"PYTHONPATH": root}
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    placed, evaluate, compute = found["placed"], found["evaluate"], found["compute"]
    for op in ("MatMul", "ReluGrad", "FusedBatchNormV3" if "FusedBatchNormV3" in placed else "Rsqrt"):
        assert placed[op] == [compute], (op, placed[op])
    assert found["update"] == ["device:CPU:0"]
    assert found["step"] == 1
    for op in ("MatMul", "Relu"):
        assert evaluate[op] == [compute], (op, evaluate[op])
