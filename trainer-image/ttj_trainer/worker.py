"""A worker: trains asynchronously against the parameter servers; checkpoints while the Lease names it chief.

The end: a worker that reaches trainSteps exits 0 only once the final checkpoint of the current epoch is in
the index; while it waits it keeps reading the Lease, and if the Lease names it (however late it learns
that) it becomes chief, writes the final checkpoint, publishes it, and then exits 0.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import threading
import time
from collections import deque
from typing import Any

import numpy as np

from ttj_contract import LeaseProgress, Role, format_epoch_time
from ttj_trainer import STARTED_AT, checkpoints, devices, metrics, program, simulated
from ttj_trainer.config import BUILTIN_ENTRYPOINT, TrainerConfig, program_of
from ttj_trainer.lease import (
    DEFAULT_LEASE_SECONDS,
    LeaseClient,
    LeaseUnavailableError,
    LeaseView,
    LeaseWatcher,
    renewal_fresh,
)
from ttj_trainer.logs import event

log = logging.getLogger("ttj_trainer.worker")
HEARTBEAT_PERIOD_SECONDS = 1.0
HEARTBEAT_FRESH_SECONDS = 10.0
CHECKPOINT_RETRY_SECONDS = 5.0
RECONNECT_BACKOFF_SECONDS = (0.5, 1.0, 2.0, 4.0)
#: As long as the operator gives a new chief to start (PlannerConfig.chief_startup_seconds).
STARTUP_ALLOWANCE_SECONDS = 180.0


def _brief(err: BaseException) -> str:
    """An OpError's message on one line (TensorFlow's start with a generic 'Graph execution error:')."""
    text = " ".join(str(err).split()).replace("Graph execution error: ", "")
    return f"{type(err).__name__}: {text[:400]}"


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


def scaled_learning_rate(base: float, scaling: str, desired: int, active: int | None) -> float:
    """The paper's adaptive rate: base × min(1, active/desired); an unknown active count means all are active."""
    if scaling == "none" or active is None:
        return base
    return base * min(1.0, active / max(1, desired))


class Terminated(Exception):
    """SIGTERM arrived while waiting."""


class LossNotFiniteError(Exception):
    """The loss, or a value about to be checkpointed, is NaN or infinite: the trainer stops
    (``TrainerExit.LOSS_NOT_FINITE``) and no checkpoint holds it."""


def not_finite(values: dict[str, np.ndarray]) -> list[str]:
    """The names of floating-point values holding a NaN or an infinity."""
    return sorted(name for name, value in values.items() if value.dtype.kind == "f" and not np.all(np.isfinite(value)))


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


