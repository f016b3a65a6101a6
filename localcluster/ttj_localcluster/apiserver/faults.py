"""Fault injection for reliability tests: fail a share of API requests (409/429/500/503…), add latency, and
drop watch streams, with a seedable RNG so a failing run can be replayed."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from typing import Any

from .errors import ApiError

_REASONS = {
    409: (
        "Conflict",
        "injected fault: the object has been modified; please apply your changes to the latest version and try again",
    ),
    429: (
        "TooManyRequests",
        "injected fault: the server has received too many requests and has asked us to try again later",
    ),
    500: (
        "InternalError",
        'injected fault: an error on the server ("internal error") has prevented the request from succeeding',
    ),
    503: ("ServiceUnavailable", "injected fault: the server is currently unable to handle the request"),
    504: ("Timeout", "injected fault: the server was unable to return a response in the time allotted"),
}
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")


@dataclass
class FaultRule:
    """Fail ``probability`` of the matching requests with one of ``codes`` (chosen at random)."""

    probability: float
    codes: list[int] = field(default_factory=lambda: [500])
    #: verbs to affect (get, list, watch, create, update, patch, delete, deletecollection); empty = all
    verbs: list[str] = field(default_factory=list)
    #: resources to affect, as plural (``pods``), ``plural.group`` or ``plural/subresource``; empty = all
    resources: list[str] = field(default_factory=list)
    #: stop after failing this many requests (None = no limit)
    count: int | None = None
    injected: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.probability <= 1:
            raise ValueError(f"probability must be within [0, 1], not {self.probability}")
        for code in self.codes:
            if code not in _REASONS:
                raise ValueError(f"unsupported fault code {code}; choose from {sorted(_REASONS)}")
        for verb in self.verbs:
            if verb not in VERBS:
                raise ValueError(f"unknown verb {verb!r}; choose from {', '.join(VERBS)}")

    def matches(self, verb: str, plural: str, group: str, subresource: str | None) -> bool:
        if self.count is not None and self.injected >= self.count:
            return False
        if self.verbs and verb not in self.verbs:
            return False
        if self.resources:
            names = {plural, f"{plural}.{group}" if group else plural}
            if subresource:
                names |= {f"{n}/{subresource}" for n in list(names)}
            if not names & set(self.resources):
                return False
        return True

    def to_dict(self) -> dict[str, Any]:
        return {
            "probability": self.probability,
            "codes": self.codes,
            "verbs": self.verbs,
            "resources": self.resources,
            "count": self.count,
            "injected": self.injected,
        }


class FaultInjector:
    """Thread-safe: tests configure it from their own thread while the server's loop consults it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rng = random.Random()
        self.seed: int | None = None
        self.rules: list[FaultRule] = []
        self.latency_seconds = 0.0
        self.latency_jitter_seconds = 0.0
        #: bumped to end every watch stream open at that moment
        self.watch_generation = 0
        #: probability that a watch stream ends after each event it delivers
        self.watch_drop_probability = 0.0
        self.watches_dropped = 0

    def configure(
        self,
        *,
        seed: int | None = None,
        rules: list[FaultRule] | None = None,
        latency_seconds: float | None = None,
        latency_jitter_seconds: float | None = None,
        watch_drop_probability: float | None = None,
    ) -> None:
        with self._lock:
            if seed is not None:
                self.seed = seed
                self._rng = random.Random(seed)
            if rules is not None:
                self.rules = list(rules)
            if latency_seconds is not None:
                self.latency_seconds = max(0.0, latency_seconds)
            if latency_jitter_seconds is not None:
                self.latency_jitter_seconds = max(0.0, latency_jitter_seconds)
            if watch_drop_probability is not None:
                self.watch_drop_probability = watch_drop_probability

    def clear(self) -> None:
        with self._lock:
            self.rules = []
            self.latency_seconds = 0.0
            self.latency_jitter_seconds = 0.0
            self.watch_drop_probability = 0.0

    def drop_watches(self) -> None:
        """End every watch stream open now (clients see the stream close and must re-watch)."""
        with self._lock:
            self.watch_generation += 1

    def latency(self) -> float:
        with self._lock:
            if not self.latency_jitter_seconds:
                return self.latency_seconds
            return self.latency_seconds + self._rng.uniform(0, self.latency_jitter_seconds)

    def pick(self, verb: str, plural: str, group: str, subresource: str | None) -> ApiError | None:
        with self._lock:
            for rule in self.rules:
                if rule.matches(verb, plural, group, subresource) and self._rng.random() < rule.probability:
                    rule.injected += 1
                    code = self._rng.choice(rule.codes)
                    reason, message = _REASONS[code]
                    return ApiError(code, reason, message, retry_after_seconds=1 if code in (429, 503) else None)
        return None

    def should_drop_watch(self) -> bool:
        with self._lock:
            if self.watch_drop_probability and self._rng.random() < self.watch_drop_probability:
                self.watches_dropped += 1
                return True
        return False

    def to_dict(self) -> dict[str, Any]:
        with self._lock:
            return {
                "seed": self.seed,
                "rules": [r.to_dict() for r in self.rules],
                "latencySeconds": self.latency_seconds,
                "latencyJitterSeconds": self.latency_jitter_seconds,
                "watchDropProbability": self.watch_drop_probability,
                "watchGeneration": self.watch_generation,
                "watchesDropped": self.watches_dropped,
            }

    def configure_from_json(self, body: dict[str, Any]) -> None:
        """The HTTP form (POST /ttj-local/faults): keys as in ``to_dict``, plus ``dropWatches: true``."""
        rules = None
        if "rules" in body:
            rules = [
                FaultRule(
                    probability=float(r.get("probability", 1.0)),
                    codes=[int(c) for c in r.get("codes", [500])],
                    verbs=list(r.get("verbs", [])),
                    resources=list(r.get("resources", [])),
                    count=r.get("count"),
                )
                for r in body["rules"]
            ]
        self.configure(
            seed=body.get("seed"),
            rules=rules,
            latency_seconds=body.get("latencySeconds"),
            latency_jitter_seconds=body.get("latencyJitterSeconds"),
            watch_drop_probability=body.get("watchDropProbability"),
        )
        if body.get("dropWatches"):
            self.drop_watches()
