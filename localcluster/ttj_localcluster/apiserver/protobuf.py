"""The few protobuf request bodies kubectl sends this server: its typed clients encode built-in kinds as
``application/vnd.kubernetes.protobuf`` (``kubectl create token``: a TokenRequest; ``kubectl auth can-i``: access
reviews). Decoded by hand from the wire format (kube's envelope: ``k8s\\0`` then a runtime.Unknown holding the
object's apiVersion, kind and bytes) into the JSON the handlers take; any other kind is a 415."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import ApiError

MAGIC = b"k8s\x00"
Fields = dict[int, list[Any]]


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def fields(data: bytes) -> Fields:
    """Field number → values (ints for varints, bytes for length-delimited) of one message."""
    found: Fields = {}
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, at = _varint(data, at)
        elif wire == 2:
            length, at = _varint(data, at)
            value, at = data[at : at + length], at + length
        elif wire == 1:
            value, at = data[at : at + 8], at + 8
        elif wire == 5:
            value, at = data[at : at + 4], at + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        found.setdefault(number, []).append(value)
    return found


def _text(message: Fields, number: int) -> str:
    values = message.get(number)
    return values[-1].decode() if values else ""


def _texts(message: Fields, number: int) -> list[str]:
    return [v.decode() for v in message.get(number, [])]


def _message(message: Fields, number: int) -> Fields | None:
    values = message.get(number)
    return fields(values[-1]) if values else None


def _token_request_spec(spec: Fields) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if audiences := _texts(spec, 1):
        out["audiences"] = audiences
    if 4 in spec:
        out["expirationSeconds"] = spec[4][-1]
    if (ref := _message(spec, 3)) is not None:
        out["boundObjectRef"] = {
            "kind": _text(ref, 1),
            "apiVersion": _text(ref, 2),
            "name": _text(ref, 3),
            "uid": _text(ref, 4),
        }
    return out


def _review_spec(spec: Fields) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if (resource := _message(spec, 1)) is not None:
        names = ("namespace", "verb", "group", "version", "resource", "subresource", "name")
        out["resourceAttributes"] = {key: _text(resource, i + 1) for i, key in enumerate(names)}
    if (non_resource := _message(spec, 2)) is not None:
        out["nonResourceAttributes"] = {"path": _text(non_resource, 1), "verb": _text(non_resource, 2)}
    if user := _text(spec, 3):
        out["user"] = user
    if groups := _texts(spec, 4):
        out["groups"] = groups
    return out


_SPECS: dict[str, Callable[[Fields], dict[str, Any]]] = {
    "TokenRequest": _token_request_spec,
    "SelfSubjectAccessReview": _review_spec,
    "SubjectAccessReview": _review_spec,
    "LocalSubjectAccessReview": _review_spec,
}


def to_json(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded TokenRequest or access review; 415 for anything else."""
    try:
        if not body.startswith(MAGIC):
            raise ValueError("no k8s protobuf envelope")
        unknown = fields(body[len(MAGIC) :])
        type_meta = _message(unknown, 1) or {}
        api_version, kind = _text(type_meta, 1), _text(type_meta, 2)
        convert = _SPECS.get(kind)
        if convert is None:
            raise ValueError(f"{kind or 'this kind'} in protobuf")
        obj = fields(unknown[2][-1]) if 2 in unknown else {}
        spec = _message(obj, 2) or {}
        return {"apiVersion": api_version, "kind": kind, "metadata": {}, "spec": convert(spec)}
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        raise ApiError(
            415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {exc}"
        ) from None
