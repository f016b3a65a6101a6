"""What a request asks for, in the terms authorization speaks: kube-apiserver's RequestInfo, read from the URL
and method alone (before routing, so a request for something not served is judged like any other)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

_VERB_OF_METHOD = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
#: subresources of a namespace object itself, not a resource inside the namespace
_NAMESPACE_SUBRESOURCES = ("status", "finalize")


@dataclass(frozen=True)
class RequestAttributes:
    verb: str
    path: str
    resource_request: bool
    api_group: str = ""
    api_version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""

    @property
    def resource_and_subresource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def request_attributes(method: str, path: str, query: Mapping[str, str]) -> RequestAttributes:
    parts = [p for p in path.strip("/").split("/") if p]
    non_resource = RequestAttributes(verb=method.lower(), path=path, resource_request=False)
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return non_resource
    prefix, parts = parts[0], parts[1:]
    group = ""
    if prefix == "apis":
        if len(parts) < 3:
            return non_resource
        group, parts = parts[0], parts[1:]
    version, parts = parts[0], parts[1:]
    if parts[0] == "watch":
        if len(parts) < 2:
            return non_resource
        verb, parts = "watch", parts[1:]
    else:
        verb = _VERB_OF_METHOD.get(method.upper(), "")
    namespace = ""
    if parts[0] == "namespaces" and len(parts) > 1:
        namespace = parts[1]
        if len(parts) > 2 and parts[2] not in _NAMESPACE_SUBRESOURCES:
            parts = parts[2:]
    resource = parts[0]
    name = parts[1] if len(parts) >= 2 else ""
    subresource = parts[2] if len(parts) >= 3 else ""
    if not name and verb == "get":
        verb = "watch" if query.get("watch", "").lower() in ("1", "true") else "list"
        name = _name_from_field_selector(query.get("fieldSelector", ""))
    if not name and verb == "delete":
        verb = "deletecollection"
    return RequestAttributes(verb, path, True, group, version, namespace, resource, subresource, name)


def _name_from_field_selector(selector: str) -> str:
    """A list or watch of one object by ``metadata.name=NAME`` is authorized as a request for that name."""
    for term in selector.split(","):
        for operator in ("==", "="):
            key, found, value = term.partition(operator)
            if found and key.strip() == "metadata.name" and "!" not in key:
                return value.strip()
    return ""
