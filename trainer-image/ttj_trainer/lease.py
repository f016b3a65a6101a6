"""The trainer's side of the job's Lease (``lease_name(job)``): the only channel between operator and trainers.

Read: ``spec.holderIdentity`` (the chief pod), ``spec.leaseTransitions`` (the epoch),
``spec.leaseDurationSeconds`` and the annotations ``ANNOTATION_ACTIVE_WORKERS`` and
``ANNOTATION_DESIRED_WORKERS`` (the desired count now; a pod's TTJ_DESIRED_WORKERS is what it was when
the pod was made). Written, by the chief only, as a JSON merge patch carrying ``metadata.resourceVersion``
(so a concurrent write by the operator makes the patch fail with 409 instead of being clobbered):
``spec.renewTime`` and the annotation ``ANNOTATION_PROGRESS`` (a :class:`LeaseProgress`).

The chief renews only while its training loop turns (``alive``), so a renewed Lease means a working chief,
not merely a live thread. ``renewTime`` is this pod's clock; the operator compares it only for change.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ttj_contract import (
    ANNOTATION_ACTIVE_WORKERS,
    ANNOTATION_CHECKPOINT_INTERVAL,
    ANNOTATION_DESIRED_WORKERS,
    ANNOTATION_PROGRESS,
    LeaseProgress,
    format_micro_time,
    format_time,
)
from ttj_trainer.logs import event

API_TIMEOUT_SECONDS = 5.0
#: The operator's default leaseDurationSeconds, for a Lease that does not say.
DEFAULT_LEASE_SECONDS = 30.0

log = logging.getLogger("ttj_trainer.lease")


class LeaseUnavailableError(Exception):
    """The Lease could not be read (missing, or the API unreachable)."""


@dataclass(frozen=True)
class LeaseView:
    holder: str | None
    epoch: int
    duration_seconds: int | None
    active_workers: int | None
    desired_workers: int | None
    resource_version: str
    #: The operator's adaptive checkpoint interval (seconds), when the job asked for one.
    checkpoint_interval_seconds: int | None = None
    #: The Lease's creationTimestamp and uid: which job's Lease this is, for fencing across jobs.
    scope: str = ""

    def names(self, pod: str) -> bool:
        return self.holder == pod


def renewal_fresh(last_renewal: float | None, now: float, duration_seconds: float) -> bool:
    """A chief may act as chief (checkpoint, restore) only while its last renewal is younger than the lease:
    after that the operator may have named another one, whatever this pod last read."""
    return last_renewal is not None and now - last_renewal < duration_seconds


def _count(annotations: dict[str, str], key: str, minimum: int) -> int | None:
    """An integer annotation, or None when it is absent or malformed (malformed ones are logged)."""
    raw = annotations.get(key)
    if raw is None:
        return None
    try:
        return max(minimum, int(raw))
    except ValueError:
        log.warning("ignoring malformed annotation %s=%r", key, raw)
        return None


def _view(lease: Any) -> LeaseView:
    spec = lease.spec
    annotations = lease.metadata.annotations or {}
    active = _count(annotations, ANNOTATION_ACTIVE_WORKERS, minimum=0)
    desired = _count(annotations, ANNOTATION_DESIRED_WORKERS, minimum=1)
    return LeaseView(
        holder=spec.holder_identity or None if spec else None,
        epoch=int((spec.lease_transitions if spec else None) or 0),
        duration_seconds=spec.lease_duration_seconds if spec else None,
        active_workers=active,
        desired_workers=desired,
        resource_version=lease.metadata.resource_version or "",
        checkpoint_interval_seconds=_count(annotations, ANNOTATION_CHECKPOINT_INTERVAL, minimum=1),
        scope=_scope(lease.metadata),
    )


def _scope(metadata: Any) -> str:
    created = getattr(metadata, "creation_timestamp", None)
    stamp = format_time(created) if isinstance(created, datetime) else str(created or "")
    uid = getattr(metadata, "uid", None) or ""
    return f"{stamp}/{uid}" if stamp or uid else ""


class LeaseClient:
    """GET and resourceVersion-checked merge PATCH of one Lease, through the official kubernetes client."""

    def __init__(self, namespace: str, name: str) -> None:
        from kubernetes import client, config

        if os.environ.get("KUBECONFIG"):
            config.load_kube_config(config_file=os.environ["KUBECONFIG"])
        else:
            config.load_incluster_config()
        self._api = client.CoordinationV1Api()
        self.namespace = namespace
        self.name = name

    def get(self) -> LeaseView:
        from kubernetes.client.exceptions import ApiException

        try:
            lease = self._api.read_namespaced_lease(self.name, self.namespace, _request_timeout=API_TIMEOUT_SECONDS)
        except ApiException as err:
            raise LeaseUnavailableError(
                f"cannot read Lease {self.namespace}/{self.name}: {err.status} {err.reason}"
            ) from err
        except Exception as err:  # network errors come in many types (urllib3, socket, ssl)
            raise LeaseUnavailableError(f"cannot read Lease {self.namespace}/{self.name}: {err}") from err
        return _view(lease)

    def renew(self, seen: LeaseView, progress: LeaseProgress | None) -> LeaseView | None:
        """Renews as the holder ``seen`` names; returns the new view, or None when the Lease changed meanwhile."""
        from kubernetes.client.exceptions import ApiException

        body: dict[str, Any] = {
            "metadata": {"resourceVersion": seen.resource_version},
            "spec": {"renewTime": format_micro_time(datetime.now(UTC))},
        }
        if progress is not None:
            body["metadata"]["annotations"] = {ANNOTATION_PROGRESS: progress.to_annotation()}
        try:
            lease = self._api.patch_namespaced_lease(
                self.name,
                self.namespace,
                body,
                _content_type="application/merge-patch+json",
                _request_timeout=API_TIMEOUT_SECONDS,
            )
        except ApiException as err:
            if err.status == 409:
                return None  # someone (the operator) wrote first: re-read before deciding anything
            raise LeaseUnavailableError(
                f"cannot renew Lease {self.namespace}/{self.name}: {err.status} {err.reason}"
            ) from err
        except Exception as err:
            raise LeaseUnavailableError(f"cannot renew Lease {self.namespace}/{self.name}: {err}") from err
        return _view(lease)


class LeaseWatcher(threading.Thread):
    """Keeps the latest view of the Lease and, while it names this pod, renews it and publishes progress.

    Polls with GET every ``poll_seconds`` (and at least every leaseDurationSeconds/3 while chief): simple,
    and it costs the API server one small request per second per trainer.
    """

    def __init__(
        self,
        client: LeaseClient,
        pod_name: str,
        progress: Callable[[], LeaseProgress | None],
        poll_seconds: float = 1.0,
        alive: Callable[[float], bool] = lambda _duration: True,
    ) -> None:
        super().__init__(name="lease-watcher", daemon=True)
        self.client = client
        self.pod_name = pod_name
        self.progress = progress
        self.alive = alive
        self.poll_seconds = poll_seconds
        self.view: LeaseView | None = None
        self.last_renewal: float | None = None
        self.changed = threading.Event()
        self._stop_event = threading.Event()
        self._publish_now = threading.Event()
        self._last_error = ""
        self._held_back = False

    def stop(self) -> None:
        self._stop_event.set()
        self._publish_now.set()

    def publish_now(self, timeout: float = 5.0) -> bool:
        """Renews and publishes progress at once (e.g. the final checkpoint before exiting); True when done."""
        view = self.view
        if view is None or not view.names(self.pod_name):
            return False
        try:
            renewed = self.client.renew(view, self.progress())
            if renewed is None:
                renewed = self.client.get()
                if not renewed.names(self.pod_name):
                    return False
                renewed = self.client.renew(renewed, self.progress())
        except LeaseUnavailableError as err:
            event(log, "could not publish progress", logging.WARNING, error=str(err))
            return False
        if renewed is not None:
            self.observe(renewed)
            self.last_renewal = time.monotonic()
        return renewed is not None

    def observe(self, view: LeaseView) -> None:
        old = self.view
        self.view = view
        if old is None or (old.holder, old.epoch, old.active_workers, old.desired_workers) != (
            view.holder,
            view.epoch,
            view.active_workers,
            view.desired_workers,
        ):
            self.changed.set()

    def run(self) -> None:
        while not self._stop_event.is_set():
            interval = self.poll_seconds
            try:
                view = self.client.get()
                self.observe(view)
                duration = float(view.duration_seconds or DEFAULT_LEASE_SECONDS)
                if view.names(self.pod_name) and not self.alive(duration):
                    if not self._held_back:
                        event(log, "not renewing the Lease: the training loop is stuck", logging.WARNING)
                    self._held_back = True
                elif view.names(self.pod_name):
                    self._held_back = False
                    interval = min(interval, duration / 3.0)
                    renewed = self.client.renew(view, self.progress())
                    if renewed is not None:
                        self.observe(renewed)
                        self.last_renewal = time.monotonic()
                    else:
                        interval = 0.05  # lost a race with another writer: re-read soon
                self._last_error = ""
            except LeaseUnavailableError as err:
                if str(err) != self._last_error:
                    event(log, "lease unavailable; will retry", logging.WARNING, error=str(err))
                    self._last_error = str(err)
            except Exception:
                log.exception("unexpected error in the lease watcher; will retry")
            self._publish_now.wait(interval)
            self._publish_now.clear()


class LeaseLink:
    """This pod's standing with the Lease: the watcher's latest view, whether its renewals are fresh, and a
    read on demand (what a chief's fence and a finished worker rely on)."""

    def __init__(self, client: LeaseClient, watcher: LeaseWatcher, pod_name: str) -> None:
        self.client = client
        self.watcher = watcher
        self.pod_name = pod_name

    @property
    def view(self) -> LeaseView | None:
        return self.watcher.view

    def names_this_pod(self, view: LeaseView | None) -> bool:
        return view is not None and view.names(self.pod_name)

    def renewed_recently(self) -> bool:
        view = self.watcher.view
        duration = float(view.duration_seconds or DEFAULT_LEASE_SECONDS) if view else DEFAULT_LEASE_SECONDS
        return renewal_fresh(self.watcher.last_renewal, time.monotonic(), duration)

    def read(self) -> LeaseView | None:
        """The Lease now, or None (said in the log) when it cannot be read."""
        try:
            view = self.client.get()
        except LeaseUnavailableError as err:
            event(log, "cannot read the Lease at the end; will retry", logging.WARNING, error=str(err))
            return None
        self.watcher.observe(view)
        return view

    def current(self) -> LeaseView:
        """The Lease, read now (LeaseUnavailableError when it cannot be read)."""
        view = self.client.get()
        self.watcher.observe(view)
        return view

    def publish_now(self) -> bool:
        return self.watcher.publish_now()
