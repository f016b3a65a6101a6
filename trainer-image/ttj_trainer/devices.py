"""Where a worker computes: the pod's GPU when TensorFlow sees one, else its CPU (said loudly).

The choice is a pure function of the devices TensorFlow lists (``tf.config.list_physical_devices()``), so
it is tested without a GPU; the worker then places every op of its training step there, while the
variables stay on the parameter servers and checkpoint I/O on the worker's CPU.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ttj_contract import Role


@dataclass(frozen=True)
class DeviceChoice:
    #: "GPU" or "CPU", as TensorFlow names device types.
    kind: str
    index: int
    #: How many GPUs TensorFlow listed.
    gpus: int
    #: Why this is not what the job asked for, empty when it is fine.
    warning: str = ""

    @property
    def name(self) -> str:
        """``GPU:0`` or ``CPU:0``."""
        return f"{self.kind}:{self.index}"

    def on_worker(self, task_index: int) -> str:
        """The fully qualified device of this worker task, as ops are placed on it."""
        return f"/job:{Role.WORKER.value}/replica:0/task:{task_index}/device:{self.name}"


def select_device(listed: Iterable[tuple[str, str]], gpus_expected: bool = True) -> DeviceChoice:
    """The first GPU of ``listed`` ((name, device_type) pairs, as TensorFlow lists physical devices), else CPU:0.

    Without a GPU the choice carries a warning when the pod was meant to have one (``gpus_expected``).
    """
    gpus = sorted(int(name.rsplit(":", 1)[1]) for name, kind in listed if kind == "GPU" and name[-1:].isdigit())
    if gpus:
        return DeviceChoice("GPU", gpus[0], len(gpus))
    warning = "TensorFlow lists no GPU: training on the CPU" if gpus_expected else ""
    return DeviceChoice("CPU", 0, 0, warning)


def worker_cpu(task_index: int) -> str:
    """The worker's own CPU: where checkpoint I/O runs (SaveV2/RestoreV2 are CPU kernels)."""
    return f"/job:{Role.WORKER.value}/replica:0/task:{task_index}/device:CPU:0"
