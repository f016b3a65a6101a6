"""Worker pods whose job is gone must not hang on the accounting finalizer.

A pod event releases the finalizer when the pod is being deleted and its job is not indexed; the job's end
releases the pods indexed then. Neither covers a pod whose deletion was seen while its job was still indexed
(the pod and the job come on two watch streams, in no set order: the garbage collector deletes the pods
the moment the job goes) and which changes no more after (its node is gone, so no kubelet stops it). The sweep
here, run with the index audit, finds those: indexed pods being deleted that our finalizer holds, whose job is
not indexed. The job is read from the API (a LIST of its name) before a release, so an index that lags (a
job not yet listed) never lets a live job's lost worker go uncounted.
"""

from __future__ import annotations

from collections.abc import Collection, Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ttj.controller.memory import JobKey
from ttj_contract import FINALIZER, KIND


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
