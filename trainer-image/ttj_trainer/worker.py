"""A worker: trains asynchronously against the parameter servers; checkpoints (and evaluates) while the Lease
names it chief.

The parts, composed here: :class:`~ttj_trainer.connection.Connection` (the parameter servers, the program
and its input), :class:`~ttj_trainer.training.Training` (one step at a time), :class:`~ttj_trainer.chief.
ChiefDuties` (checkpoint, restore, evaluate, export, the progress report), :class:`~ttj_trainer.lease.LeaseLink`
(the Lease and its watcher) and :class:`~ttj_trainer.liveness.Liveness` (the loop's pulse and SIGTERM).

The end: a worker that reaches trainSteps exits 0 only once the final checkpoint of the current epoch is in
the index; while it waits it keeps reading the Lease, and if the Lease names it (however late it learns
that) it becomes chief, writes the final checkpoint, evaluates it and exports the model, publishes all
that, and then exits 0.
"""

from __future__ import annotations

import logging
import signal
import time

from ttj_contract import BUILTIN_ENTRYPOINT
from ttj_trainer import metrics
from ttj_trainer.chief import ChiefDuties, final_checkpoint_done
from ttj_trainer.config import TrainerConfig
from ttj_trainer.connection import Connection, brief
from ttj_trainer.lease import LeaseClient, LeaseLink, LeaseWatcher
from ttj_trainer.liveness import EXPORT_ALLOWANCE_SECONDS, Liveness, Terminated
from ttj_trainer.logs import event
from ttj_trainer.training import Training

log = logging.getLogger("ttj_trainer.worker")


