"""Who may do what, in front of every route: authentication (:mod:`.authn`), then authorization — everyone
(``AlwaysAllow``, the default) or by RBAC (:mod:`.rbac`) — answering 401 and 403 as kube-apiserver does, before
the URL is even resolved. Every 403 the server answers (authorization, privilege escalation, Pod Security) is
logged and kept (:attr:`AccessControl.denials`), so that a test can count the 403s a client met."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from .authn import Authenticator
from .errors import ApiError, invalid
from .identity import (
    AUTHENTICATED,
    CURRENT_USER,
    SERVICE_ACCOUNT_PREFIX,
    WARNINGS,
    UserInfo,
    service_account_user,
)
from .protocol import error_response
from .rbac import GROUP, RbacAuthorizer, check_escalation, forbidden, forbidden_message, validation_errors
from .requestinfo import RequestAttributes, request_attributes
from .store import Store

log = logging.getLogger(__name__)

ALWAYS_ALLOW = "AlwaysAllow"
RBAC = "RBAC"
AUTHORIZATION_MODES = (ALWAYS_ALLOW, RBAC)
#: how many denials are kept for inspection
DENIALS_KEPT = 10_000


@dataclass(frozen=True)
class Denial:
    """One 403: who, the HTTP method and path (with the query), and the Status message."""

    user: str
    method: str
    path: str
    message: str


def warning_header(text: str) -> str:
    """A ``Warning`` header value as kube-apiserver writes it (RFC 7234 code 299, no agent)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'299 - "{escaped}"'


def _impersonation(resource: str, name: str, namespace: str = "") -> RequestAttributes:
    return RequestAttributes("impersonate", "", True, "", "v1", namespace, resource, "", name)


class AccessControl:
    def __init__(self, store: Store, clock: Callable[[], datetime], mode: str = ALWAYS_ALLOW) -> None:
        if mode not in AUTHORIZATION_MODES:
            raise ValueError(f"unknown authorization mode {mode!r}: one of {', '.join(AUTHORIZATION_MODES)}")
        self.mode = mode
        self.authenticator = Authenticator(store, clock)
        self.rbac = RbacAuthorizer(store)
        self.denials: list[Denial] = []
        #: requests served per user name, allowed or not (a light audit log)
        self.requests: Counter[str] = Counter()
        self.denied_total = 0
        self._lock = threading.Lock()

    @property
    def enforcing(self) -> bool:
        return self.mode == RBAC

    def _deny(self, user: UserInfo, method: str, path: str, error: ApiError) -> ApiError:
        log.warning("forbidden: %s %s by %s: %s", method, path, user.name, error.message)
        with self._lock:
            self.denied_total += 1
            self.denials.append(Denial(user.name, method, path, error.message))
            del self.denials[:-DENIALS_KEPT]
        return error

    def check(self, request: web.Request) -> UserInfo:
        """The request's user; ApiError 401 or 403 when it may not go on."""
        user = self.authenticator.authenticate(request.headers.get("Authorization"))
        user = self._impersonated(request, user)
        with self._lock:
            self.requests[user.name] += 1
        self._authorize(request, user, request_attributes(request.method, request.path, request.query))
        return user

    def _authorize(self, request: web.Request, user: UserInfo, attributes: RequestAttributes) -> None:
        if not self.enforcing:
            return
        allowed, reason = self.rbac.authorize(user, attributes)
        if allowed:
            return
        detail = forbidden_message(user, attributes)
        if reason:
            detail = f"{detail}: {reason}"
        if attributes.resource_request:
            error = forbidden(attributes.api_group, attributes.resource, attributes.name, detail)
        else:
            error = forbidden("", "", "", detail)
        raise self._deny(user, request.method, request.path_qs, error)

    def _impersonated(self, request: web.Request, user: UserInfo) -> UserInfo:
        """``Impersonate-User``/``Impersonate-Group`` (``kubectl --as``, ``--as-group``): the request goes on as that
        user if the requester may ``impersonate`` it, as kube's impersonation filter does."""
        name = request.headers.get("Impersonate-User")
        groups = request.headers.getall("Impersonate-Group", [])
        if not name:
            if groups:
                raise ApiError(400, "BadRequest", "requested impersonation of groups without a user")
            return user
        for group in groups:
            self._authorize(request, user, _impersonation("groups", group))
        if name.startswith(SERVICE_ACCOUNT_PREFIX) and name.count(":") == 3:
            namespace, account = name[len(SERVICE_ACCOUNT_PREFIX) :].split(":")
            self._authorize(request, user, _impersonation("serviceaccounts", account, namespace))
            implied = service_account_user(namespace, account).groups
        else:
            self._authorize(request, user, _impersonation("users", name))
            implied = ()
        everyone = () if name == "system:anonymous" else (AUTHENTICATED,)
        return UserInfo(name, tuple(dict.fromkeys([*groups, *implied, *everyone])))

    def admit_rbac_object(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        """Validation of a Role, ClusterRole or binding being written, then (RBAC mode) escalation prevention."""
        errors = validation_errors(kind, obj, old)
        if errors:
            raise invalid(kind, GROUP, str((obj.get("metadata") or {}).get("name", "")), errors)
        if self.enforcing:
            check_escalation(self.rbac, CURRENT_USER.get(), kind, obj)

    def middleware(self) -> Any:
        @web.middleware
        async def access_control(request: web.Request, handler: Handler) -> web.StreamResponse:
            try:
                user = self.check(request)
            except ApiError as error:
                return error_response(error)
            token = CURRENT_USER.set(user)
            warnings: list[str] = []
            warnings_token = WARNINGS.set(warnings)
            try:
                response = await handler(request)
                for text in warnings:
                    response.headers.add("Warning", warning_header(text))
                return response
            except ApiError as error:
                if error.code == 403:  # admission's refusals (escalation, Pod Security, a namespace going away)
                    self._deny(user, request.method, request.path_qs, error)
                raise
            finally:
                CURRENT_USER.reset(token)
                WARNINGS.reset(warnings_token)

        return access_control
