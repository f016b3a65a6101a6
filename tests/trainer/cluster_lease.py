"""The Lease on the cluster under test (the local cluster, or KUBECONFIG's), driven as the operator would.

Same interface as LeaseDouble, so the trainer tests run against either: a real API server (the default)
or the in-process HTTP double (TTJ_TRAINER_TESTS_LEASE=double, no cluster needed).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from tests.trainer.lease_double import read_progress
from ttj_contract import LeaseProgress


class ClusterLease:
    def __init__(self, kubeconfig: str, name: str, holder: str | None = None, duration: int = 15) -> None:
        from kubernetes import client, config

        self.kubeconfig = kubeconfig
        self.api_client = config.new_client_from_config(config_file=kubeconfig)
        self.core = client.CoreV1Api(self.api_client)
        self.coordination = client.CoordinationV1Api(self.api_client)
        self.namespace = f"trainer-{uuid.uuid4().hex[:8]}"
        self.name = name
        self.core.create_namespace({"metadata": {"name": self.namespace}})
        self.coordination.create_namespaced_lease(
            self.namespace,
            {
                "metadata": {"name": name},
                "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "leaseTransitions": 0},
            },
        )

    def __enter__(self) -> ClusterLease:
        return self

    def __exit__(self, *_: Any) -> None:
        try:
            self.core.delete_namespace(self.namespace)
        finally:
            self.api_client.close()

    def write_kubeconfig(self, path: Path) -> Path:
        return Path(self.kubeconfig)

    def elect(self, holder: str) -> int:
        """Makes ``holder`` the chief in a new epoch (resourceVersion-checked, retried on conflict)."""
        from kubernetes.client.exceptions import ApiException

        for _ in range(20):
            lease = self.coordination.read_namespaced_lease(self.name, self.namespace)
            epoch = int(lease.spec.lease_transitions or 0) + 1
            # a patch, not a replace of the typed object: that would write its MicroTimes back with
            # isoformat() ("+00:00", no fraction when the microseconds are 0), which kube refuses
            change = {
                "metadata": {"resourceVersion": lease.metadata.resource_version},
                "spec": {"holderIdentity": holder, "leaseTransitions": epoch, "renewTime": None},
            }
            try:
                self.coordination.patch_namespaced_lease(
                    self.name, self.namespace, change, _content_type="application/merge-patch+json"
                )
            except ApiException as err:
                if err.status == 409:
                    continue
                raise
            return epoch
        raise AssertionError("could not update the Lease: conflicts every time")

    def snapshot(self) -> dict[str, Any]:
        lease = self.coordination.read_namespaced_lease(self.name, self.namespace)
        data: dict[str, Any] = self.api_client.sanitize_for_serialization(lease)
        data["metadata"].setdefault("annotations", {})
        return data

    def progress(self) -> LeaseProgress | None:
        """The chief's report, read as the operator reads it."""
        return read_progress(self.snapshot())
