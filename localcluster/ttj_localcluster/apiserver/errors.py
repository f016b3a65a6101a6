"""Kubernetes ``Status`` error bodies, raised as exceptions inside the server and rendered by the handlers."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An API failure that becomes a ``kind: Status`` response with the given HTTP code and reason."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        name: str | None = None,
        group: str | None = None,
        kind: str | None = None,
        causes: list[dict[str, Any]] | None = None,
        retry_after_seconds: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.name = name
        self.group = group
        self.kind = kind
        self.causes = causes
        self.retry_after_seconds = retry_after_seconds

    def status(self) -> dict[str, Any]:
        details: dict[str, Any] = {}
        if self.name is not None:
            details["name"] = self.name
        if self.group:
            details["group"] = self.group
        if self.kind is not None:
            details["kind"] = self.kind
        if self.causes:
            details["causes"] = self.causes
        if self.retry_after_seconds is not None:
            details["retryAfterSeconds"] = self.retry_after_seconds
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if details:
            body["details"] = details
        return body


def qualified(plural: str, group: str) -> str:
    """``pods`` or ``transienttrainingjobs.transient.training``, as kube names a resource in messages."""
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        404, "NotFound", f'{qualified(plural, group)} "{name}" not found', name=name, group=group, kind=plural
    )


def already_exists(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        409, "AlreadyExists", f'{qualified(plural, group)} "{name}" already exists', name=name, group=group, kind=plural
    )


def conflict(plural: str, group: str, name: str, detail: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(plural, group)} "{name}": {detail}',
        name=name,
        group=group,
        kind=plural,
    )


STALE = "the object has been modified; please apply your changes to the latest version and try again"


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


_CAUSE_REASONS = {
    "Forbidden": "FieldValueForbidden",
    "Required value": "FieldValueRequired",
    "Unsupported value": "FieldValueNotSupported",
    "Duplicate value": "FieldValueDuplicate",
    "Too long": "FieldValueTooLong",
    "Too many": "FieldValueTooMany",
}


def _cause_reason(message: str) -> str:
    """kube's cause type for a field error, from the words its message starts with."""
    return _CAUSE_REASONS.get(message.split(":", 1)[0], "FieldValueInvalid")


def invalid(kind: str, group: str, name: str, causes: list[tuple[str, str]]) -> ApiError:
    """422 Invalid, with one cause per (field, message) pair, worded like the apiserver's field errors (its
    message names each distinct error once, as ``ErrorList.ToAggregate`` does; the causes keep them all)."""
    what = f"{kind}.{group}" if group else kind
    rendered = list(dict.fromkeys(f"{field}: {message}" if field else message for field, message in causes))
    summary = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    return ApiError(
        422,
        "Invalid",
        f'{what} "{name}" is invalid: {summary}',
        name=name,
        group=group,
        kind=kind,
        causes=[{"reason": _cause_reason(m), "message": m, "field": f} for f, m in causes],
    )
