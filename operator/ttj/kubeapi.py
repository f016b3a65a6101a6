"""Kubernetes JSON over the official client's transport: the one raw client of the project.

The operator's actions and the local cluster's controllers and kubelets speak to the API server through
:class:`KubeClient`: auth, TLS and the kubeconfig are the ``kubernetes`` package's; objects stay plain
JSON dicts (the generated models cost time at scale and drop fields the callers need). Errors are
:class:`KubeError` with the HTTP status. :data:`RESOURCES` is the one map from a kind to where it lives.
:class:`ListWatch` is the one list+watch loop (the operator's pod watch, the local cluster's informers).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

import kubernetes
import urllib3
from kubernetes.client import ApiClient

from ttj_contract import GROUP, KIND, PLURAL, VERSION

log = logging.getLogger(__name__)

JSON = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
#: Accept of a LIST answered as a Table whose rows carry each object's metadata only (with the query parameter
#: ``includeObject=Metadata``): for a caller that needs names and uids, not a thousand pods' specs to decode.
METADATA_TABLE = "application/json;as=Table;g=meta.k8s.io;v=v1"


@dataclass(frozen=True)
class Resource:
    """Where objects of one kind live in the API."""

    group: str  # "" for the core group
    version: str
    plural: str

    @property
    def prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    @property
    def api_version(self) -> str:
        """The objects' apiVersion (``apps/v1``, ``v1``)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def kopf_name(self) -> str:
        """The resource as kopf names it (``deployments.v1.apps``, ``pods``)."""
        return f"{self.plural}.{self.version}.{self.group}" if self.group else self.plural

    def path(self, namespace: str, name: str | None = None, subresource: str | None = None) -> str:
        path = f"{self.prefix}/namespaces/{quote(namespace)}/{self.plural}"
        if name:
            path += f"/{quote(name)}"
        if subresource:
            path += f"/{subresource}"
        return path


#: kind → resource, for every kind the operator reads or writes.
RESOURCES: dict[str, Resource] = {
    "Pod": Resource("", "v1", "pods"),
    "Service": Resource("", "v1", "services"),
    "ServiceAccount": Resource("", "v1", "serviceaccounts"),
    "Event": Resource("", "v1", "events"),
    "Deployment": Resource("apps", "v1", "deployments"),
    "Role": Resource("rbac.authorization.k8s.io", "v1", "roles"),
    "RoleBinding": Resource("rbac.authorization.k8s.io", "v1", "rolebindings"),
    "Lease": Resource("coordination.k8s.io", "v1", "leases"),
    "NetworkPolicy": Resource("networking.k8s.io", "v1", "networkpolicies"),
    KIND: Resource(GROUP, VERSION, PLURAL),
}


def path(kind: str, namespace: str, name: str | None = None, subresource: str | None = None) -> str:
    """The API path of a namespaced object (or of its collection when ``name`` is None)."""
    return RESOURCES[kind].path(namespace, name, subresource)


class KubeError(Exception):
    """An HTTP error answer; ``status`` is its code and ``body`` the Status JSON as text."""

    def __init__(self, status: int, body: str) -> None:
        self.status = status
        self.body = body
        try:
            message = json.loads(body).get("message", body)
        except (ValueError, AttributeError):
            message = body
        self.message = str(message)
        super().__init__(f"HTTP {status}: {message}")

    @property
    def retry_after_seconds(self) -> float | None:
        """The wait the server asked for (a 429's or 503's ``details.retryAfterSeconds``, as its Retry-After)."""
        try:
            seconds = json.loads(self.body)["details"]["retryAfterSeconds"]
        except (ValueError, KeyError, TypeError):
            return None
        return float(seconds) if isinstance(seconds, int | float) and not isinstance(seconds, bool) else None

    @property
    def invalid_fields(self) -> frozenset[str]:
        """The fields a 422 Invalid names (its ``details.causes``); empty for any other answer."""
        if self.status != 422:
            return frozenset()
        try:
            causes = json.loads(self.body)["details"]["causes"]
            return frozenset(str(c["field"]) for c in causes if isinstance(c, dict) and c.get("field"))
        except (ValueError, KeyError, TypeError):
            return frozenset()


def transient(exc: BaseException) -> bool:
    """Worth retrying: the server is overloaded or failing for now, or the connection broke."""
    if isinstance(exc, KubeError):
        return exc.status == 429 or exc.status >= 500
    return isinstance(exc, OSError | urllib3.exceptions.HTTPError)


