"""``ApiServer``: the API's parts (store, registry, core, CRDs, in-process controllers, fault injection) put
together, the bootstrap objects every cluster has, and the aiohttp web server that serves routes.py's paths."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from . import pod_security, priority, quota, rbac
from .access import ALWAYS_ALLOW, AccessControl
from .controllers import Controllers
from .core import ApiCore
from .crds import CrdManager
from .errors import ApiError
from .faults import FaultInjector
from .identity import WARNINGS
from .resources import NAMESPACES, PODS, Registry, ResourceType
from .rootca import RootCaPublisher
from .routes import build_app
from .store import Store
from .subresources import Subresources
from .tls import make_serving_certificates

BOOTSTRAP_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class ApiServer:
    """The API server. Create it, ``await start()`` in an event loop, ``await stop()`` at the end."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        history_size: int | None = None,
        bookmark_interval_seconds: float = 5.0,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        authorization_mode: str = ALWAYS_ALLOW,
        tls: bool | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.store = Store(history_size)
        self.registry = Registry()
        self.core = ApiCore(self.store, self.registry, clock)
        self.subresources = Subresources(self.core)
        self.crds = CrdManager(self.core)
        self.controllers = Controllers(self.core)
        self.faults = FaultInjector()
        #: authentication always; authorization by RBAC when ``authorization_mode`` is "RBAC"
        self.access = AccessControl(self.store, clock, authorization_mode)
        #: TLS by default with RBAC: kubectl and client-go send credentials over TLS only
        self.certificates = make_serving_certificates(host) if (self.access.enforcing if tls is None else tls) else None
        self.core.admission.mutating.append(self._admit_service_account)
        self.core.admission.mutating.append(self._admit_priority)
        self.core.admission.plugins.append(self._admit_access)
        #: ResourceQuota: the last validating plugin, as in kube
        self.quotas = quota.QuotaKeeper(self.core)
        self.core.admission.plugins.append(self.quotas.admit)
        #: how often an idle watch that asked for bookmarks gets one; read on every bookmark, so tests may change it
        self.bookmark_interval_seconds = bookmark_interval_seconds
        self._runner: web.AppRunner | None = None
        namespaces = self._builtin("namespaces")
        for name in BOOTSTRAP_NAMESPACES:
            self.core.create(namespaces, "", {"metadata": {"name": name}})
        self.core.on_write.setdefault(namespaces.storage_key, []).append(self._default_service_account)
        service_accounts = self._builtin("serviceaccounts")
        for name in BOOTSTRAP_NAMESPACES:
            self.core.create(service_accounts, name, {"metadata": {"name": "default"}})
        priority_classes = self.registry.get(priority.GROUP, "v1", "priorityclasses")
        assert priority_classes is not None
        for obj in priority.bootstrap():
            self.core.create(priority_classes, "", obj)
        for (group, plural), obj in rbac.bootstrap_policy():
            rtype = self.registry.get(group, "v1", plural)
            assert rtype is not None
            self.core.create(rtype, "", obj)
        ca_pem = self.certificates.ca_pem.decode() if self.certificates is not None else ""
        self.root_ca = RootCaPublisher(self.core, ca_pem)
        self.root_ca.publish_everywhere()

    def _builtin(self, plural: str) -> ResourceType:
        rtype = self.registry.get("", "v1", plural)
        assert rtype is not None
        return rtype

    def _admit_service_account(self, rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        """The ServiceAccount admission plugin's check on pod creation: the pod's service account exists. It is a
        mutating plugin, so it answers 403 before validation could answer 422."""
        if rtype.storage_key != PODS or old is not None:
            return
        namespace_name, name = obj["metadata"].get("namespace", ""), obj["metadata"].get("name", "")
        account = (obj.get("spec") or {}).get("serviceAccountName") or "default"
        if self.store.get(("", "serviceaccounts"), namespace_name, account) is None:
            raise ApiError(
                403,
                "Forbidden",
                f'pods "{name}" is forbidden: error looking up service account {namespace_name}/{account}: '
                f'serviceaccount "{account}" not found',
                name=name,
                kind="pods",
            )

    def _admit_priority(self, rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        """The Priority admission plugin: on pod creation, and on PriorityClasses themselves."""
        if rtype.storage_key == PODS and old is None:
            classes = self.store.items(priority.PRIORITY_CLASSES)
            priority.admit_pod(obj, lambda name: self.store.get(priority.PRIORITY_CLASSES, "", name), classes)
        elif rtype.storage_key == priority.PRIORITY_CLASSES:
            priority.admit_class(obj, old, self.store.items(priority.PRIORITY_CLASSES))

    def _admit_access(self, rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        """Privilege-escalation prevention on RBAC objects; Pod Security admission on pods."""
        if rtype.group == rbac.GROUP:
            self.access.admit_rbac_object(rtype.kind, obj, old)
        elif rtype.storage_key == PODS and old is not None:
            if pod_security.update_is_checked(old, obj):
                namespace = self.store.get(NAMESPACES, "", obj["metadata"].get("namespace", ""))
                self._warn(pod_security.admit_pod(obj, namespace))
        elif rtype.storage_key == PODS:
            namespace_name = obj["metadata"].get("namespace", "")
            self._warn(pod_security.admit_pod(obj, self.store.get(NAMESPACES, "", namespace_name)))
        elif (template := pod_security.pod_template(rtype.kind, obj)) is not None and (
            old is None or pod_security.pod_template(rtype.kind, old) != template
        ):
            namespace = self.store.get(NAMESPACES, "", obj["metadata"].get("namespace", ""))
            self._warn(pod_security.warnings(template, namespace))

    @staticmethod
    def _warn(texts: list[str]) -> None:
        warnings = WARNINGS.get()
        if warnings is not None:
            warnings.extend(texts)

    def _default_service_account(self, new: dict[str, Any], old: dict[str, Any] | None) -> None:
        """What kube's serviceaccount controller does: every new namespace gets a ``default`` ServiceAccount."""
        if new and old is None:
            self.core.create(
                self._builtin("serviceaccounts"), new["metadata"]["name"], {"metadata": {"name": "default"}}
            )

    @property
    def url(self) -> str:
        scheme = "https" if self.certificates is not None else "http"
        return f"{scheme}://{self.host}:{self.port}"

    async def start(self) -> None:
        self._runner = web.AppRunner(build_app(self), access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        context = self.certificates.context if self.certificates is not None else None
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True, ssl_context=context)
        await site.start()
        if self.port == 0:
            self.port = int(self._runner.addresses[0][1])
        self.controllers.start()

    async def stop(self) -> None:
        for watcher in self.store.all_watchers():
            watcher.close()
        await self.controllers.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


__all__ = ["ApiServer"]
