"""A Kubernetes API server, in-process, over real HTTP: enough of kube for kopf, the official client and kubectl."""

from .faults import FaultInjector, FaultRule
from .server import ApiServer

__all__ = ["ApiServer", "FaultInjector", "FaultRule"]