class Worker:
    def __init__(self, cfg: TrainerConfig) -> None:
        import tensorflow as tf

        self.cfg = cfg
        self.tf = tf
        self.liveness = Liveness(cfg.termination_grace_seconds)
        self.connection = Connection(cfg, tf)
        self.training = Training(cfg)
        client = LeaseClient(cfg.pod_namespace, cfg.lease_name)
        watcher = LeaseWatcher(
            client,
            cfg.pod_name,
            lambda: self.chief.progress(
                self.training.global_step, self.training.slot_rates, self.training.mean_loss_since_last_report()
            ),
            cfg.lease_poll_seconds,
            alive=lambda lease_seconds: self.liveness.alive(lease_seconds, self.training.stepped),
        )
        self.lease = LeaseLink(client, watcher, cfg.pod_name)
        self.chief = ChiefDuties(cfg, self.lease)
        self.ready = False  # the PS holds model state

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.liveness.on_sigterm)
        signal.signal(signal.SIGINT, self.liveness.on_sigterm)
        metrics.set_role("worker")
        metrics.serve(self.cfg.pod_ip, self.cfg.metrics_port)
        self.lease.watcher.start()
        try:
            if self.connection.entrypoint == BUILTIN_ENTRYPOINT:
                from ttj_trainer.builtin import check_data  # imports Keras: only for the built-in networks

                check_data(self.connection.program_args)
            self.connection.first_connect(self.liveness, self.chief.held_up)
            if self.connection.store is not None:
                self.chief.parameter_bytes = tuple(self.connection.store.step_bytes_per_ps)
            event(
                log,
                "connected",
                ps=self.cfg.ps_addresses,
                address=self.connection.serving_address,
                device=self.connection.local_device,
            )
            return self._loop()
        except Terminated:
            return self._terminate()
        finally:
            self.lease.watcher.stop()

    def _loop(self) -> int:
        failures = 0
        waiting_logged = 0.0
        connection, training, chief, liveness = self.connection, self.training, self.chief, self.liveness
        while True:
            liveness.beat()
            if liveness.terminating.is_set():
                return self._terminate()
            view = self.lease.view
            try:
                if not self.ready:
                    self.ready = connection.store.initialized()
                    if self.ready:
                        training.global_step = connection.store.global_step()
                if chief.may_become(view) and view is not None:
                    chief.become(view, connection.store, self.ready)
                elif not self.lease.names_this_pod(view) and chief.acting:
                    chief.step_down()
                if not self.ready:
                    if chief.acting:
                        self._fill_ps()
                    else:
                        if time.monotonic() - waiting_logged > 10:
                            event(
                                log,
                                "waiting for the chief to initialise the parameter server",
                                holder=view and view.holder,
                            )
                            waiting_logged = time.monotonic()
                        liveness.sleep(0.5)
                        continue
                if training.global_step >= self.cfg.train_steps:
                    return self._finish()
                training.heartbeat(connection.store, chief.acting)
                training.step(connection.store, connection.next_batch(), view, chief.acting)
                if chief.acting:
                    chief.observe_checkpoint_age()
                failures = 0
                if (
                    chief.acting
                    and chief.checkpoint_due(self.lease.view, training.global_step)
                    and chief.checkpoint(connection.store, "interval")
                    and chief.evaluate(connection.store, connection.prepared, liveness.beat)
                ):
                    self.lease.publish_now()
            except self.tf.errors.OpError as err:
                # The PS went away or lost its state (uninitialised variables): reconnect and re-check.
                failures += 1
                self.ready = False
                chief.held_up(connection.lost(err, failures, training.global_step))
                connection.reconnect(failures, liveness)

    def _fill_ps(self) -> None:
        filled = self.chief.fill_ps(self.connection.store)
        if filled is None:
            return
        self.ready = True
        self.training.global_step = filled.global_step
        self.chief.checkpoint(self.connection.store, "restored" if filled.restored else "elected")

    def _finish(self) -> int:
        """At trainSteps: the chief writes and publishes the final checkpoint, then exits 0; any other worker
        waits until the final checkpoint of the current epoch is in the index, becoming chief meanwhile if
        the Lease names it (it may learn that only now, having been cut off from the API)."""
        chief, store = self.chief, self.connection.store
        store.flush()
        event(log, "reached the last step", global_step=self.training.global_step, train_steps=self.cfg.train_steps)
        chief.retry_checkpoint_at = 0.0
        waiting_logged = 0.0
        while True:
            self.liveness.beat()
            if self.liveness.terminating.is_set():
                raise Terminated
            if chief.acting:
                if chief.final_written or chief.checkpoint(store, "final"):
                    with self.liveness.allowance(EXPORT_ALLOWANCE_SECONDS):
                        chief.finish(store, self.connection.prepared, self.liveness.beat)
                    if chief.publish_final():
                        self._clear_heartbeat()
                        return 0
            else:
                view = self.lease.read()
                if view is not None and self.lease.names_this_pod(view):
                    chief.become(view, store, self.ready)
                    continue
                if view is not None and final_checkpoint_done(self.cfg, view):
                    event(log, "the final checkpoint is written; exiting", epoch=view.epoch)
                    self._clear_heartbeat()
                    return 0
                if time.monotonic() - waiting_logged > 10:
                    event(log, "waiting for the chief's final checkpoint", holder=view and view.holder)
                    waiting_logged = time.monotonic()
            self.liveness.sleep(0.5)

    def _clear_heartbeat(self) -> None:
        store = self.connection.store
        try:
            store.flush()
            store.heartbeat(self.cfg.task_index, 0.0)
            store.report_steps(self.cfg.task_index, 0.0, 0, 0.0, 0.0)
            store.heartbeats()  # remote ops are asynchronous: make sure the write landed
        except self.tf.errors.OpError as err:
            event(log, "could not clear the heartbeat", logging.WARNING, error=brief(err))

    def _terminate(self) -> int:
        chief = self.chief
        event(log, "SIGTERM: stopping", chief=chief.acting, global_step=self.training.global_step)
        if chief.acting and self.ready:
            chief.retry_checkpoint_at = 0.0  # the last chance: try even right after a failed attempt
            try:
                chief.checkpoint(self.connection.store, "sigterm")
            except self.tf.errors.OpError as err:
                event(log, "could not checkpoint on SIGTERM", logging.ERROR, error=brief(err))
        if self.ready:
            self._clear_heartbeat()
        event(log, "stopped after SIGTERM", seconds=round(time.monotonic() - self.liveness.sigterm_at, 3))
        return 143


def run(cfg: TrainerConfig) -> int:
    return Worker(cfg).run()
