"""The operator's Prometheus metrics, on an injected registry (no global state)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ttj.api.models import Phase
from ttj_contract import parse_time

LABELS = ("namespace", "job")
#: The deadline's gauge names the job ``name``, as agreed with the deadline simulator and end-to-end tests.
DEADLINE_LABELS = ("namespace", "name")
#: Seconds; recoveries and handovers span a pod start-up, so the buckets reach minutes.
RECOVERY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
RECONCILE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)

#: status counter field → metric attribute
COUNTERS = {
    "preemptions": "preemptions",
    "replacements": "replacements",
    "chiefElections": "chief_elections",
    "failures": "failures",
    "migrations": "migrations",
}
#: The phases ttj_job_phase reports.
PHASES = tuple(phase.value for phase in Phase)
#: A finished job's deadline has no slack left to watch.
FINISHED = frozenset({Phase.SUCCEEDED.value, Phase.FAILED.value})


class Metrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.preemptions = Counter(
            "ttj_preemptions_total", "Workers and parameter servers lost to preemption.", LABELS, registry=registry
        )
        self.replacements = Counter(
            "ttj_worker_replacements_total", "Worker pods created to replace lost ones.", LABELS, registry=registry
        )
        self.chief_elections = Counter("ttj_chief_elections_total", "Chiefs elected.", LABELS, registry=registry)
        self.migrations = Counter(
            "ttj_worker_migrations_total",
            "Workers a compute class's active migration moved (planned handovers, not preemptions).",
            LABELS,
            registry=registry,
        )
        self.failures = Counter(
            "ttj_job_failures_total",
            "Failures of the training code (count toward backoffLimit).",
            LABELS,
            registry=registry,
        )
        self.active_workers = Gauge("ttj_active_workers", "Workers running.", LABELS, registry=registry)
        self.cost = Gauge("ttj_job_cost_usd", "Cost accrued by the job, in US dollars.", LABELS, registry=registry)
        self.global_step = Gauge("ttj_global_step", "Global step reported by the chief.", LABELS, registry=registry)
        self.on_demand_equivalent = Gauge(
            "ttj_job_on_demand_equivalent_usd",
            "What the job's pod-seconds would have cost at on-demand prices, in US dollars.",
            LABELS,
            registry=registry,
        )
        self.net_savings = Gauge(
            "ttj_job_net_savings_usd",
            "Savings against on-demand prices net of what preemptions cost (status.savings.netUSD).",
            LABELS,
            registry=registry,
        )
        self.preemption_loss = Gauge(
            "ttj_job_preemption_loss_usd",
            "What preemptions cost the job: replacements' start-up and lost steps, in US dollars.",
            LABELS,
            registry=registry,
        )
        self.budget = Gauge(
            "ttj_job_budget_usd",
            "The job's budget (spec.budget.maxCostUSD); absent without one.",
            LABELS,
            registry=registry,
        )
        self.checkpoint_step = Gauge(
            "ttj_checkpoint_step", "Global step of the latest checkpoint the chief reported.", LABELS, registry=registry
        )
        self.checkpoint_time = Gauge(
            "ttj_checkpoint_timestamp_seconds",
            "Unix time of the latest checkpoint the chief reported (checkpoint age: time() minus this).",
            LABELS,
            registry=registry,
        )
        self.evaluation = Gauge(
            "ttj_job_evaluation",
            "The chief's latest evaluation of the program's evaluation set, by Keras metric name "
            "(status.progress.evaluation).",
            (*LABELS, "metric"),
            registry=registry,
        )
        self.evaluation_step = Gauge(
            "ttj_job_evaluation_step",
            "Global step of the chief's latest evaluation (status.progress.evaluationStep).",
            LABELS,
            registry=registry,
        )
        #: The metric names each job's ttj_job_evaluation has series for, so that dropped ones go too.
        self._evaluated: dict[tuple[str, str], frozenset[str]] = {}
        self.chief_epoch = Gauge(
            "ttj_chief_epoch", "The chief's epoch (the Lease's transitions).", LABELS, registry=registry
        )
        self.phase = Gauge(
            "ttj_job_phase", "1 for the job's phase now, 0 for the others.", (*LABELS, "phase"), registry=registry
        )
        self.deadline_slack = Gauge(
            "ttj_deadline_slack_seconds",
            "With spec.deadline: seconds from the completion projected at p90, with the catch-up workers decided, "
            "to the deadline (status.deadline.slackSeconds; below 0: late); absent once the job finished.",
            DEADLINE_LABELS,
            registry=registry,
        )
        self.steps_lost = Counter(
            "ttj_steps_lost_total", "Global steps trained again after losses.", LABELS, registry=registry
        )
        self.slot_empty = Histogram(
            "ttj_slot_empty_seconds",
            "A loss until its replacement was ready (status.preemptionCosts[].slotEmptySeconds), per loss.",
            LABELS,
            buckets=RECOVERY_BUCKETS,
            registry=registry,
        )
        self.reconcile = Histogram(
            "ttj_reconcile_duration_seconds",
            "Time of one reconcile pass (observe, plan, apply, write status).",
            LABELS,
            buckets=RECONCILE_BUCKETS,
            registry=registry,
        )
        self.recovery = Histogram(
            "ttj_recovery_seconds",
            "Preemption seen (first evidence in the cluster) until the replacement pod was created.",
            LABELS,
            buckets=RECOVERY_BUCKETS,
            registry=registry,
        )
        self.handover = Histogram(
            "ttj_chief_handover_seconds",
            "Chief lost until the new chief renewed its lease.",
            LABELS,
            buckets=RECOVERY_BUCKETS,
            registry=registry,
        )

    def status_written(
        self,
        namespace: str,
        job: str,
        old: Mapping[str, Any],
        new: Mapping[str, Any],
        spec: dict[str, Any] | None = None,
    ) -> None:
        """Count what the new status adds to the old one's counters, and set the gauges."""
        for field, attribute in COUNTERS.items():
            delta = int(new.get(field) or 0) - int(old.get(field) or 0)
            if delta > 0:
                getattr(self, attribute).labels(namespace, job).inc(delta)
        savings = new.get("savings") or {}
        grown = int(savings.get("stepsLost") or 0) - int((old.get("savings") or {}).get("stepsLost") or 0)
        if grown > 0:
            self.steps_lost.labels(namespace, job).inc(grown)
        closed_before = {
            (r.get("pod"), r.get("lostAt")) for r in old.get("preemptionCosts") or [] if r.get("recoveredAt")
        }
        for record in new.get("preemptionCosts") or []:
            key = (record.get("pod"), record.get("lostAt"))
            if record.get("recoveredAt") and key not in closed_before and record.get("slotEmptySeconds") is not None:
                self.slot_empty.labels(namespace, job).observe(float(record["slotEmptySeconds"]))
        cost = new.get("cost") or {}
        self.active_workers.labels(namespace, job).set((new.get("workers") or {}).get("active", 0))
        self.cost.labels(namespace, job).set(cost.get("usd", 0.0))
        self.on_demand_equivalent.labels(namespace, job).set(cost.get("onDemandEquivalentUSD", 0.0))
        self.net_savings.labels(namespace, job).set(savings.get("netUSD", 0.0))
        self.preemption_loss.labels(namespace, job).set(savings.get("preemptionLossUSD", 0.0))
        self.global_step.labels(namespace, job).set((new.get("progress") or {}).get("globalStep", 0))
        self.chief_epoch.labels(namespace, job).set((new.get("chief") or {}).get("epoch", 0))
        progress = new.get("progress") or {}
        if progress.get("checkpointStep") is not None:
            self.checkpoint_step.labels(namespace, job).set(progress["checkpointStep"])
        checkpointed = parse_time(progress.get("checkpointTime"))
        if checkpointed is not None:
            self.checkpoint_time.labels(namespace, job).set(checkpointed.timestamp())
        self._set_evaluation(namespace, job, progress)
        for phase in PHASES:
            self.phase.labels(namespace, job, phase).set(1 if new.get("phase") == phase else 0)
        slack = (new.get("deadline") or {}).get("slackSeconds")
        if slack is not None and new.get("phase") not in FINISHED:
            self.deadline_slack.labels(namespace, job).set(float(slack))
        else:
            with contextlib.suppress(KeyError):
                self.deadline_slack.remove(namespace, job)
        limit = ((spec or {}).get("budget") or {}).get("maxCostUSD")
        if limit is not None:
            self.budget.labels(namespace, job).set(float(limit))
        else:
            with contextlib.suppress(KeyError):
                self.budget.remove(namespace, job)

    def _set_evaluation(self, namespace: str, job: str, progress: Mapping[str, Any]) -> None:
        if progress.get("evaluationStep") is not None:
            self.evaluation_step.labels(namespace, job).set(progress["evaluationStep"])
        metrics: Mapping[str, float] = progress.get("evaluation") or {}
        for name, value in metrics.items():
            self.evaluation.labels(namespace, job, name).set(value)
        for gone in self._evaluated.get((namespace, job), frozenset()) - set(metrics):
            with contextlib.suppress(KeyError):
                self.evaluation.remove(namespace, job, gone)
        self._evaluated[(namespace, job)] = frozenset(metrics)

    def forget(self, namespace: str, job: str) -> None:
        """Drop a deleted job's series."""
        for metric in (
            self.preemptions,
            self.replacements,
            self.chief_elections,
            self.failures,
            self.active_workers,
            self.cost,
            self.global_step,
            self.on_demand_equivalent,
            self.net_savings,
            self.preemption_loss,
            self.budget,
            self.chief_epoch,
            self.checkpoint_step,
            self.checkpoint_time,
            self.evaluation_step,
            self.deadline_slack,
            self.steps_lost,
            self.slot_empty,
            self.reconcile,
            self.recovery,
            self.handover,
        ):
            with contextlib.suppress(KeyError):
                metric.remove(namespace, job)
        for phase in PHASES:
            with contextlib.suppress(KeyError):
                self.phase.remove(namespace, job, phase)
        for name in self._evaluated.pop((namespace, job), frozenset()):
            with contextlib.suppress(KeyError):
                self.evaluation.remove(namespace, job, name)