class Worker:
    def __init__(self, cfg: TrainerConfig) -> None:
        import tensorflow as tf

        self.cfg = cfg
        self.tf = tf
        self.terminating = threading.Event()
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
        self.final_values: dict[str, np.ndarray] | None = None
        checkpoints.set_local_device(devices.worker_cpu(cfg.task_index))
        self.serving_address = serving_address(cfg)
        self.lease = LeaseClient(cfg.pod_namespace, cfg.lease_name)
        self.simulated_gpu_seconds = simulated.gpu_seconds_per_step()
        self.loop_beat = time.monotonic()  # the training loop's own heartbeat: the Lease is renewed only while it beats
        self.last_error = ""  # what holds training up, published to the operator while chief
        self.watcher = LeaseWatcher(
            self.lease, cfg.pod_name, self._progress, cfg.lease_poll_seconds, alive=self._loop_alive
        )
        self.chief_epoch: int | None = None  # the epoch this process is chief of, None while not chief
        self.chief_token: checkpoints.Token | None = None
        self.final_written = False  # this chief committed a checkpoint at trainSteps or beyond
        self.global_step = 0
        self.last_checkpoint: checkpoints.Latest | None = None
        self.last_checkpoint_time: float | None = None  # wall clock, for progress and metrics
        self.last_checkpoint_monotonic = time.monotonic()
        self.last_checkpoint_write_seconds: float | None = None  # published for the adaptive interval
        self.ready = False
        self.sigterm_at = 0.0
        self.retry_checkpoint_at = 0.0  # after a checkpoint could not be confirmed, wait before the next try
        self.retry_election_at = 0.0
        self.step_times: deque[float] = deque(maxlen=200)

    # -- plumbing ------------------------------------------------------------------------------------------
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
            self.batches = iter(self.prepared.program.train_input(self.input_context)) if self.prepared else None
        self.store.open()

    def _prepare_program(self) -> None:
        """Loads and checks the program (ProgramError reaches main), then opens its variables on the PS."""
        import keras

        from ttj_trainer.parameters import ParameterStore

        keras.utils.set_random_seed(self.cfg.seed)  # the chief's fresh weights are the same in every run
        loaded = program.load(self.entrypoint, self.program_args)
        prepared = program.prepare(self.entrypoint, loaded, self.input_context)
        self.prepared = prepared
        self.batches = prepared.batches
        self.pending = prepared.first
        self.store = ParameterStore(
            loaded.model,
            loaded.optimizer,
            prepared.step,
            prepared.shared,
            prepared.initial,
            ps_count=len(self.cfg.ps_addresses),
            worker_slots=len(self.cfg.worker_addresses),
            local_device=self.local_device,
        )
        event(
            log,
            "program ready",
            entrypoint=self.entrypoint,
            parameters=int(sum(np.prod(v.shape) for v in loaded.model.trainable_variables)),
            variables=len(prepared.shared),
        )

    def _loop_alive(self, lease_seconds: float) -> bool:
        """The training loop turned within a lease (before the first step, within the start-up allowance: the
        first step traces the model): renewing now says something true."""
        limit = lease_seconds if self.step_times else max(lease_seconds, STARTUP_ALLOWANCE_SECONDS)
        return time.monotonic() - self.loop_beat < limit

    def _beat(self) -> None:
        self.loop_beat = time.monotonic()

    def _renewed_recently(self) -> bool:
        view = self.watcher.view
        duration = float(view.duration_seconds or DEFAULT_LEASE_SECONDS) if view else DEFAULT_LEASE_SECONDS
        return renewal_fresh(self.watcher.last_renewal, time.monotonic(), duration)

    def select_compute_device(self) -> None:
        """Chooses the device (once, after the first connect) and places the training step there."""
        if self.device is None:
            self.device = compute_device(self.tf, self.cfg.task_index)
            self.local_device = self.device.on_worker(self.cfg.task_index)
            if self.store is not None:
                self.store.local_device = self.local_device

    def _progress(self) -> LeaseProgress | None:
        """The report the watcher publishes while the Lease names this pod."""
        error = self.last_error or None
        if self.chief_epoch is None:
            if not error:
                return None  # the previous chief's report stands until this one has something to say
            # Named but not acting as chief, e.g. its checkpoint location refuses it: say why.
            view = self.watcher.view
            return LeaseProgress(global_step=self.global_step, epoch=view.epoch if view else None, last_error=error)
        checkpoint = self.last_checkpoint
        if checkpoint is None:
            return LeaseProgress(global_step=self.global_step, epoch=self.chief_epoch, last_error=error)
        return LeaseProgress(
            # The step was read before the checkpoint's own read of the PS; the PS never holds less.
            global_step=max(self.global_step, checkpoint.step),
            checkpoint_step=checkpoint.step,
            checkpoint_path=checkpoint.path,
            checkpoint_time=format_epoch_time(self.last_checkpoint_time or time.time()),
            checkpoint_write_seconds=self.last_checkpoint_write_seconds,
            epoch=self.chief_epoch,
            last_error=error,
        )

    def _storage_error(self, err: checkpoints.CheckpointStorageError, doing: str) -> None:
        """Storage trouble is said as such (never as a lost PS), published to the operator, and retried."""
        self.last_error = str(err)
        self.retry_checkpoint_at = time.monotonic() + CHECKPOINT_RETRY_SECONDS
        self.retry_election_at = time.monotonic() + CHECKPOINT_RETRY_SECONDS
        event(log, f"checkpoint storage error while {doing}; will retry", logging.WARNING, error=str(err))

    def _on_sigterm(self, *_: Any) -> None:
        if self.terminating.is_set():
            return
        self.terminating.set()
        self.sigterm_at = time.monotonic()
        # If the PS or the API hangs, still leave inside the grace period Kubernetes gives us.
        grace = self.cfg.termination_grace_seconds

        def force_exit() -> None:
            time.sleep(grace)
            event(log, "could not stop cleanly within the grace period; exiting", logging.ERROR, grace=grace)
            os._exit(143)

        threading.Thread(target=force_exit, name="sigterm-watchdog", daemon=True).start()

    def _sleep(self, seconds: float) -> None:
        self._beat()
        if self.terminating.wait(seconds):
            raise Terminated
        self._beat()

    def learning_rate_scale(self, view: LeaseView | None) -> float:
        """ttj's factor on the program's own learning rate: min(1, active/desired) under activeWorkers."""
        active = view.active_workers if view is not None else None
        desired = view.desired_workers if view is not None and view.desired_workers else self.cfg.desired_workers
        return scaled_learning_rate(1.0, self.cfg.learning_rate_scaling, desired, active)

    # -- the chief's duties --------------------------------------------------------------------------------
    def _fence(self) -> None:
        """Raises StaleEpochError unless the Lease, read now, still names this pod in our epoch."""
        view = self.lease.get()  # LeaseUnavailableError: cannot confirm, so do not commit either
        self.watcher.observe(view)
        if not view.names(self.cfg.pod_name) or view.epoch != self.chief_epoch:
            raise checkpoints.StaleEpochError(
                f"the Lease now names {view.holder!r} in epoch {view.epoch}; "
                f"this pod was chief in epoch {self.chief_epoch}"
            )

    def _demote_if_not_renewed(self) -> bool:
        """Self-demotion: a chief that could not renew for a whole lease may have been replaced; it stops
        checkpointing and restoring until a renewal confirms it again. True when it stepped down."""
        if self.chief_epoch is None or self._renewed_recently():
            return False
        event(
            log,
            "could not renew the Lease for longer than the lease: stepping down until it is renewed",
            logging.WARNING,
            epoch=self.chief_epoch,
        )
        self._step_down()
        return True

    def checkpoint(self, reason: str) -> bool:
        if self.chief_epoch is None or time.monotonic() < self.retry_checkpoint_at:
            return False
        if self._demote_if_not_renewed() or self.chief_token is None:
            return False
        started = time.monotonic()
        try:
            values = self.store.read_all()
            step = int(values["ttj/global_step"])
            broken = not_finite(values)
            if broken:
                raise LossNotFiniteError(
                    f"the model's state on the parameter servers is not finite at global step {step} "
                    f"({', '.join(broken[:3])}): no checkpoint written, the last good one stays"
                )
            path = checkpoints.save(
                self.cfg.checkpoint_uri,
                step,
                self.chief_token,
                values,
                writer=self.cfg.pod_name,
                fence=self._fence,
                keep=self.cfg.checkpoints_to_keep,
            )
        except LeaseUnavailableError as err:
            # Not proof of being deposed (the API may be briefly away): keep the role, retry a little later.
            self.retry_checkpoint_at = time.monotonic() + CHECKPOINT_RETRY_SECONDS
            event(
                log,
                "checkpoint not committed: cannot confirm the Lease",
                logging.WARNING,
                reason=reason,
                error=str(err),
            )
            return False
        except checkpoints.CheckpointStorageError as err:
            self._storage_error(err, f"writing a checkpoint ({reason})")
            return False
        except checkpoints.StaleEpochError as err:
            metrics.checkpoints_refused.inc()
            event(log, "checkpoint refused: no longer chief", logging.WARNING, reason=reason, error=str(err))
            self._step_down()
            return False
        self.last_error = ""
        self.final_written = step >= self.cfg.train_steps
        if self.final_written:
            self.final_values = values
        elapsed = time.monotonic() - started
        self.last_checkpoint_write_seconds = round(elapsed, 3)
        self.last_checkpoint = checkpoints.Latest(step, self.chief_epoch, path)
        self.last_checkpoint_time = time.time()
        self.last_checkpoint_monotonic = time.monotonic()
        metrics.checkpoint_seconds.observe(elapsed)
        metrics.checkpoint_step.set(step)
        metrics.checkpoint_timestamp.set(self.last_checkpoint_time)
        event(
            log,
            "checkpoint written",
            reason=reason,
            step=step,
            epoch=self.chief_epoch,
            path=path,
            seconds=round(elapsed, 3),
        )
        self.watcher.publish_now()
        return True

    def _step_down(self) -> None:
        if self.chief_epoch is not None:
            event(log, "no longer chief: stopped checkpointing", epoch=self.chief_epoch)
        self.chief_epoch = None
        self.chief_token = None
        self.final_written = False
        metrics.set_role("worker")

    def _become_chief(self, view: LeaseView) -> None:
        """Claims the checkpoint location with the Lease's token. A location held by a newer job ends this
        trainer (LocationTakenError reaches main); a newer epoch of this job means our view is behind."""
        if not self._renewed_recently():
            return  # the watcher renews first: a chief acts only on a renewal it made
        token = checkpoints.Token(view.scope, view.epoch)
        try:
            removed = checkpoints.claim(self.cfg.checkpoint_uri, token, self.cfg.pod_name)
            latest = checkpoints.latest(self.cfg.checkpoint_uri)
            earlier = checkpoints.latest_token(self.cfg.checkpoint_uri)
        except checkpoints.CheckpointStorageError as err:
            self._storage_error(err, "claiming the checkpoint location")
            return
        except checkpoints.LocationTakenError:
            raise
        except checkpoints.StaleEpochError as err:
            self.retry_election_at = time.monotonic() + CHECKPOINT_RETRY_SECONDS
            event(log, "the Lease names this pod but its epoch is stale", logging.WARNING, error=str(err))
            return
        if removed:
            event(log, "removed leftovers of an interrupted checkpoint", paths=removed[:20], count=len(removed))
        self.chief_epoch = view.epoch
        self.chief_token = token
        self.last_error = ""
        self.last_checkpoint = latest
        self.last_checkpoint_time = time.time() if self.last_checkpoint else None
        metrics.set_role("chief")
        event(log, "elected chief", epoch=view.epoch, latest_checkpoint=self.last_checkpoint)
        if earlier is not None and earlier.scope != token.scope:
            event(
                log,
                "the checkpoint location holds an earlier job's checkpoints: resuming from them",
                earlier_lease=earlier.scope or "unscoped",
                earlier_epoch=earlier.epoch,
                step=latest.step if latest else None,
            )
        if self.ready:
            # A live PS: never restore over it; just start checkpointing from where training is.
            self.checkpoint("elected")

    def initialise_ps(self) -> None:
        """The chief fills a PS that holds no model state: from the latest checkpoint that restores (falling
        back through the index's history), or fresh."""
        if self._demote_if_not_renewed():
            return
        dtypes = {s.name: s.dtype for s in self.store.checkpointed}
        try:
            restored = checkpoints.restore_latest(self.cfg.checkpoint_uri, dtypes)
        except checkpoints.CheckpointStorageError as err:
            self._storage_error(err, "reading the latest checkpoint")
            return
        if restored is not None:
            for path, why in restored.skipped:
                event(
                    log,
                    "checkpoint cannot be restored; falling back to the previous one",
                    logging.WARNING,
                    path=path,
                    error=why,
                )
            self.store.assign_all(restored.values)
            latest = restored.checkpoint
            event(
                log, "parameter server restored from checkpoint", step=latest.step, epoch=latest.epoch, path=latest.path
            )
        else:
            self.store.assign_all(self.store.initial_values())
            event(log, "parameter server initialised with fresh weights")
        self.ready = True
        self.global_step = self.store.global_step()
        self.checkpoint("elected" if restored is None else "restored")

    # -- main loop -----------------------------------------------------------------------------------------
    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_sigterm)
        signal.signal(signal.SIGINT, self._on_sigterm)
        metrics.set_role("worker")
        metrics.serve(self.cfg.pod_ip, self.cfg.metrics_port)
        self.watcher.start()
        try:
            if self.entrypoint == BUILTIN_ENTRYPOINT:
                from ttj_trainer.builtin import check_data  # imports Keras: only for the built-in networks

                check_data(self.program_args)
            self._first_connect()
            event(log, "connected", ps=self.cfg.ps_addresses, address=self.serving_address, device=self.local_device)
            return self._loop()
        except Terminated:
            return self._terminate()
        finally:
            self.watcher.stop()

    def _loop(self) -> int:
        failures = 0
        last_heartbeat = 0.0
        waiting_logged = 0.0
        while True:
            self._beat()
            if self.terminating.is_set():
                return self._terminate()
            view = self.watcher.view
            is_holder = view is not None and view.names(self.cfg.pod_name)
            try:
                if not self.ready:
                    self.ready = self.store.initialized()
                    if self.ready:
                        self.global_step = self.store.global_step()
                if (
                    is_holder
                    and view is not None
                    and self.chief_epoch != view.epoch
                    and time.monotonic() >= self.retry_election_at
                ):
                    self._become_chief(view)
                elif not is_holder and self.chief_epoch is not None:
                    self._step_down()
                if not self.ready:
                    if self.chief_epoch is not None:
                        self.initialise_ps()
                    else:
                        if time.monotonic() - waiting_logged > 10:
                            event(
                                log,
                                "waiting for the chief to initialise the parameter server",
                                holder=view and view.holder,
                            )
                            waiting_logged = time.monotonic()
                        self._sleep(0.5)
                        continue
                if self.global_step >= self.cfg.train_steps:
                    return self._finish()
                now = time.time()
                if now - last_heartbeat >= HEARTBEAT_PERIOD_SECONDS:
                    self.store.heartbeat(self.cfg.task_index, now)
                    last_heartbeat = now
                    if self.chief_epoch is not None:
                        fresh = int(np.sum(self.store.heartbeats() > now - HEARTBEAT_FRESH_SECONDS))
                        metrics.active_workers.set(fresh)
                self._train_one(view)
                failures = 0
                if self.chief_epoch is not None and self._checkpoint_due():
                    self.checkpoint("interval")
            except self.tf.errors.OpError as err:
                # The PS went away or lost its state (uninitialised variables): reconnect and re-check.
                failures += 1
                self.ready = False
                self.store.close()
                backoff = reconnect_backoff(failures)
                event(
                    log,
                    "lost the parameter server; reconnecting",
                    logging.WARNING,
                    error=_brief(err),
                    global_step=self.global_step,
                    retry_in=backoff,
                )
                self.last_error = f"parameter server: {_brief(err)}"
                self._sleep(backoff)
                self._wait_for_ps_ports()
                try:
                    self.connect()
                except self.tf.errors.OpError as again:
                    event(log, "reconnect failed", logging.WARNING, error=_brief(again))

    def _first_connect(self) -> None:
        """Connects once every PS accepts connections; a PS that is down or restarting (a replacement worker
        can start while it is) is waited for, never a reason to exit."""
        attempts = 0
        while True:
            self._wait_for_ps_ports()
            try:
                self.connect()
                self.select_compute_device()
                return
            except self.tf.errors.OpError as err:
                attempts += 1
                self.store.close()
                backoff = reconnect_backoff(attempts)
                self.last_error = f"parameter server: {_brief(err)}"
                event(
                    log,
                    "could not connect to the parameter server; retrying",
                    logging.WARNING,
                    error=_brief(err),
                    retry_in=backoff,
                )
                self._sleep(backoff)

    def _wait_for_ps_ports(self) -> None:
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
            self._sleep(1.0)

    def _train_one(self, view: LeaseView | None) -> None:
        if self.pending is not None:
            (features, labels), self.pending = self.pending, None
        else:
            features, labels = next(self.batches)
        scale = self.learning_rate_scale(view)
        rate = scale * self.cfg.learning_rate if not self.cfg.program else scale
        loss, step = self.store.train_step(features, labels, scale)
        if not math.isfinite(loss):
            raise LossNotFiniteError(
                f"the loss is {loss} at global step {step}: stopped; the last good checkpoint stays"
            )
        if self.simulated_gpu_seconds:  # local cluster only (simulated.py); never on GKE
            time.sleep(self.simulated_gpu_seconds)
        self.global_step = step
        now = time.monotonic()
        if not self.step_times:
            event(log, "first step", global_step=step, seconds_since_start=round(now - STARTED_AT, 2))
        self.step_times.append(now)
        recent = [t for t in self.step_times if t > now - 10]
        metrics.local_steps.inc()
        metrics.loss.set(loss)
        metrics.global_step.set(step)
        metrics.learning_rate.set(rate)
        if len(recent) > 1:
            metrics.steps_per_second.set((len(recent) - 1) / max(recent[-1] - recent[0], 1e-6))
        if self.chief_epoch is not None:
            metrics.checkpoint_age.set(time.monotonic() - self.last_checkpoint_monotonic)
        if step % 100 == 0 or step >= self.cfg.train_steps:
            event(
                log,
                "training",
                global_step=step,
                loss=round(loss, 4),
                learning_rate=rate,
                chief=self.chief_epoch is not None,
            )

    def _checkpoint_due(self) -> bool:
        cfg = self.cfg
        view = self.watcher.view
        if view is not None and view.checkpoint_interval_seconds:
            # the operator's adaptive interval replaces both of the spec's fixed ones
            return time.monotonic() - self.last_checkpoint_monotonic >= view.checkpoint_interval_seconds
        last_step = self.last_checkpoint.step if self.last_checkpoint else 0
        if cfg.checkpoint_interval_steps and self.global_step - last_step >= cfg.checkpoint_interval_steps:
            return True
        elapsed = time.monotonic() - self.last_checkpoint_monotonic
        return bool(cfg.checkpoint_interval_seconds) and elapsed >= cfg.checkpoint_interval_seconds

    def _clear_heartbeat(self) -> None:
        try:
            self.store.heartbeat(self.cfg.task_index, 0.0)
            self.store.heartbeats()  # remote ops are asynchronous: make sure the write landed
        except self.tf.errors.OpError as err:
            event(log, "could not clear the heartbeat", logging.WARNING, error=_brief(err))

    def _finish(self) -> int:
        """At trainSteps: the chief writes and publishes the final checkpoint, then exits 0; any other worker
        waits until the final checkpoint of the current epoch is in the index, becoming chief meanwhile if
        the Lease names it (it may learn that only now, having been cut off from the API)."""
        event(log, "reached the last step", global_step=self.global_step, train_steps=self.cfg.train_steps)
        self.retry_checkpoint_at = 0.0
        waiting_logged = 0.0
        while True:
            self._beat()
            if self.terminating.is_set():
                raise Terminated
            if self.chief_epoch is not None:
                if (self.final_written or self.checkpoint("final")) and self._publish_final():
                    self._export()
                    self._clear_heartbeat()
                    return 0
            else:
                view = self._read_lease()
                if view is not None and view.names(self.cfg.pod_name):
                    self._become_chief(view)
                    continue
                if view is not None and self._final_checkpoint_done(view):
                    event(log, "the final checkpoint is written; exiting", epoch=view.epoch)
                    self._clear_heartbeat()
                    return 0
                if time.monotonic() - waiting_logged > 10:
                    event(log, "waiting for the chief's final checkpoint", holder=view and view.holder)
                    waiting_logged = time.monotonic()
            self._sleep(0.5)

    def _export(self) -> None:
        """The chief's last duty: the final model, beside the checkpoints, for serving (see export.py)."""
        from ttj_trainer import export

        if self.final_values is None or self.last_checkpoint is None or self.prepared is None:
            return
        try:
            where = export.export(self.store, self.final_values, self.cfg.checkpoint_uri, self.last_checkpoint.step)
        except Exception as err:  # the checkpoint is written: a model that cannot be exported fails nothing
            event(log, "could not export the final model", logging.ERROR, error=program.last_line(err))
            return
        event(log, "exported the final model", **where)

    def _read_lease(self) -> LeaseView | None:
        try:
            view = self.lease.get()
        except LeaseUnavailableError as err:
            event(log, "cannot read the Lease at the end; will retry", logging.WARNING, error=str(err))
            return None
        self.watcher.observe(view)
        return view

    def _final_checkpoint_done(self, view: LeaseView) -> bool:
        """The index holds a checkpoint at trainSteps or beyond written by this job's chief of ``view``'s epoch."""
        try:
            latest = checkpoints.latest(self.cfg.checkpoint_uri)
            token = checkpoints.latest_token(self.cfg.checkpoint_uri)
        except checkpoints.CheckpointStorageError as err:
            event(log, "cannot read the checkpoint index", logging.WARNING, error=str(err))
            return False
        return (
            latest is not None
            and token == checkpoints.Token(view.scope, view.epoch)
            and latest.step >= self.cfg.train_steps
        )

    def _publish_final(self) -> bool:
        """The operator judges success by the published report: retry until it is out, or we are deposed."""
        if self.watcher.publish_now():
            return True
        self.retry_checkpoint_at = time.monotonic() + 1.0
        return False

    def _terminate(self) -> int:
        event(log, "SIGTERM: stopping", chief=self.chief_epoch is not None, global_step=self.global_step)
        if self.chief_epoch is not None and self.ready:
            self.retry_checkpoint_at = 0.0  # the last chance: try even right after a failed attempt
            try:
                self.checkpoint("sigterm")
            except self.tf.errors.OpError as err:
                event(log, "could not checkpoint on SIGTERM", logging.ERROR, error=_brief(err))
        if self.ready:
            self._clear_heartbeat()
        event(log, "stopped after SIGTERM", seconds=round(time.monotonic() - self.sigterm_at, 3))
        return 143


def reconnect_backoff(attempt: int) -> float:
    """Seconds to wait before connection attempt ``attempt`` + 1 (``attempt`` ≥ 1 failed so far)."""
    return RECONNECT_BACKOFF_SECONDS[min(attempt, len(RECONNECT_BACKOFF_SECONDS)) - 1]


def run(cfg: TrainerConfig) -> int:
    return Worker(cfg).run()
