"""Authentication by bearer token, as kube-apiserver's token authenticators do it.

Two kinds of token: the admin token written into the cluster's kubeconfig (user ``kubernetes-admin``, group
``system:masters``) and service-account tokens, issued by the TokenRequest API
(``POST .../serviceaccounts/NAME/token``, what a kubelet calls for each pod) for ``system:serviceaccount:NS:NAME``.
A service-account token stops working when its ServiceAccount is deleted or recreated, when the pod it is bound
to is gone, or when it expires. No token: ``system:anonymous``. A token that is not valid: 401, whatever the
authorization mode. Tokens are opaque random strings kept in memory, not signed JWTs.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ttj_contract import format_time

from .errors import ApiError, invalid, not_found
from .identity import ADMIN, ANONYMOUS, UserInfo, service_account_user
from .resources import PODS, StorageKey
from .store import Store

SERVICE_ACCOUNTS: StorageKey = ("", "serviceaccounts")
#: kube-apiserver's default --api-audiences on most clusters.
DEFAULT_AUDIENCES = ("https://kubernetes.default.svc.cluster.local",)
DEFAULT_EXPIRATION_SECONDS = 3600
MIN_EXPIRATION_SECONDS = 600
#: A kubelet asks for 3607 s and, by kube-apiserver's --service-account-extend-token-expiration (on by
#: default), gets a token valid for a year (it still rotates it).
KUBELET_EXPIRATION_SECONDS = 3607
EXTENDED_EXPIRATION = timedelta(days=365)


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


@dataclass(frozen=True)
class IssuedToken:
    user: UserInfo
    namespace: str
    account: str
    account_uid: str
    expires: datetime
    #: the pod a kubelet's token is bound to: (name, uid)
    pod: tuple[str, str] | None = None


class Authenticator:
    def __init__(self, store: Store, clock: Any) -> None:
        self.store = store
        self.clock = clock
        self.admin_token = secrets.token_urlsafe(32)
        self._tokens: dict[str, IssuedToken] = {}
        self._lock = threading.Lock()

    def authenticate(self, authorization: str | None) -> UserInfo:
        """The user of an ``Authorization`` header; 401 for a bearer token nobody issued or that is no longer valid."""
        if not authorization:
            return ANONYMOUS
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise unauthorized()
        token = token.strip()
        if secrets.compare_digest(token, self.admin_token):
            return ADMIN
        with self._lock:
            issued = self._tokens.get(token)
        if issued is None:
            raise unauthorized()
        if not self._still_valid(issued):
            with self._lock:
                self._tokens.pop(token, None)  # never valid again: its account, pod or time is gone
            raise unauthorized()
        return issued.user

    def _still_valid(self, issued: IssuedToken) -> bool:
        if self.clock() >= issued.expires:
            return False
        account = self.store.get(SERVICE_ACCOUNTS, issued.namespace, issued.account)
        if account is None or account["metadata"].get("uid") != issued.account_uid:
            return False
        if issued.pod is not None:
            pod = self.store.get(PODS, issued.namespace, issued.pod[0])
            if pod is None or pod["metadata"].get("uid") != issued.pod[1]:
                return False
        return True

    def token_request(self, namespace: str, account: str, body: Any) -> dict[str, Any]:
        """Serve a TokenRequest (authentication.k8s.io/v1) for ServiceAccount ``namespace/account``."""
        service_account = self.store.get(SERVICE_ACCOUNTS, namespace, account)
        if service_account is None:
            raise not_found("serviceaccounts", "", account)
        spec = dict((body or {}).get("spec") or {}) if isinstance(body, dict) else {}
        seconds = int(spec.get("expirationSeconds") or DEFAULT_EXPIRATION_SECONDS)
        if seconds < MIN_EXPIRATION_SECONDS:
            raise invalid(
                "TokenRequest",
                "authentication.k8s.io",
                account,
                [("spec.expirationSeconds", "Invalid value: may not specify a duration less than 10 minutes")],
            )
        pod = self._bound_pod(namespace, account, spec.get("boundObjectRef"))
        now = self.clock()
        lifetime = timedelta(seconds=seconds)
        expires = now + lifetime
        valid_until = (
            now + EXTENDED_EXPIRATION if pod is not None and seconds == KUBELET_EXPIRATION_SECONDS else expires
        )
        token = secrets.token_urlsafe(32)
        issued = IssuedToken(
            service_account_user(namespace, account),
            namespace,
            account,
            service_account["metadata"]["uid"],
            valid_until,
            pod,
        )
        with self._lock:
            self._tokens[token] = issued
        spec["audiences"] = list(spec.get("audiences") or DEFAULT_AUDIENCES)
        spec["expirationSeconds"] = seconds
        return {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": account, "namespace": namespace, "creationTimestamp": None},
            "spec": spec,
            "status": {"token": token, "expirationTimestamp": format_time(expires)},
        }

    def _bound_pod(self, namespace: str, account: str, ref: Any) -> tuple[str, str] | None:
        if not ref:
            return None
        if not isinstance(ref, dict) or ref.get("kind") != "Pod":
            raise invalid(
                "TokenRequest",
                "authentication.k8s.io",
                account,
                [("spec.boundObjectRef.kind", "Unsupported value: only Pod is supported here")],
            )
        name = str(ref.get("name") or "")
        pod = self.store.get(PODS, namespace, name)
        if pod is None:
            raise not_found("pods", "", name)
        uid = pod["metadata"]["uid"]
        if ref.get("uid") and ref["uid"] != uid:
            raise ApiError(
                409,
                "Conflict",
                f"the UID in the bound object reference ({ref['uid']}) does not match the UID in record",
            )
        if (pod.get("spec") or {}).get("serviceAccountName", "default") != account:
            raise ApiError(
                409,
                "Conflict",
                f"cannot issue a token for {account}: pod {name} runs as service account "
                f"{(pod.get('spec') or {}).get('serviceAccountName')}",
            )
        return name, uid
