"""Forget the objects deleted while a watch was away.

After a ``410 Gone`` kopf lists the resource again and resumes watching from the list, but it never
removes from its indexes the objects that are missing from that list: an object deleted during the gap
gets no DELETED event and stays indexed for the life of the process (a deleted node would keep its pods
alive, a deleted Lease its chief). The pods are watched by the operator itself and need no audit
(:mod:`ttj.controller.pods`). The audit compares the indexes with a fresh LIST: an object
indexed *before* the LIST was sent and missing from its answer was deleted, and the planner no longer sees
it. It runs soon after any listing (kopf delivers listed objects as events of type None) and at every
resync period.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import kopf

from ttj import kubeapi
from ttj.controller.context import OperatorContext
from ttj.controller.memory import JobKey
from ttj.controller.orphans import Orphan, finalizing_orphans, still_owned
from ttj.kubeapi import METADATA_TABLE, KubeClient, KubeError
from ttj_contract import KIND, LABEL_JOB

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
    """One indexed object: where it lives, the job it belongs to (None for a node), and its name."""

    place: Place
    job: tuple[str, str] | None
    name: str = ""


def snapshot(
    children: Iterable[Mapping[tuple[str, str], Iterable[tuple[str, str, dict[str, Any]]]]],
    nodes: Mapping[str, Iterable[dict[str, Any]]],
) -> dict[str, Indexed]:
    """uid → where, for every object in the children's indexes (job key → (kind, name, object)) and the
    nodes' index (name → slim node)."""
    found: dict[str, Indexed] = {}
    for index in children:
        for key, store in list(index.items()):
            for kind, name, obj in list(store):
                uid = (obj.get("metadata") or {}).get("uid")
                if uid:
                    found[str(uid)] = Indexed((kind, key[0]), key, name)
    for node_name, node_store in list(nodes.items()):
        for node in list(node_store):
            uid = (node.get("metadata") or {}).get("uid")
            if uid:
                found[str(uid)] = Indexed(("Node", ""), None, node_name)
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


# -- the audit, run by the operator beside the jobs' passes -------------------------------------------------------
#: After a listing (kopf's events of type None), wait this long for it to finish before auditing the indexes.
_AUDIT_SETTLE_SECONDS = 2.0


async def audit_forever(
    ctx: OperatorContext,
    children: list[kopf.Index[JobKey, Any]],
    nodes_by_name: kopf.Index[str, Any],
    pods_by_job: Mapping[JobKey, Iterable[tuple[str, str, dict[str, Any]]]],
    jobs: kopf.Index[JobKey, Any],
) -> None:
    """Audit the indexes soon after each listing, and at least every resync period; then release the worker
    pods left on our finalizer by a job that went (:mod:`ttj.controller.orphans`)."""
    state = ctx.state
    lister = lister_of(ctx)
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(state.audit_due.wait(), timeout=ctx.planner.resync_seconds)
            await asyncio.sleep(_AUDIT_SETTLE_SECONDS)
        state.audit_due.clear()
        await _forget_ghosts(ctx, lister, children, nodes_by_name)
        await _release_orphans(ctx, lister, pods_by_job, jobs)


async def _forget_ghosts(
    ctx: OperatorContext, lister: Lister, children: list[kopf.Index[JobKey, Any]], nodes_by_name: kopf.Index[str, Any]
) -> None:
    state = ctx.state
    before = snapshot(children, nodes_by_name)  # in the loop: kopf changes the indexes there
    places = sorted({where.place for where in before.values()})
    try:
        listed = await asyncio.to_thread(_list_places, lister, places)
    except Exception as exc:  # the audit must outlive any API trouble
        log.warning("index audit failed: %s", exc)
        return
    found = ghosts(before, listed)
    new = set(found) - state.gone
    state.gone = frozenset(found)
    if new:
        log.info("index audit: %d object(s) deleted while a watch was away, forgotten", len(new))
        for key in jobs_to_wake(found, new, state.jobs_on_node):
            ctx.poke(key)


async def _release_orphans(
    ctx: OperatorContext,
    lister: Lister,
    pods_by_job: Mapping[JobKey, Iterable[tuple[str, str, dict[str, Any]]]],
    jobs: kopf.Index[JobKey, Any],
) -> None:
    for orphan in finalizing_orphans(pods_by_job, jobs):  # read in the loop, where the indexes change
        await release_orphan(ctx, lister, orphan)


def lister_of(ctx: OperatorContext) -> Lister:
    return ctx.kube if isinstance(ctx.kube, Lister) else KubeClient(ctx.api)


async def release_orphan(ctx: OperatorContext, lister: Lister, orphan: Orphan) -> None:
    """Release ``orphan`` from our finalizer once a LIST shows its job gone: the jobs index may lag (at the
    operator's start it is empty until kopf has listed the jobs), and a pod released while its job is there
    would have its loss never counted."""
    try:
        if still_owned(orphan, await asyncio.to_thread(job_uids, lister, orphan.job)):
            return
        await asyncio.to_thread(ctx.applier.release_finalizer, orphan.job[0], orphan.pod)
    except Exception as exc:  # the sweep must outlive any API trouble: the next one tries again
        log.warning("could not release pod %s/%s of a job that went: %s", orphan.job[0], orphan.pod, exc)
    else:
        log.info("released pod %s/%s of job %s, which went", orphan.job[0], orphan.pod, orphan.job[1])


def job_uids(api: Lister, key: JobKey) -> set[str]:
    """The uid of the job named ``key`` now, by a LIST of that name (the operator's role lists jobs; it has no
    get on them); empty when there is none."""
    namespace, name = key
    answer = api.request("GET", kubeapi.path(KIND, namespace), query=[("fieldSelector", f"metadata.name={name}")])
    return {str((item.get("metadata") or {}).get("uid")) for item in answer.get("items") or []}


def _list_places(lister: Lister, places: list[Place]) -> dict[Place, Any]:
    return {place: listed_uids(lister, place) for place in places}


def jobs_to_wake(
    found: Mapping[str, Indexed], new: set[str], jobs_on_node: Callable[[str], Iterable[JobKey]]
) -> set[JobKey]:
    """The jobs whose children the audit newly found deleted, and those with pods on a node it newly found
    deleted. Not every job: a node deleted between the snapshot and the LIST is found too (its DELETED event
    still on its way), and during a preemption wave that woke every job at once, a pass each, in front of the
    replacements (at 500 jobs, seconds)."""
    jobs: set[JobKey] = set()
    for uid in new:
        where = found[uid]
        jobs.update([where.job] if where.job is not None else jobs_on_node(where.name))
    return jobs
