"""The chief's duties, done by the worker the Lease names besides its training: claim the checkpoint
location with the Lease's fencing token, fill a parameter server that holds no model state, checkpoint
(fenced, and never a state that is not finite), evaluate the program's evaluation set after its periodic
and final checkpoints, export the final model, and say how training goes in the progress report the Lease
watcher publishes."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

from ttj_contract import LeaseProgress, format_epoch_time
from ttj_trainer import checkpoints, metrics, program, tensorboard
from ttj_trainer.config import TrainerConfig
from ttj_trainer.evaluation import Evaluation
from ttj_trainer.lease import LeaseLink, LeaseUnavailableError, LeaseView
from ttj_trainer.logs import event
from ttj_trainer.training import LossNotFiniteError, SlotRate

log = logging.getLogger("ttj_trainer.worker")
CHECKPOINT_RETRY_SECONDS = 5.0


def not_finite(values: dict[str, np.ndarray]) -> list[str]:
    """The names of floating-point values holding a NaN or an infinity."""
    return sorted(name for name, value in values.items() if value.dtype.kind == "f" and not np.all(np.isfinite(value)))


class Filled(NamedTuple):
    """A parameter server the chief filled: the global step it now holds, and whether from a checkpoint."""

    global_step: int
    restored: bool


class ChiefDuties:
    """Acting (``epoch`` set) only while the Lease names this pod and its renewals are fresh."""

    def __init__(self, cfg: TrainerConfig, lease: LeaseLink) -> None:
        self.cfg = cfg
        self.lease = lease
        self.epoch: int | None = None  # the epoch this process is chief of, None while not chief
        self.token: checkpoints.Token | None = None
        self.final_written = False  # this chief committed a checkpoint at trainSteps or beyond
        self.final_values: dict[str, np.ndarray] | None = None
        self.last_error = ""  # what holds training up, published to the operator while chief
        self.last_checkpoint: checkpoints.Latest | None = None
        self.last_checkpoint_time: float | None = None  # wall clock, for progress and metrics
        self.last_checkpoint_monotonic = time.monotonic()
        self.last_checkpoint_write_seconds: float | None = None  # published for the adaptive interval
        self.retry_checkpoint_at = 0.0  # after a checkpoint could not be confirmed, wait before the next try
        self.retry_election_at = 0.0
        self.evaluation: Evaluation | None = None  # the latest, reported until the next one
        self.export_path: str | None = None
        self.finished_step: int | None = None  # the final checkpoint whose evaluation and export are done
        self.parameter_bytes: tuple[int, ...] | None = None  # what a step moves per PS, once the program is ready
        self.summaries = tensorboard.Summaries(cfg.checkpoint_uri, cfg.pod_name)

    @property
    def acting(self) -> bool:
        return self.epoch is not None

    def held_up(self, why: str) -> None:
        """What holds training up, said in the report while this pod is named."""
        self.last_error = why

    # -- the report ------------------------------------------------------------------------------------
    def progress(
        self, global_step: int, slot_rates: Mapping[int, SlotRate] | None = None, loss: float | None = None
    ) -> LeaseProgress | None:
        """The report the watcher publishes while the Lease names this pod; ``slot_rates``: each active
        slot's pace as measured from the step reports on PS 0 (its updates per second are published);
        ``loss``: the mean training loss of this worker's steps since the previous report."""
        error = self.last_error or None
        if self.epoch is None:
            if not error:
                return None  # the previous chief's report stands until this one has something to say
            # Named but not acting as chief, e.g. its checkpoint location refuses it: say why.
            view = self.lease.view
            return LeaseProgress(global_step=global_step, epoch=view.epoch if view else None, last_error=error)
        rates = {slot: round(rate.updates, 3) for slot, rate in slot_rates.items()} if slot_rates else None
        checkpoint = self.last_checkpoint
        if checkpoint is None:
            return LeaseProgress(
                global_step=global_step,
                epoch=self.epoch,
                last_error=error,
                parameter_bytes=self.parameter_bytes,
                slot_steps_per_second=rates,
                loss=loss,
            )
        return LeaseProgress(
            # The step was read before the checkpoint's own read of the PS; the PS never holds less.
            global_step=max(global_step, checkpoint.step),
            checkpoint_step=checkpoint.step,
            checkpoint_path=checkpoint.path,
            checkpoint_time=format_epoch_time(self.last_checkpoint_time or time.time()),
            checkpoint_write_seconds=self.last_checkpoint_write_seconds,
            epoch=self.epoch,
            last_error=error,
            evaluation_step=self.evaluation.step if self.evaluation else None,
            evaluation=self.evaluation.metrics if self.evaluation else None,
            export_path=self.export_path,
            parameter_bytes=self.parameter_bytes,
            slot_steps_per_second=rates,
            loss=loss,
        )

    def publish_final(self) -> bool:
        """The operator judges success by the published report: retry until it is out, or we are deposed."""
        if self.lease.publish_now():
            return True
        self.retry_checkpoint_at = time.monotonic() + 1.0
        return False

    # -- standing --------------------------------------------------------------------------------------
    def _storage_error(self, err: checkpoints.CheckpointStorageError, doing: str) -> None:
        """Storage trouble is said as such (never as a lost PS), published to the operator, and retried."""
        self.last_error = str(err)
        self.retry_checkpoint_at = time.monotonic() + CHECKPOINT_RETRY_SECONDS
        self.retry_election_at = time.monotonic() + CHECKPOINT_RETRY_SECONDS
        event(log, f"checkpoint storage error while {doing}; will retry", logging.WARNING, error=str(err))

    def _fence(self) -> None:
        """Raises StaleEpochError unless the Lease, read now, still names this pod in our epoch."""
        view = self.lease.current()  # LeaseUnavailableError: cannot confirm, so do not commit either
        if not self.lease.names_this_pod(view) or view.epoch != self.epoch:
            raise checkpoints.StaleEpochError(
                f"the Lease now names {view.holder!r} in epoch {view.epoch}; this pod was chief in epoch {self.epoch}"
            )

    def demote_if_not_renewed(self) -> bool:
        """Self-demotion: a chief that could not renew for a whole lease may have been replaced; it stops
        checkpointing and restoring until a renewal confirms it again. True when it stepped down."""
        if self.epoch is None or self.lease.renewed_recently():
            return False
        event(
            log,
            "could not renew the Lease for longer than the lease: stepping down until it is renewed",
            logging.WARNING,
            epoch=self.epoch,
        )
        self.step_down()
        return True

    def step_down(self) -> None:
        if self.epoch is not None:
            event(log, "no longer chief: stopped checkpointing", epoch=self.epoch)
        self.epoch = None
        self.token = None
        self.final_written = False
        metrics.set_role("worker")

    def may_become(self, view: LeaseView | None) -> bool:
        """The Lease names this pod in an epoch it is not yet chief of (and no failed claim is being waited out)."""
        return (
            view is not None
            and self.lease.names_this_pod(view)
            and self.epoch != view.epoch
            and time.monotonic() >= self.retry_election_at
        )

    def become(self, view: LeaseView, store: Any, ready: bool) -> None:
        """Claims the checkpoint location with the Lease's token. A location held by a newer job ends this
        trainer (LocationTakenError reaches main); a newer epoch of this job means our view is behind.
        ``ready``: the PS holds model state (then it is checkpointed at once, never restored over)."""
        if not self.lease.renewed_recently():
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
        self.epoch = view.epoch
        self.token = token
        self.last_error = ""
        self.last_checkpoint = latest
        self.last_checkpoint_time = time.time() if self.last_checkpoint else None
        metrics.set_role("chief")
        event(log, "elected chief", epoch=view.epoch, latest_checkpoint=self.last_checkpoint)
        self.summaries.elected(view.epoch)
        if earlier is not None and earlier.scope != token.scope:
            event(
                log,
                "the checkpoint location holds an earlier job's checkpoints: resuming from them",
                earlier_lease=earlier.scope or "unscoped",
                earlier_epoch=earlier.epoch,
                step=latest.step if latest else None,
            )
        if ready:
            # A live PS: never restore over it; just start checkpointing from where training is.
            self.checkpoint(store, "elected")

    # -- the parameter servers' state ------------------------------------------------------------------
    def fill_ps(self, store: Any) -> Filled | None:
        """Fills a PS that holds no model state: from the latest checkpoint that restores (falling back
        through the index's history), or fresh. None when it could not (then it is tried again)."""
        if self.demote_if_not_renewed():
            return None
        dtypes = {s.name: s.dtype for s in store.checkpointed}
        try:
            restored = checkpoints.restore_latest(self.cfg.checkpoint_uri, dtypes)
        except checkpoints.CheckpointStorageError as err:
            self._storage_error(err, "reading the latest checkpoint")
            return None
        if restored is not None:
            for path, why in restored.skipped:
                event(
                    log,
                    "checkpoint cannot be restored; falling back to the previous one",
                    logging.WARNING,
                    path=path,
                    error=why,
                )
            store.assign_all(restored.values)
            latest = restored.checkpoint
            event(
                log, "parameter server restored from checkpoint", step=latest.step, epoch=latest.epoch, path=latest.path
            )
        else:
            store.assign_all(store.initial_values())
            event(log, "parameter server initialised with fresh weights")
        return Filled(store.global_step(), restored is not None)

    def checkpoint_due(self, view: LeaseView | None, global_step: int) -> bool:
        cfg = self.cfg
        if view is not None and view.checkpoint_interval_seconds:
            # the operator's adaptive interval replaces both of the spec's fixed ones
            return time.monotonic() - self.last_checkpoint_monotonic >= view.checkpoint_interval_seconds
        last_step = self.last_checkpoint.step if self.last_checkpoint else 0
        if cfg.checkpoint_interval_steps and global_step - last_step >= cfg.checkpoint_interval_steps:
            return True
        elapsed = time.monotonic() - self.last_checkpoint_monotonic
        return bool(cfg.checkpoint_interval_seconds) and elapsed >= cfg.checkpoint_interval_seconds

    def observe_checkpoint_age(self) -> None:
        metrics.checkpoint_age.set(time.monotonic() - self.last_checkpoint_monotonic)
        self.summaries.sample()  # once a step of the acting chief, as this: TensorBoard's training scalars

    def checkpoint(self, store: Any, reason: str) -> bool:
        """Writes and commits a checkpoint of the PS's state, fenced by the Lease; True when committed."""
        if self.epoch is None or time.monotonic() < self.retry_checkpoint_at:
            return False
        if self.demote_if_not_renewed() or self.token is None:
            return False
        started = time.monotonic()
        try:
            step, values = _state_to_save(store)
            path = checkpoints.save(
                self.cfg.checkpoint_uri,
                step,
                self.token,
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
            self.step_down()
            return False
        self._committed(checkpoints.Latest(step, self.epoch, path), values, time.monotonic() - started, reason)
        self.lease.publish_now()
        return True

    def _committed(
        self, latest: checkpoints.Latest, values: dict[str, np.ndarray], elapsed: float, reason: str
    ) -> None:
        """Remembers the checkpoint just committed (the Lease publishes it) and reports it."""
        self.last_error = ""
        self.final_written = latest.step >= self.cfg.train_steps
        if self.final_written:
            self.final_values = values
        self.last_checkpoint_write_seconds = round(elapsed, 3)
        self.last_checkpoint = latest
        self.last_checkpoint_time = time.time()
        self.last_checkpoint_monotonic = time.monotonic()
        metrics.checkpoint_seconds.observe(elapsed)
        metrics.checkpoint_step.set(latest.step)
        metrics.checkpoint_timestamp.set(self.last_checkpoint_time)
        event(
            log,
            "checkpoint written",
            reason=reason,
            step=latest.step,
            epoch=latest.epoch,
            path=latest.path,
            seconds=round(elapsed, 3),
        )

    # -- evaluation ------------------------------------------------------------------------------------
    def evaluate(self, store: Any, prepared: program.Prepared | None, beat: Callable[[], None]) -> Evaluation | None:
        """Evaluates the program's evaluation set on the parameter servers' state now (None without one):
        in the report until the next evaluation, in the gauges and in the log. ``beat`` after every batch
        keeps the Lease renewed meanwhile."""
        from ttj_trainer import evaluation

        if prepared is None or prepared.eval_context is None or prepared.program.eval_input is None:
            return None
        started = time.monotonic()
        p = prepared.program
        step = store.global_step()
        results = evaluation.evaluate(
            p,
            iter(p.eval_input(prepared.eval_context)),
            lambda features, labels: store.evaluate_batch(features, labels, p.loss),
            max_steps=p.eval_steps,
            device=store.local_device,
            beat=beat,
        )
        self.evaluation = Evaluation(step, results)
        metrics.show_evaluation(self.evaluation)
        self.summaries.evaluation(step, results)
        event(log, "evaluated", step=step, metrics=results, seconds=round(time.monotonic() - started, 3))
        return self.evaluation

    # -- the end ---------------------------------------------------------------------------------------
    def finish(self, store: Any, prepared: program.Prepared | None, beat: Callable[[], None]) -> None:
        """After the final checkpoint, once: its evaluation, then the exported model (which takes the model
        off the parameter servers, so it comes last)."""
        final = self.last_checkpoint
        if final is None or self.finished_step == final.step:
            return
        self.evaluate(store, prepared, beat)
        self.export(store, prepared)
        self.finished_step = final.step

    def export(self, store: Any, prepared: program.Prepared | None) -> None:
        """The chief's last duty: the final model, beside the checkpoints, for serving (see export.py); its
        directory goes into the report."""
        from ttj_trainer import export

        if self.final_values is None or self.last_checkpoint is None or prepared is None:
            return
        step = self.last_checkpoint.step
        try:
            where = export.export(store, self.final_values, self.cfg.checkpoint_uri, step)
        except Exception as err:  # the checkpoint is written: a model that cannot be exported fails nothing
            event(log, "could not export the final model", logging.ERROR, error=program.last_line(err))
            return
        self.export_path = export.location(self.cfg.checkpoint_uri, step)
        event(log, "exported the final model", path=self.export_path, **where)


def final_checkpoint_done(cfg: TrainerConfig, view: LeaseView) -> bool:
    """The index holds a checkpoint at trainSteps or beyond written by this job's chief of ``view``'s epoch."""
    try:
        latest = checkpoints.latest(cfg.checkpoint_uri)
        token = checkpoints.latest_token(cfg.checkpoint_uri)
    except checkpoints.CheckpointStorageError as err:
        event(log, "cannot read the checkpoint index", logging.WARNING, error=str(err))
        return False
    return latest is not None and token == checkpoints.Token(view.scope, view.epoch) and latest.step >= cfg.train_steps


def _state_to_save(store: Any) -> tuple[int, dict[str, np.ndarray]]:
    """The global step and every variable on the parameter servers; refused when any is not finite."""
    values = store.read_all()
    step = int(values["ttj/global_step"])
    broken = not_finite(values)
    if broken:
        raise LossNotFiniteError(
            f"the model's state on the parameter servers is not finite at global step {step} "
            f"({', '.join(broken[:3])}): no checkpoint written, the last good one stays"
        )
    return step, values
