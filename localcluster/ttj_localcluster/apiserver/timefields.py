"""``metav1.Time`` and ``metav1.MicroTime`` fields, refused as kube-apiserver refuses them.

kube-apiserver decodes a built-in object into its Go type before anything else, and a time field's
``UnmarshalJSON`` runs Go's ``time.Parse``: ``time.RFC3339`` for ``Time`` (``Z`` or ``±hh:mm``, any
fraction or none) and ``RFC3339Micro`` (``2006-01-02T15:04:05.000000Z07:00``: exactly six fractional
digits) for ``MicroTime``. A value Go cannot parse fails the whole request. ``go_time_error`` follows Go's
parser for these two layouts closely enough to accept what it accepts and word the refusal as it does
(``parsing time "…" as "…": cannot parse "…" as "…"``); the field tables say where each kind keeps its times.
"""

from __future__ import annotations

import calendar
import functools
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

from ttj_contract import format_micro_time, format_time


class TimeKind(Enum):
    TIME = "2006-01-02T15:04:05Z07:00"
    MICRO_TIME = "2006-01-02T15:04:05.000000Z07:00"


#: Go's layout chunks: (literal prefix, standard element).
_CHUNKS: dict[TimeKind, tuple[tuple[str, str], ...]] = {
    TimeKind.TIME: (("", "2006"), ("-", "01"), ("-", "02"), ("T", "15"), (":", "04"), (":", "05"), ("", "Z07:00")),
    TimeKind.MICRO_TIME: (
        ("", "2006"),
        ("-", "01"),
        ("-", "02"),
        ("T", "15"),
        (":", "04"),
        (":", "05"),
        ("", ".000000"),
        ("", "Z07:00"),
    ),
}


class _Bad(Exception):
    """Go's errBad: the element does not match."""


def _quote(text: str) -> str:
    """Go's time.quote: double quotes, backslash-escaped quotes and backslashes, \\x bytes for the rest."""
    out = ['"']
    for char in text:
        if char < " " or ord(char) >= 0x80:
            out.extend(f"\\x{byte:02x}" for byte in char.encode())
        else:
            out.append("\\" + char if char in '"\\' else char)
    out.append('"')
    return "".join(out)


def _isdigit(text: str, index: int) -> bool:
    return index < len(text) and "0" <= text[index] <= "9"


def _getnum(text: str, fixed: bool) -> tuple[int, str]:
    """Go's getnum: one or two digits (exactly two when ``fixed``)."""
    if not _isdigit(text, 0):
        raise _Bad
    if not _isdigit(text, 1):
        if fixed:
            raise _Bad
        return int(text[0]), text[1:]
    return int(text[:2]), text[2:]


def _atoi(text: str) -> int:
    """Go's time.atoi: an optional sign, then digits only."""
    sign = -1 if text[:1] == "-" else 1
    digits = text[1:] if text[:1] in "+-" else text
    if digits and not (digits.isascii() and digits.isdigit()):
        raise _Bad
    return sign * int(digits or "0")


def _nanoseconds(text: str, width: int) -> tuple[dict[str, int], str | None]:
    """Go's parseNanoseconds over ``text[:width]`` (separator + digits): the nanoseconds, or a range error."""
    if text[:1] not in (".", ","):
        raise _Bad
    digits = text[1 : min(width, 10)]
    value = _atoi(digits)
    if value < 0:
        return {}, "fractional second"
    return {"nanos": value * 10 ** (9 - len(digits.lstrip("+")))}, None


