"""One job's passes: observe, plan, apply, write the status once, hand over the events, and say when the next
pass is due."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from typing import Any

import kopf

from ttj.controller.apply import Applied, Conflict
from ttj.controller.backoff import REFUSED_WRITES_BACKOFF
from ttj.controller.context import OperatorContext
from ttj.controller.memory import JobKey, OwnWrite, resource_version
from ttj.controller.observe import JobIndexes, PassInputs, add_own_writes, inputs_of, observe
from ttj.kubeapi import KubeError
from ttj.mergepatch import merge_patch_between
from ttj.planner import Observed, Plan, PlannerConfig, Write, observed_child, observed_pod, plan
from ttj.planner.observed import json_copy

log = logging.getLogger("ttj.controller")

#: After a status write lost to a concurrent change (409), the next pass plans on the newer job this soon.
CONFLICT_RETRY_SECONDS = 0.05
#: Until a job first runs, a pass woken by a change waits this long for the changes that follow it. Its pods come
#: up one event at a time (bound, started, ready) over seconds; a pass for each event, each writing the counts
#: in the status, doubled the operator's CPU at a 100-job start-up and left jobs whose pods were all ready
#: waiting behind the others' passes. Once the job has run, every pass is at once: a loss waits for nothing.
START_UP_COALESCE_SECONDS = 0.25
#: The phases of a job that has not run yet (no status yet, or Pending).
_STARTING_PHASES = (None, "Pending")


class JobReconciler:
    """One job's passes: observe, plan, apply, write the status, hand over the events."""

    def __init__(self, ctx: OperatorContext, key: JobKey) -> None:
        self.ctx = ctx
        self.key = key
        self.applier = ctx.applier
        #: Passes in a row in which the API refused a write: the retries back off.
        self.refused_passes = 0
        #: Whether the job has not run yet, as the last pass planned it.
        self.starting = True
        #: The inputs of the last pass that ended as planned (its writes applied), and when its timer is due
        #: (time.monotonic()); None after a pass that did not.
        self.last_inputs: PassInputs | None = None
        self.due_at = 0.0
        #: Passes not planned, their inputs unchanged (for tests and the benchmark's counts).
        self.skipped_passes = 0

    def coalesce_seconds(self) -> float:
        """How long a pass woken by a change waits for more (see :data:`START_UP_COALESCE_SECONDS`)."""
        return START_UP_COALESCE_SECONDS if self.starting else 0.0

    async def run_pass(self, body: kopf.Body, indexes: JobIndexes) -> float | None:
        """One reconcile; returns seconds until the next timed pass, None when the job is gone. A pass woken
        before the last one's timer whose inputs are the last one's (see :func:`inputs_of`) is not planned: the
        planner is pure, so it would plan the same (but for cost accrued since, written at the next pass)."""
        namespace, name = self.key
        started = time.perf_counter()
        seen = self._current_job_source(body)
        observed = await self._observe(seen, indexes)
        config = self._planner_config()
        inputs = inputs_of(seen, observed, self.ctx.planner, config.prices)
        if inputs is not None and inputs == self.last_inputs:
            remaining = self.due_at - time.monotonic()
            if remaining > 0:
                self.skipped_passes += 1
                return remaining
        self.last_inputs = None  # until this pass ends as planned
        job = json_copy(dict(seen))
        now = self.ctx.clock()
        result = plan(job, observed, now, config)
        self._log_plan(job, observed, result)
        try:
            applied = await self._apply(result.writes)
            self._remember_lease(observed.lease, applied.lease)
            self._remember_children(applied)
            if applied.refused:
                # The same pass planned again, knowing what was refused: its status and Events say so.
                result = plan(job, observed, now, config, refused=applied.refused)
            await self._write_status(job, result)
        except Conflict as exc:
            log.info("%s/%s: %s; planning again", namespace, name, exc)
            return CONFLICT_RETRY_SECONDS
        except KubeError as exc:
            return self._after_refused_write(exc)
        finally:
            self.ctx.metrics.reconcile.labels(namespace, name).observe(time.perf_counter() - started)
        self.starting = result.status.get("phase") in _STARTING_PHASES
        self._observe_durations(applied, result)
        self.ctx.events.hand_over(job, result.events, now)
        if result.delete_job:
            await self.ctx.api_threads.run(1, self.applier.delete_job, namespace, name)
            return None
        delay = self._next_pass(applied, result)
        if delay is not None and not applied.refused:
            # A pass on the same inputs would plan the same writes (each idempotent, each applied) and status.
            self.last_inputs, self.due_at = inputs, time.monotonic() + delay
        return delay

    def _current_job_source(self, body: kopf.Body) -> Mapping[str, Any]:
        """The job as the pass plans on it, not copied: our last status write's answer while the watch still
        shows the job from before it, else kopf's body."""
        memory = self.ctx.state.jobs.get(self.key)
        if memory is not None and memory.written is not None:
            if resource_version(body) in memory.written.before:
                return memory.written.obj
            memory.written = None  # the watch delivered our writes, or a newer change
        return body

    async def _apply(self, writes: list[Write]) -> Applied:
        if not writes:
            return Applied()
        return await self.ctx.api_threads.run(len(writes), self.applier.apply, self.key[0], writes)

    async def _observe(self, job: Mapping[str, Any], indexes: JobIndexes) -> Observed:
        observed = observe(self.key, indexes)
        memory = self.ctx.state.jobs.get(self.key)
        if memory is not None and memory.written_children:
            add_own_writes(observed, memory.written_children)
        observed.lease = self._latest_lease(observed.lease)
        if self.ctx.placement is not None:
            observed.placement = await self.ctx.placement.check(job.get("spec") or {}, indexes.all_nodes)
        return observed

    def _latest_lease(self, seen: dict[str, Any] | None) -> dict[str, Any] | None:
        """The Lease as our own latest writes left it while the watch still shows it from before them."""
        memory = self.ctx.state.jobs.get(self.key)
        if seen is None or memory is None or memory.lease_written is None:
            return seen
        ours = memory.lease_written.over(seen)
        if ours is None:
            memory.lease_written = None  # the watch delivered our writes, or a newer change
            return seen
        return ours

    def _remember_lease(self, observed: dict[str, Any] | None, answer: dict[str, Any] | None) -> None:
        if observed is None or answer is None:
            return
        memory = self.ctx.state.job(self.key)
        before = memory.lease_written.before if memory.lease_written is not None else frozenset()
        memory.lease_written = OwnWrite(before | {resource_version(observed)}, answer)

    def _remember_children(self, applied: Applied) -> None:
        if not applied.written:
            return
        written = self.ctx.state.job(self.key).written_children
        for kind, name, answer in applied.written:
            if (answer.get("metadata") or {}).get("name") == name:
                written[(kind, name)] = observed_pod(answer) if kind == "Pod" else observed_child(kind, answer)

    def _planner_config(self) -> PlannerConfig:
        if self.ctx.prices is None:
            return self.ctx.planner
        return dataclasses.replace(self.ctx.planner, prices=self.ctx.prices.current())  # a stat() when unchanged

    def _log_plan(self, job: dict[str, Any], observed: Observed, result: Plan) -> None:
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "%s/%s: pass on job rv %s, lease rv %s: %s",
                *self.key,
                job.get("metadata", {}).get("resourceVersion"),
                ((observed.lease or {}).get("metadata") or {}).get("resourceVersion"),
                [repr(a)[:300] for a in result.writes] or "nothing to do",
            )

    async def _write_status(self, job: dict[str, Any], result: Plan) -> None:
        """The planned status, as a merge patch on the status seen, when the planner says it is due."""
        namespace, name = self.key
        old_status = job.get("status") or {}
        if not result.status_due:
            return
        patch = merge_patch_between(old_status, result.status)
        pre = job["metadata"].get("resourceVersion")
        answer = await self.ctx.api_threads.run(1, self.applier.write_status, namespace, name, pre, patch)
        # Not a deep copy: ``job`` is this pass's own, and neither it nor this is changed after (a pass plans on
        # a deep copy of what it finds here).
        metadata = {**job["metadata"], "resourceVersion": answer["metadata"]["resourceVersion"]}
        after = {**job, "metadata": metadata, "status": answer.get("status", result.status)}
        memory = self.ctx.state.job(self.key)
        # Every version our writes replaced since the watch last caught up: a watch two writes behind still
        # shows one of them, and a pass planned on it would lose its status write to a 409.
        before = memory.written.before if memory.written is not None else frozenset()
        memory.written = OwnWrite(before | {resource_version(job)}, after)
        self.ctx.metrics.status_written(namespace, name, old_status, result.status, job.get("spec"))

    def _after_refused_write(self, exc: KubeError) -> float | None:
        """Seconds until the next pass after the API refused the status write (None: the job is gone)."""
        namespace, name = self.key
        if exc.status == 404:  # the status write found no job: deleted while the watch was away
            log.info("%s/%s: the job is gone", namespace, name)
            return None
        self.refused_passes += 1
        delay = REFUSED_WRITES_BACKOFF.delay(self.refused_passes, exc.retry_after_seconds)
        log.warning("%s/%s: %s; retrying in %.1fs", namespace, name, exc, delay)
        return delay

    def _observe_durations(self, applied: Applied, result: Plan) -> None:
        namespace, name = self.key
        for seconds in applied.recoveries:
            self.ctx.metrics.recovery.labels(namespace, name).observe(seconds)
        for observation in result.observations:
            if observation.metric == "chief_handover_seconds":
                self.ctx.metrics.handover.labels(namespace, name).observe(observation.seconds)

    def _next_pass(self, applied: Applied, result: Plan) -> float | None:
        """Seconds until the next timed pass: the planner's timer, or a back-off after refused writes."""
        if not applied.refused:
            self.refused_passes = 0
            return result.requeue_after
        self.refused_passes += 1
        # Back off, but not past a timer of the planner's (a stale lease), nor before the server's Retry-After.
        timer = REFUSED_WRITES_BACKOFF.cap if result.requeue_after is None else result.requeue_after
        retry = min(REFUSED_WRITES_BACKOFF.delay(self.refused_passes), timer)
        return max(retry, applied.retry_after_seconds or 0.0)
