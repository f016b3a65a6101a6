"""A trivial kopf operator for the conformance test: it annotates and records what it sees."""

from __future__ import annotations

from typing import Any

import kopf


@kopf.on.create("", "v1", "configmaps", labels={"ttj-kopf": "yes"})
def created(body: Any, patch: Any, **_: Any) -> dict[str, str]:
    patch.metadata.annotations["ttj-kopf/seen"] = body["metadata"]["name"]
    return {"message": "handled"}


@kopf.on.update("", "v1", "configmaps", labels={"ttj-kopf": "yes"}, field="data")
def updated(patch: Any, new: Any, **_: Any) -> None:
    patch.metadata.annotations["ttj-kopf/data"] = ",".join(sorted((new or {}).keys()))