def _element(std: str, value: str, following: str | None) -> tuple[str, dict[str, int], str | None]:
    """Parse one standard element: (rest of the value, fields read, range error)."""
    if std == "2006":
        if len(value) < 4 or not _isdigit(value, 0):
            raise _Bad
        return value[4:], {"year": _atoi(value[:4])}, None
    if std in ("01", "02", "04"):
        number, rest = _getnum(value, True)
        field = {"01": "month", "02": "day", "04": "minute"}[std]
        bad = (field == "month" and not 1 <= number <= 12) or (field == "minute" and number >= 60)
        return rest, {field: number}, field if bad else None
    if std == "15":
        number, rest = _getnum(value, False)
        return rest, {"hour": number}, "hour" if number >= 24 else None
    if std == "05":
        number, rest = _getnum(value, True)
        if number >= 60:
            return rest, {}, "second"
        if following != ".000000" and len(rest) >= 2 and rest[0] in ".," and _isdigit(rest, 1):
            width = 2
            while _isdigit(rest, width):
                width += 1
            nanos, out_of_range = _nanoseconds(rest, width)
            return rest[width:], {"second": number, **nanos}, out_of_range
        return rest, {"second": number}, None
    if std == ".000000":
        if len(value) < 7:
            raise _Bad
        nanos, out_of_range = _nanoseconds(value, 7)
        return value[7:], nanos, out_of_range
    # Z07:00
    if value[:1] == "Z":
        return value[1:], {"offset": 0}, None
    if len(value) < 6 or value[3] != ":":
        raise _Bad
    sign, hours, minutes, rest = value[0], value[1:3], value[4:6], value[6:]
    offset_hours, _ = _getnum(hours, True)
    offset_minutes, _ = _getnum(minutes, True)
    if sign not in "+-":
        raise _Bad
    if offset_hours > 24:
        return rest, {}, "time zone offset hour"
    if offset_minutes > 60:
        return rest, {}, "time zone offset minute"
    offset = (offset_hours * 60 + offset_minutes) * 60
    return rest, {"offset": -offset if sign == "-" else offset}, None


def go_time_parse(text: str, kind: TimeKind) -> tuple[datetime | None, str | None]:
    """Go's ``time.Parse(layout, text)``: (the moment in UTC, None), or (None, Go's error message).

    The moment is None also for a time Go parses but Python cannot hold (year 0, offsets of 24 h)."""
    layout = kind.value
    quoted = _quote(text)
    chunks = _CHUNKS[kind]
    fields: dict[str, int] = {}
    value = text
    for index, (prefix, std) in enumerate(chunks):
        if not value.startswith(prefix):
            return None, f"parsing time {quoted} as {_quote(layout)}: cannot parse {_quote(value)} as {_quote(prefix)}"
        value = value[len(prefix) :]
        following = chunks[index + 1][1] if index + 1 < len(chunks) else None
        try:
            rest, read, out_of_range = _element(std, value, following)
        except _Bad:
            return None, f"parsing time {quoted} as {_quote(layout)}: cannot parse {_quote(value)} as {_quote(std)}"
        if out_of_range:
            return None, f"parsing time {quoted}: {out_of_range} out of range"
        fields.update(read)
        value = rest
    if value:
        return None, f"parsing time {quoted}: extra text: {_quote(value)}"
    year, month, day = fields["year"], fields["month"], fields["day"]
    if day < 1 or day > calendar.monthrange(year if year > 0 else 2000, month)[1]:
        return None, f"parsing time {quoted}: day out of range"
    try:
        local = datetime(year, month, day, fields["hour"], fields["minute"], fields["second"], tzinfo=UTC)
    except ValueError:
        return None, None
    moment = local + timedelta(microseconds=fields.get("nanos", 0) // 1000, seconds=-fields["offset"])
    return moment, None


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "array" if isinstance(value, list) else "object"


def decode_value(value: Any, kind: TimeKind) -> tuple[Any, str | None]:
    """(the value as kube-apiserver writes it back, None), or (None, what decoding ``value`` says).

    kube encodes a Time as whole seconds in UTC and a MicroTime with six digits in UTC; null stays null."""
    if value is None:
        return None, None
    if not isinstance(value, str):
        return None, f"json: cannot unmarshal {_json_type(value)} into Go value of type string"
    return _decode_text(value, kind)


@functools.lru_cache(maxsize=8192)
def _decode_text(value: str, kind: TimeKind) -> tuple[str | None, str | None]:
    """Every write of an object decodes all its times, and they repeat from write to write: remembered."""
    moment, error = go_time_parse(value, kind)
    if error is not None:
        return None, error
    if moment is None:
        return value, None
    return (format_micro_time(moment) if kind is TimeKind.MICRO_TIME else format_time(moment)), None


# -- where each kind keeps its times ---------------------------------------------------------------
T, M = TimeKind.TIME, TimeKind.MICRO_TIME
#: ``a.b[].c`` walks list items, ``a{}`` map values (a leaf only).
_META = (("metadata.creationTimestamp", T), ("metadata.deletionTimestamp", T), ("metadata.managedFields[].time", T))
_TEMPLATE = (("spec.template.metadata.creationTimestamp", T),)


def _transition(prefix: str, *extra: str) -> tuple[tuple[str, TimeKind], ...]:
    return tuple((f"{prefix}[].{name}", T) for name in ("lastTransitionTime", *extra))


def _container_states() -> tuple[tuple[str, TimeKind], ...]:
    paths = []
    for statuses in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for state in ("state", "lastState"):
            base = f"status.{statuses}[].{state}"
            paths += [f"{base}.running.startedAt", f"{base}.terminated.startedAt", f"{base}.terminated.finishedAt"]
    return tuple((p, T) for p in paths)


TIME_FIELDS: dict[tuple[str, str], tuple[tuple[str, TimeKind], ...]] = {
    ("", "Pod"): (
        *_transition("status.conditions", "lastProbeTime"),
        ("status.startTime", T),
        *_container_states(),
    ),
    ("", "Node"): (("spec.taints[].timeAdded", T), *_transition("status.conditions", "lastHeartbeatTime")),
    ("", "Namespace"): _transition("status.conditions"),
    ("", "Service"): _transition("status.conditions"),
    ("", "PersistentVolumeClaim"): _transition("status.conditions", "lastProbeTime"),
    ("", "Event"): (
        ("firstTimestamp", T),
        ("lastTimestamp", T),
        ("eventTime", M),
        ("series.lastObservedTime", M),
    ),
    ("events.k8s.io", "Event"): (
        ("eventTime", M),
        ("series.lastObservedTime", M),
        ("deprecatedFirstTimestamp", T),
        ("deprecatedLastTimestamp", T),
    ),
    ("coordination.k8s.io", "Lease"): (("spec.acquireTime", M), ("spec.renewTime", M)),
    ("apps", "Deployment"): (*_TEMPLATE, *_transition("status.conditions", "lastUpdateTime")),
    ("apps", "ReplicaSet"): (*_TEMPLATE, *_transition("status.conditions")),
    ("apps", "StatefulSet"): (*_TEMPLATE, *_transition("status.conditions")),
    ("policy", "PodDisruptionBudget"): (("status.disruptedPods{}", T), *_transition("status.conditions")),
    ("apiextensions.k8s.io", "CustomResourceDefinition"): _transition("status.conditions"),
}


#: The paths of one kind as a tree: a step → the TimeKind at a leaf, or the steps below it.
_Tree = dict[str, "TimeKind | _Tree"]


@functools.cache
def _tree(group: str, kind: str) -> _Tree:
    tree: _Tree = {}
    for path, time_kind in (*_META, *TIME_FIELDS.get((group, kind), ())):
        *parents, leaf = path.split(".")
        node = tree
        for step in parents:
            child = node.setdefault(step, {})
            assert isinstance(child, dict)
            node = child
        node[leaf] = time_kind
    return tree


def _decode_in(holder: dict[str, Any], key: Any, time_kind: TimeKind) -> str | None:
    decoded, error = decode_value(holder[key], time_kind)
    if error is None:
        holder[key] = decoded
    return error


def _walk(node: Any, tree: _Tree) -> str | None:
    if not isinstance(node, dict):
        return None
    for step, below in tree.items():
        error = None
        if step.endswith("{}"):
            entries = node.get(step[:-2])
            if isinstance(entries, dict) and isinstance(below, TimeKind):
                error = next((e for key in list(entries) if (e := _decode_in(entries, key, below))), None)
        elif step.endswith("[]"):
            items = node.get(step[:-2])
            if isinstance(items, list) and isinstance(below, dict):
                error = next((e for item in items if (e := _walk(item, below))), None)
        elif step in node:
            error = _decode_in(node, step, below) if isinstance(below, TimeKind) else _walk(node[step], below)
        if error:
            return error
    return None


def decode(group: str, kind: str, obj: dict[str, Any]) -> str | None:
    """Rewrite the time fields of a built-in ``obj`` in place as kube writes them back; or the decode error
    of the first malformed one (``obj`` is then partly rewritten)."""
    return _walk(obj, _tree(group, kind))
