"""Events are one resource served through two APIs, as in Kubernetes: core ``v1`` Events and ``events.k8s.io/v1``
Events are the same stored objects (the core form is the storage form), each API converting field by field as
kube's conversion functions do (``pkg/apis/events/v1``):

=========================== ==============================
core/v1 Event               events.k8s.io/v1 Event
=========================== ==============================
involvedObject              regarding
message                     note
reportingComponent          reportingController
source                      deprecatedSource
firstTimestamp              deprecatedFirstTimestamp
lastTimestamp               deprecatedLastTimestamp
count                       deprecatedCount
=========================== ==============================

``metadata``, ``eventTime``, ``series`` (``count``, ``lastObservedTime``), ``reportingInstance``, ``action``,
``reason``, ``related`` and ``type`` keep their names. Fields either form does not know are kept as they are.
"""

from __future__ import annotations

from typing import Any

#: core/v1 field → events.k8s.io/v1 field, for the fields that are renamed
CORE_TO_EVENTS_V1: dict[str, str] = {
    "involvedObject": "regarding",
    "message": "note",
    "reportingComponent": "reportingController",
    "source": "deprecatedSource",
    "firstTimestamp": "deprecatedFirstTimestamp",
    "lastTimestamp": "deprecatedLastTimestamp",
    "count": "deprecatedCount",
}
EVENTS_V1_TO_CORE: dict[str, str] = {v: k for k, v in CORE_TO_EVENTS_V1.items()}


def _renamed(obj: dict[str, Any], names: dict[str, str], api_version: str) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": api_version, "kind": "Event"}
    for key, value in obj.items():
        if key in ("apiVersion", "kind"):
            continue
        out[names.get(key, key)] = value
    return out


def to_events_v1(core_event: dict[str, Any]) -> dict[str, Any]:
    """A stored (core/v1) Event as events.k8s.io/v1 presents it."""
    event = _renamed(core_event, CORE_TO_EVENTS_V1, "events.k8s.io/v1")
    # kube drops the zero values the core form carries (count 0, empty source) rather than showing them
    if not event.get("deprecatedCount"):
        event.pop("deprecatedCount", None)
    if not event.get("deprecatedSource"):
        event.pop("deprecatedSource", None)
    event.setdefault("eventTime", None)  # required in this API; kube serves null for Events made without one
    return event


def to_core(events_v1_event: dict[str, Any]) -> dict[str, Any]:
    """An events.k8s.io/v1 Event in the core/v1 (storage) form."""
    return _renamed(events_v1_event, EVENTS_V1_TO_CORE, "v1")


def involved_object(event: dict[str, Any]) -> dict[str, Any]:
    """The object an Event is about, in either form."""
    found = event.get("involvedObject") or event.get("regarding") or {}
    return found if isinstance(found, dict) else {}


def last_seen(event: dict[str, Any]) -> Any:
    """When an Event was last seen, as kubectl's LAST SEEN column takes it, in either form."""
    series = event.get("series") or {}
    return (
        series.get("lastObservedTime")
        or event.get("lastTimestamp")
        or event.get("deprecatedLastTimestamp")
        or event.get("eventTime")
        or event["metadata"].get("creationTimestamp")
    )
