"""Run as a script: trains a program for N steps against a real PS (in its own process), as a worker does,
and writes the program's variables afterwards, the losses and the PS's socket bytes per step (its TensorFlow
server's and its wire's) to an .npz.

``program_probe.py PS_ADDRESSES OWN_ADDRESS ENTRYPOINT ARGS_JSON STEPS BATCH SEED OUT [CHECKPOINT_DIR]``

PS_ADDRESSES: one or more, comma-separated. With CHECKPOINT_DIR it also writes a checkpoint of the PS's
state there, as the chief does, and the device of each variable's PS task under ``device.<name>``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import keras
import numpy as np
import tensorflow as tf
from prometheus_client import REGISTRY

from ttj_trainer import checkpoints, devices, program
from ttj_trainer.parameters import ParameterStore
from ttj_trainer.variables import GLOBAL_STEP

#: "1": train with the exchange overlapped (the trainer's default); else exactly, one step after the other.
OVERLAP = "PROBE_OVERLAP"
#: "0": every exchange through TensorFlow's call; else over the PS's wire, as a worker does.
WIRE = "PROBE_WIRE"


def socket_bytes(ps_ports: list[str], own_port: str) -> int:
    """Bytes between this worker and the PS tasks so far, both ways, as the kernel counts them: over the
    connections to the PS's servers and the PS's connections back to this worker's server (each counted
    at its server's end)."""
    where = "( " + " or ".join(f"sport = :{port}" for port in [*ps_ports, own_port]) + " )"
    out = subprocess.run(
        ["ss", "-tinH", "state", "established", where], capture_output=True, text=True, check=True
    ).stdout
    return sum(int(n) for n in re.findall(r"bytes_(?:sent|received):(\d+)", out))


def main() -> None:
    ps_addresses, own, entrypoint, args, steps, batch, seed, out = sys.argv[1:9]
    checkpoint_dir = sys.argv[9] if len(sys.argv) > 9 else ""
    ps_list = ps_addresses.split(",")
    ps_ports = [address.rsplit(":", 1)[1] for address in ps_list]
    own_port = own.rsplit(":", 1)[1]
    tf.config.experimental_connect_to_cluster(
        tf.train.ClusterSpec({"ps": ps_list, "worker": {0: own}}),
        job_name="worker",
        task_index=0,
        protocol="grpc",
    )
    checkpoints.set_local_device(devices.worker_cpu(0))
    keras.utils.set_random_seed(int(seed))
    prepared = program.prepare(
        entrypoint, program.load(entrypoint, json.loads(args)), program.InputContext(0, 1, int(batch), int(seed))
    )
    p = prepared.program
    store = ParameterStore.of(
        prepared,
        ps_count=len(ps_list),
        worker_slots=1,
        local_device=devices.worker_cpu(0),
        overlap=os.environ.get(OVERLAP) == "1",
        wire_hosts=[] if os.environ.get(WIRE) == "0" else [address.rpartition(":")[0] for address in ps_list],
    )
    store.open()
    wire_port = store.wire_port() if len(ps_list) == 1 else None
    if wire_port is not None:
        ps_ports.append(str(wire_port))
    store.assign_all(store.initial_values())
    losses, moved = [], []
    for index in range(int(steps)):
        before = socket_bytes(ps_ports, own_port)
        # as a worker does: the batch the program check read, then the pipeline's, each read inside the step
        batches = iter(tf.data.Dataset.from_tensors(prepared.first)) if index == 0 else prepared.batches
        loss, _ = store.train_step_reading(batches, 1.0)
        moved.append(socket_bytes(ps_ports, own_port) - before)
        losses.append(loss)
    store.flush()
    values = store.read_all()
    transports = {
        t: REGISTRY.get_sample_value("ttj_trainer_exchanges_total", {"transport": t}) or 0.0
        for t in ("wire", "tensorflow")
    }
    if checkpoint_dir:
        checkpoints.save(checkpoint_dir, int(values[GLOBAL_STEP]), 1, values, writer="probe")
    np.savez(
        out,
        losses=np.array(losses),
        moved=np.array(moved),
        **{"exchanges." + t: np.array(n) for t, n in transports.items()},
        **{"model." + str(i): v.numpy() for i, v in enumerate(p.model.variables)},
        **{"opt." + str(i): v.numpy() for i, v in enumerate(p.optimizer.variables)},
        **{"ps." + k.replace("/", "_"): v for k, v in values.items()},
        **{"device." + k.replace("/", "_"): np.array(r.device) for k, r in store.resources.items()},
    )


if __name__ == "__main__":
    main()
