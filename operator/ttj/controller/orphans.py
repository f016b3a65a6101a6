"""Worker pods whose job is gone must not hang on the accounting finalizer.

A pod event releases the finalizer when the pod is being deleted and its job is not indexed; the job's end
releases the pods indexed then. Neither covers a pod whose deletion was seen while its job was still indexed
(the pod and the job come on two watch streams, in no set order: the garbage collector deletes the pods
the moment the job goes) and which changes no more after (its node is gone, so no kubelet stops it). A sweep
every resync period finds those: indexed pods being deleted that our finalizer holds, whose job is not
indexed. The job is read from the API (a LIST of its name) before a release, so an index that lags (at the
operator's start the jobs index is empty until kopf has listed the jobs) never lets a live job's lost worker go
uncounted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ttj import kubeapi
from ttj.controller.context import OperatorContext
from ttj.controller.memory import JobKey
from ttj.kubeapi import KubeClient
from ttj_contract import FINALIZER, KIND

log = logging.getLogger("ttj.controller")


@runtime_checkable
class Lister(Protocol):
    """The call a release makes to read the job: :meth:`ttj.kubeapi.KubeClient.request` with a query."""

    def request(self, method: str, path: str, *, body: Any = None, query: Any = ()) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Orphan:
    """A pod being deleted that our finalizer holds, of a job the jobs index no longer has."""

    job: JobKey
    pod: str
    #: the uid of the job that owns it, to tell a job of the same name created since from the one that went
    owner_uid: str


def finalizing(pod: Mapping[str, Any]) -> bool:
    """A pod being deleted that our finalizer holds."""
    metadata = pod.get("metadata") or {}
    return bool(metadata.get("deletionTimestamp")) and FINALIZER in (metadata.get("finalizers") or [])


def finalizing_orphans(
    pods_by_job: Mapping[JobKey, Iterable[tuple[str, str, Mapping[str, Any]]]], jobs: Container[JobKey]
) -> list[Orphan]:
    """The indexed pods being deleted that our finalizer holds, whose job is not in ``jobs``."""
    found = []
    for key, pods in pods_by_job.items():
        if key in jobs:
            continue
        for _kind, name, pod in pods:
            if finalizing(pod):
                found.append(Orphan(key, name, _owner_uid(pod)))
    return found


def still_owned(orphan: Orphan, job_uids: Collection[str]) -> bool:
    """Whether the job that owns the pod is among ``job_uids`` (the job of its name, read from the API now:
    none when it is gone, another when a job of the same name was created since)."""
    return orphan.owner_uid in job_uids


def _owner_uid(pod: Mapping[str, Any]) -> str:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == KIND:
            return str(ref.get("uid") or "")
    return ""


def lister_of(ctx: OperatorContext) -> Lister:
    return ctx.kube if isinstance(ctx.kube, Lister) else KubeClient(ctx.api)


async def release_orphan(ctx: OperatorContext, lister: Lister, orphan: Orphan) -> None:
    """Release ``orphan`` from our finalizer once a LIST shows its job gone: the jobs index may lag, and a pod
    released while its job is there would have its loss never counted."""
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