class KubeClient:
    """JSON in, JSON out."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self._open_watches: set[Any] = set()
        self._watch_lock = threading.Lock()
        self._closed = False

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str) -> KubeClient:
        return cls(kubernetes.config.new_client_from_config(config_file=kubeconfig))  # type: ignore[no-untyped-call]

    def close(self) -> None:
        """Ends open watches at once (their threads see the stream end) and closes the connection pool."""
        with self._watch_lock:
            self._closed = True
            watches = list(self._open_watches)
        for response in watches:
            with contextlib.suppress(Exception):
                response.shutdown()
        with contextlib.suppress(Exception):
            self.api.close()  # type: ignore[no-untyped-call]

    def _send(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Sequence[tuple[str, str]] = (),
        content_type: str = "application/json",
        accept: str = "application/json",
        timeout: float | tuple[float, float] = 30,
    ) -> Any:
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        method, url, headers, serialized, _ = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=list(query),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        return self.api.call_api(method, url, header_params=headers, body=serialized, _request_timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Sequence[tuple[str, str]] = (),
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> JSON:
        """One request; the JSON answer; an error answer as :class:`KubeError`."""
        response = self._send(method, path, body=body, query=query, content_type=content_type, accept=accept)
        data = response.read()
        text = data.decode(errors="replace") if isinstance(data, bytes) else str(data or "")
        if response.status >= 400:
            raise KubeError(response.status, text)
        return json.loads(text) if text else {}

    # conveniences ----------------------------------------------------------------------------
    def get(self, path: str) -> JSON | None:
        try:
            return self.request("GET", path)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, path: str, body: JSON) -> JSON | None:
        """POST; None when it already exists."""
        try:
            return self.request("POST", path, body=body)
        except KubeError as exc:
            if exc.status == 409:
                return None
            raise

    def merge_patch(self, path: str, patch: JSON) -> JSON | None:
        """PATCH (merge); None when the object is gone."""
        try:
            return self.request("PATCH", path, body=patch, content_type=MERGE_PATCH)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def delete(self, path: str, grace_seconds: int | None = None, propagation: str | None = None) -> bool:
        options: JSON = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_seconds is not None:
            options["gracePeriodSeconds"] = grace_seconds
        if propagation:
            options["propagationPolicy"] = propagation
        try:
            self.request("DELETE", path, body=options)
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def watch_events(
        self, path: str, resource_version: str, timeout_seconds: int, query: Sequence[tuple[str, str]] = ()
    ) -> Iterator[JSON]:
        """One watch request: yields ``{"type", "object"}`` events until the server ends it."""
        response = self._send(
            "GET",
            path,
            query=[
                *query,
                ("watch", "true"),
                ("resourceVersion", resource_version),
                ("allowWatchBookmarks", "true"),
                ("timeoutSeconds", str(timeout_seconds)),
            ],
            timeout=(10, timeout_seconds + 15),
        )
        if response.status >= 400:
            raise KubeError(response.status, response.read().decode(errors="replace"))
        buffer = b""
        with self._watch_lock:
            self._open_watches.add(response.response)
            if self._closed:  # closed while this watch was being opened: end it now, not at its timeout
                with contextlib.suppress(Exception):
                    response.response.shutdown()
        ended = False
        try:
            for chunk in response.response.stream(amt=None, decode_content=False):
                # One split per chunk: a chunk may carry hundreds of events, and splitting off one line at a time
                # copied the rest of the chunk for each.
                *lines, buffer = (buffer + chunk).split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)
            ended = True
        finally:
            with self._watch_lock:
                self._open_watches.discard(response.response)
            with contextlib.suppress(Exception):
                if not ended:  # left mid-stream: the connection must not carry another request after it
                    response.response.close()
                response.response.release_conn()


class Watchable(Protocol):
    """What :class:`ListWatch` asks of a client: :class:`KubeClient`'s list and watch."""

    def request(self, method: str, path: str, *, query: Sequence[tuple[str, str]] = ()) -> JSON: ...

    def watch_events(
        self, path: str, resource_version: str, timeout_seconds: int, query: Sequence[tuple[str, str]] = ()
    ) -> Iterator[JSON]: ...


#: After a failed list or watch, :class:`ListWatch` waits this long before listing again, doubling up to the cap.
RELIST_SECONDS = 0.2
RELIST_CAP_SECONDS = 5.0


@dataclass(frozen=True)
class ListWatch:
    """List the collection at ``path``, then watch it from the list's resourceVersion (each watch from where the
    last event or bookmark left it) until ``stop`` is set; after a watch ends in an ERROR event (410 Gone) or a
    request fails, list again, as client-go's reflector does. ``listed`` gets every listing's items (whatever the
    caller held and they lack was deleted meanwhile: no event will say so), ``changed`` every other event's type
    (ADDED, MODIFIED, DELETED) and object."""

    client: Watchable
    path: str
    listed: Callable[[list[JSON]], None]
    changed: Callable[[str, JSON], None]
    stop: threading.Event
    query: Sequence[tuple[str, str]] = ()
    watch_seconds: int = 120
    #: What the log calls this collection.
    what: str = ""

    def run(self) -> None:
        """Blocks until ``stop`` is set: run it in a thread of its own."""
        pause = RELIST_SECONDS
        while not self.stop.is_set():
            try:
                answer = self.client.request("GET", self.path, query=self.query)
                self.listed(answer.get("items") or [])
                version = str((answer.get("metadata") or {}).get("resourceVersion") or "")
                pause = RELIST_SECONDS
                while version and not self.stop.is_set():
                    version = self._watch_from(version)
            except Exception as exc:  # a watch outlives any API trouble: it lists again
                if self.stop.is_set():
                    return
                denied = isinstance(exc, KubeError) and exc.status in (401, 403)
                level = logging.WARNING if denied else logging.INFO
                log.log(level, "%s: %s; listing again in %.1f s", self.what or self.path, exc, pause)
                self.stop.wait(pause)
                pause = min(RELIST_CAP_SECONDS, pause * 2)

    def _watch_from(self, version: str) -> str:
        """One watch from ``version``: the version to watch from next, or "" to list again."""
        events = self.client.watch_events(self.path, version, timeout_seconds=self.watch_seconds, query=self.query)
        for event in events:
            if self.stop.is_set():
                return ""
            event_type, obj = str(event.get("type") or ""), event.get("object") or {}
            if event_type == "ERROR":
                log.info("%s: the watch ended (%s); listing again", self.what or self.path, obj.get("message") or obj)
                return ""
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if event_type != "BOOKMARK":
                self.changed(event_type, obj)
        return version
