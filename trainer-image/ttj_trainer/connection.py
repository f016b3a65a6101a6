"""A worker's link to the parameter servers: connecting (and again after losing one), the program built
once in the connected context, its input pipeline, and the device the step runs on."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ttj_contract import Role
from ttj_trainer import checkpoints, devices, metrics, program
from ttj_trainer.config import TrainerConfig, program_of
from ttj_trainer.liveness import Liveness
from ttj_trainer.logs import event

log = logging.getLogger("ttj_trainer.worker")
RECONNECT_BACKOFF_SECONDS = (0.5, 1.0, 2.0, 4.0)


def brief(err: BaseException) -> str:
    """An OpError's message on one line (TensorFlow's start with a generic 'Graph execution error:')."""
    text = " ".join(str(err).split()).replace("Graph execution error: ", "")
    return f"{type(err).__name__}: {text[:400]}"


def reconnect_backoff(attempt: int) -> float:
    """Seconds to wait before connection attempt ``attempt`` + 1 (``attempt`` ≥ 1 failed so far)."""
    return RECONNECT_BACKOFF_SECONDS[min(attempt, len(RECONNECT_BACKOFF_SECONDS)) - 1]


def serving_address(cfg: TrainerConfig) -> str:
    """POD_IP and the port of this slot's TF_CONFIG entry; another free port when that one is taken.

    Only the PS connects to a worker, at the address the worker itself announces when it connects, so a
    worker may serve anywhere. TensorFlow's server listens on 0.0.0.0, so where pods share one network
    namespace (the local cluster runs pods as processes) two workers with the same port would collide.
    """
    port = cfg.own_port
    with socket.socket() as probe:
        try:
            probe.bind(("0.0.0.0", port))
            return cfg.own_address
        except OSError:
            pass
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))
        free = int(probe.getsockname()[1])
    event(log, "port taken on this host; serving on another", wanted=port, port=free)
    return f"{cfg.pod_ip}:{free}"


def compute_device(tf: Any, task_index: int) -> devices.DeviceChoice:
    """The device this worker's training step runs on, said in the log and in a metric."""
    listed = [(d.name, d.device_type) for d in tf.config.list_physical_devices()]
    choice = devices.select_device(listed)
    fields: dict[str, Any] = {"device": choice.on_worker(task_index), "kind": choice.kind, "gpus": choice.gpus}
    if choice.warning:
        event(log, "compute device: no GPU", logging.WARNING, device_warning=choice.warning, **fields)
    else:
        event(log, "compute device", **fields)
    metrics.device.labels(choice.name, choice.kind).set(1)
    return choice


