"""The operator's Prometheus metrics, on an injected registry (no global state)."""

from __future__ import annotations

import contextlib
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LABELS = ("namespace", "job")
#: Seconds; recoveries and handovers span a pod start-up, so the buckets reach minutes.
RECOVERY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
RECONCILE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)

#: status counter field → metric attribute
COUNTERS = {
    "preemptions": "preemptions",
    "replacements": "replacements",
    "chiefElections": "chief_elections",
    "failures": "failures",
}


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
        self.failures = Counter(
            "ttj_job_failures_total",
            "Failures of the training code (count toward backoffLimit).",
            LABELS,
            registry=registry,
        )
        self.active_workers = Gauge("ttj_active_workers", "Workers running.", LABELS, registry=registry)
        self.cost = Gauge("ttj_job_cost_usd", "Cost accrued by the job, in US dollars.", LABELS, registry=registry)
        self.global_step = Gauge("ttj_global_step", "Global step reported by the chief.", LABELS, registry=registry)
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

    def status_written(self, namespace: str, job: str, old: dict[str, Any], new: dict[str, Any]) -> None:
        """Count what the new status adds to the old one's counters, and set the gauges."""
        for field, attribute in COUNTERS.items():
            delta = int(new.get(field) or 0) - int(old.get(field) or 0)
            if delta > 0:
                getattr(self, attribute).labels(namespace, job).inc(delta)
        self.active_workers.labels(namespace, job).set((new.get("workers") or {}).get("active", 0))
        self.cost.labels(namespace, job).set((new.get("cost") or {}).get("usd", 0.0))
        self.global_step.labels(namespace, job).set((new.get("progress") or {}).get("globalStep", 0))

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
            self.reconcile,
            self.recovery,
            self.handover,
        ):
            with contextlib.suppress(KeyError):
                metric.remove(namespace, job)
