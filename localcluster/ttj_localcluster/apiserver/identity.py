"""Who is asking: the user a request authenticated as, in kube's terms (name and groups), and the request in
flight's user for the checks that run deeper than the HTTP layer (RBAC escalation, admission)."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

#: kube's superuser group: every request of a member is authorized (the admin kubeconfig's user).
MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


@dataclass(frozen=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()

    @property
    def is_superuser(self) -> bool:
        return MASTERS in self.groups


ANONYMOUS = UserInfo("system:anonymous", (UNAUTHENTICATED,))
#: The admin kubeconfig's identity (kubeadm names its admin ``kubernetes-admin`` too).
ADMIN = UserInfo("kubernetes-admin", (MASTERS, AUTHENTICATED))


def service_account_user(namespace: str, name: str) -> UserInfo:
    """The identity of a service account's token, as kube-apiserver's token authenticator builds it."""
    return UserInfo(
        f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED),
    )


#: Warnings for the response to the request being served (``Warning: 299 - "..."`` headers).
WARNINGS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("ttj_local_warnings", default=None)

#: The user of the request being served; None inside the server's own controllers (garbage collector,
#: namespace controller), which act as kube-controller-manager would, with its own rights.
CURRENT_USER: contextvars.ContextVar[UserInfo | None] = contextvars.ContextVar("ttj_local_user", default=None)