class Connection:
    """Owns the program's :class:`~ttj_trainer.parameters.ParameterStore` (``store``, once connected) and the
    batches the worker trains on."""

    def __init__(self, cfg: TrainerConfig, tf: Any) -> None:
        self.cfg = cfg
        self.tf = tf
        # Until connected the device is not chosen: TensorFlow's local devices are listed only after the
        # cluster is connected, so that nothing initialises the runtime before it (see select_compute_device).
        self.device: devices.DeviceChoice | None = None
        self.local_device = devices.worker_cpu(cfg.task_index)
        self.entrypoint, self.program_args = program_of(cfg)
        slot_count = max(1, len(cfg.worker_addresses))
        # A new seed for every incarnation of a slot: a replaced worker does not replay its predecessor's batches.
        incarnation_seed = int(
            np.random.default_rng([cfg.seed, cfg.task_index, os.getpid(), time.time_ns() % 2**32]).integers(0, 2**31)
        )
        self.input_context = program.InputContext(cfg.task_index, slot_count, cfg.batch_size, incarnation_seed)
        # The program is built once connected (its variables must live in the connected context).
        self.prepared: program.Prepared | None = None
        self.store: Any = None
        self.batches: Any = None
        self.pending: tuple[Any, Any] | None = None  # the batch the program check read, trained on first
        checkpoints.set_local_device(devices.worker_cpu(cfg.task_index))
        self.serving_address = serving_address(cfg)

    def connect(self) -> None:
        tf = self.tf
        cluster = tf.train.ClusterSpec(
            {
                Role.PS.value: list(self.cfg.ps_addresses),
                Role.WORKER.value: {self.cfg.task_index: self.serving_address},
            }
        )
        tf.config.experimental_connect_to_cluster(
            cluster, job_name=Role.WORKER.value, task_index=self.cfg.task_index, protocol="grpc"
        )
        if self.store is None:
            self._prepare_program()
        else:
            # Reconnecting resets this process's TensorFlow context: the input pipeline starts again.
            self.batches = (
                program.training_batches(self.prepared.program, self.input_context) if self.prepared else None
            )
        self.store.open()

    def _prepare_program(self) -> None:
        """Loads and checks the program (ProgramError reaches main), then opens its variables on the PS."""
        import keras

        from ttj_trainer.parameters import ParameterStore

        keras.utils.set_random_seed(self.cfg.seed)  # the chief's fresh weights are the same in every run
        loaded = program.load(self.entrypoint, self.program_args)
        prepared = program.prepare(self.entrypoint, loaded, self.input_context, eval_seed=self.cfg.seed)
        self.prepared = prepared
        self.batches = prepared.batches
        self.pending = prepared.first
        self.store = ParameterStore.of(
            prepared,
            ps_count=len(self.cfg.ps_addresses),
            worker_slots=len(self.cfg.worker_addresses),
            local_device=self.local_device,
            overlap=self.cfg.overlap_exchange,
            wire_hosts=[address.rpartition(":")[0] for address in self.cfg.ps_addresses] if self.cfg.wire else [],
        )
        event(
            log,
            "program ready",
            entrypoint=self.entrypoint,
            parameters=int(sum(np.prod(v.shape) for v in loaded.model.trainable_variables)),
            variables=len(prepared.shared),
        )

    def select_compute_device(self) -> None:
        """Chooses the device (once, after the first connect) and places the training step there."""
        if self.device is None:
            self.device = compute_device(self.tf, self.cfg.task_index)
            self.local_device = self.device.on_worker(self.cfg.task_index)
            if self.store is not None:
                self.store.local_device = self.local_device

    def next_batch(self) -> Any:
        """What the next step reads its batch from, inside its function: first the batch the program check read,
        as an iterator of itself (the same traced step reads it), then the pipeline's iterator (a program's input
        is a ``tf.data.Dataset``, checked at start)."""
        if self.pending is not None:
            batch, self.pending = self.pending, None
            return iter(self.tf.data.Dataset.from_tensors(batch))
        return self.batches

    def first_connect(self, liveness: Liveness, held_up: Callable[[str], None]) -> None:
        """Connects once every PS accepts connections; a PS that is down or restarting (a replacement worker
        can start while it is) is waited for, never a reason to exit."""
        attempts = 0
        while True:
            self.wait_for_ps_ports(liveness)
            try:
                self.connect()
                self.select_compute_device()
                return
            except self.tf.errors.OpError as err:
                attempts += 1
                self.store.close()
                backoff = reconnect_backoff(attempts)
                held_up(f"parameter server: {brief(err)}")
                event(
                    log,
                    "could not connect to the parameter server; retrying",
                    logging.WARNING,
                    error=brief(err),
                    retry_in=backoff,
                )
                liveness.sleep(backoff)

    def lost(self, err: BaseException, failures: int, global_step: int) -> str:
        """A PS went away or lost its state (``failures`` times in a row): drops the handles while it is down.
        Returns what holds training up, for the chief's report."""
        self.store.close()
        backoff = reconnect_backoff(failures)
        event(
            log,
            "lost the parameter server; reconnecting",
            logging.WARNING,
            error=brief(err),
            global_step=global_step,
            retry_in=backoff,
        )
        return f"parameter server: {brief(err)}"

    def reconnect(self, failures: int, liveness: Liveness) -> None:
        """Waits its backoff and for every PS to listen, then connects again (a failure is retried next turn)."""
        liveness.sleep(reconnect_backoff(failures))
        self.wait_for_ps_ports(liveness)
        try:
            self.connect()
        except self.tf.errors.OpError as again:
            event(log, "reconnect failed", logging.WARNING, error=brief(again))

    def wait_for_ps_ports(self, liveness: Liveness) -> None:
        """Waits until every PS accepts TCP connections, so reconnecting does not race a server's start-up."""
        logged = 0.0
        while True:
            down = []
            for address in self.cfg.ps_addresses:
                host, _, port = address.rpartition(":")
                try:
                    socket.create_connection((host, int(port)), timeout=2.0).close()
                except OSError:
                    down.append(address)
            if not down:
                return
            if time.monotonic() - logged > 10:
                event(log, "waiting for the parameter servers to accept connections", down=down)
                logged = time.monotonic()
            liveness.sleep(1.0)
