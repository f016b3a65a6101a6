"""Typed views of the JSON bodies the operator reads and writes, as the API server returns them.

TypedDicts, as kopf's own ``RawBody``/``RawMeta``: the objects stay plain dicts (they come from and go to
the API as JSON), the type checker knows their keys. Every key may be missing (``total=False``), so
reading one is ``.get``. Here, below the planner and the controller, so that both may use them.
"""

from __future__ import annotations

from typing import Any, TypedDict


class RawMeta(TypedDict, total=False):
    name: str
    namespace: str
    uid: str
    generation: int
    resourceVersion: str
    creationTimestamp: str
    deletionTimestamp: str
    deletionGracePeriodSeconds: int
    labels: dict[str, str]
    annotations: dict[str, str]
    finalizers: list[str]
    ownerReferences: list[dict[str, Any]]


class ConditionBody(TypedDict, total=False):
    type: str
    status: str
    reason: str
    message: str
    lastTransitionTime: str
    observedGeneration: int


class ContainerStateBody(TypedDict, total=False):
    running: dict[str, Any]
    waiting: dict[str, Any]
    terminated: dict[str, Any]


class ContainerStatusBody(TypedDict, total=False):
    name: str
    state: ContainerStateBody
    lastState: ContainerStateBody
    ready: bool
    restartCount: int


class PodSpecBody(TypedDict, total=False):
    nodeName: str
    terminationGracePeriodSeconds: int
    nodeSelector: dict[str, str]
    affinity: dict[str, Any]
    containers: list[dict[str, Any]]


class PodStatusBody(TypedDict, total=False):
    phase: str
    reason: str
    message: str
    startTime: str
    conditions: list[ConditionBody]
    containerStatuses: list[ContainerStatusBody]


class NodeStatusBody(TypedDict, total=False):
    conditions: list[ConditionBody]
    capacity: dict[str, str]
    allocatable: dict[str, str]


class LeaseSpecBody(TypedDict, total=False):
    holderIdentity: str
    leaseDurationSeconds: int
    acquireTime: str
    renewTime: str
    leaseTransitions: int
