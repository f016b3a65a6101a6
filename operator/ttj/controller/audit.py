"""Forget the objects deleted while a watch was away.

After a ``410 Gone`` kopf lists the resource again and resumes watching from the list, but it never
removes from its indexes the objects that are missing from that list: an object deleted during the gap
gets no DELETED event and stays indexed for the life of the process (a deleted pod would keep holding its
slot, a deleted node keep its pods alive). The audit compares the indexes with a fresh LIST: an object
indexed *before* the LIST was sent and missing from its answer was deleted, and the planner no longer sees
it. It runs soon after any listing (kopf delivers listed objects as events of type None) and at every
resync period.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ttj import kubeapi
from ttj.kubeapi import METADATA_TABLE, KubeError
from ttj_contract import LABEL_JOB

log = logging.getLogger("ttj.controller")

#: Where an indexed object lives: (kind, namespace); nodes are ("Node", "").
Place = tuple[str, str]
NODES_PATH = "/api/v1/nodes"
#: Objects per page of the audit's LISTs.
LIST_PAGE = 250


@runtime_checkable
class Lister(Protocol):
    """The call the audit makes: :meth:`ttj.kubeapi.KubeClient.request` with a query and an Accept."""

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Any = (),
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Indexed:
    """One indexed object: where it lives, and the job it belongs to (None for a node)."""

    place: Place
    job: tuple[str, str] | None


def snapshot(
    children: Iterable[Mapping[tuple[str, str], Iterable[tuple[str, str, dict[str, Any]]]]],
    nodes: Mapping[str, Iterable[dict[str, Any]]],
) -> dict[str, Indexed]:
    """uid → where, for every object in the children's indexes (job key → (kind, name, object)) and the
    nodes' index (name → slim node)."""
    found: dict[str, Indexed] = {}
    for index in children:
        for key, store in list(index.items()):
            for kind, _name, obj in list(store):
                uid = (obj.get("metadata") or {}).get("uid")
                if uid:
                    found[str(uid)] = Indexed((kind, key[0]), key)
    for node_store in list(nodes.values()):
        for node in list(node_store):
            uid = (node.get("metadata") or {}).get("uid")
            if uid:
                found[str(uid)] = Indexed(("Node", ""), None)
    return found


def listed_uids(api: Lister, place: Place) -> set[str] | None:
    """The uids a fresh LIST finds at ``place`` (the job's children by their label); None if it failed.

    Only the objects' metadata is sent (a Table of PartialObjectMetadata, :data:`~ttj.kubeapi.METADATA_TABLE`),
    in pages of :data:`LIST_PAGE` objects: decoding holds the interpreter's lock, so whole pods, or a whole
    list of thousands at once, would stall the operator's loop (every job's pass) for as long."""
    kind, namespace = place
    if kind == "Node":
        path, query = NODES_PATH, [("includeObject", "Metadata")]
    else:
        path, query = kubeapi.path(kind, namespace), [("labelSelector", LABEL_JOB), ("includeObject", "Metadata")]
    uids: set[str] = set()
    token = ""
    try:
        while True:
            page = [*query, ("limit", str(LIST_PAGE))] + ([("continue", token)] if token else [])
            answer = api.request("GET", path, query=page, accept=METADATA_TABLE)
            uids.update(str(row["object"]["metadata"]["uid"]) for row in answer.get("rows") or [])
            token = (answer.get("metadata") or {}).get("continue") or ""
            if not token:
                return uids
    except KubeError as exc:  # an expired continue token (410) included: this audit proves nothing there
        log.info("index audit: could not list %s in %r: %s", kind, namespace, exc.message)
        return None


def ghosts(before: Mapping[str, Indexed], listed: Mapping[Place, set[str] | None]) -> dict[str, Indexed]:
    """The objects indexed before the LISTs that the LISTs did not find: deleted. A place whose LIST
    failed proves nothing."""
    return {
        uid: where
        for uid, where in before.items()
        if (found := listed.get(where.place)) is not None and uid not in found
    }


def audit(
    api: Lister,
    children: Iterable[Mapping[tuple[str, str], Iterable[tuple[str, str, dict[str, Any]]]]],
    nodes: Mapping[str, Iterable[dict[str, Any]]],
) -> dict[str, Indexed]:
    """Snapshot the indexes, then LIST every place they cover: the ghosts (blocking; run in a thread)."""
    before = snapshot(children, nodes)
    places = {where.place for where in before.values()}
    listed = {place: listed_uids(api, place) for place in sorted(places)}
    return ghosts(before, listed)
