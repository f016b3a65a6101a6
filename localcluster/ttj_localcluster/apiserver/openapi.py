"""The OpenAPI v3 documents kubectl reads: per group-version, the resource paths (PATCH advertises
``fieldValidation``, so kubectl validates on the server) and, for custom resources, their schemas."""

from __future__ import annotations

from typing import Any

from .resources import Registry


def _schema_name(group: str, version: str, kind: str) -> str:
    reversed_group = ".".join(reversed(group.split("."))) if group else "io.k8s.api.core"
    return f"{reversed_group}.{version}.{kind}"


def group_version_document(registry: Registry, group: str, version: str) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
    for rtype in registry.all_types():
        if (rtype.group, rtype.version) != (group, version):
            continue
        gvk = {"group": group, "version": version, "kind": rtype.kind}
        scope = f"{prefix}/namespaces/{{namespace}}/{rtype.plural}" if rtype.namespaced else f"{prefix}/{rtype.plural}"
        operation = {
            "x-kubernetes-group-version-kind": gvk,
            "parameters": [
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
                {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
                {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
            ],
            "responses": {"200": {"description": "OK"}},
        }
        paths[f"{scope}/{{name}}"] = {"patch": operation, "get": {**operation, "parameters": []}, "put": operation}
        if rtype.is_custom and rtype.schema is not None:
            schema = dict(rtype.schema)
            schema["x-kubernetes-group-version-kind"] = [gvk]
            schemas[_schema_name(group, version, rtype.kind)] = schema
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (ttj local cluster)", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }
