"""The Pod Security Standards' ``restricted`` profile (latest), as a check of a pod spec.

Written from the standard's definition (kubernetes.io/docs/concepts/security/pod-security-standards): every
control of the baseline profile, then those restricted adds. Returns one message per violation, naming the
control, as Pod Security admission would list them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

#: Capabilities the baseline profile lets a container add.
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
#: The volume types restricted allows.
RESTRICTED_VOLUMES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)


def _containers(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(field) or []


def restricted_violations(spec: dict[str, Any]) -> list[str]:
    """Why a pod with this spec would be refused in a namespace enforcing ``restricted``; empty if it would not."""
    problems = baseline_violations(spec)
    pod_context = spec.get("securityContext") or {}
    containers = list(_containers(spec))
    for volume in spec.get("volumes") or []:
        types = set(volume) - {"name"}
        if not types <= RESTRICTED_VOLUMES:
            problems.append(f"restricted volume types: volume {volume.get('name')} uses {sorted(types)}")
    for c in containers:
        context = c.get("securityContext") or {}
        name = c.get("name")
        if context.get("allowPrivilegeEscalation") is not False:
            problems.append(f"allowPrivilegeEscalation != false: container {name}")
        if context.get("runAsNonRoot") is False or (
            context.get("runAsNonRoot") is not True and pod_context.get("runAsNonRoot") is not True
        ):
            problems.append(f"runAsNonRoot != true: container {name}")
        if context.get("runAsUser") == 0:
            problems.append(f"runAsUser=0: container {name}")
        seccomp = (context.get("seccompProfile") or {}).get("type") or (pod_context.get("seccompProfile") or {}).get(
            "type"
        )
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"seccompProfile: container {name} has {seccomp or 'none'}")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            problems.append(f"unrestricted capabilities: container {name} must drop ALL")
        if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            problems.append(f"unrestricted capabilities: container {name} adds {capabilities['add']}")
    if pod_context.get("runAsUser") == 0:
        problems.append("runAsUser=0: pod")
    return problems


def baseline_violations(spec: dict[str, Any]) -> list[str]:
    problems = []
    pod_context = spec.get("securityContext") or {}
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            problems.append(f"host namespaces: {field}=true")
    if (pod_context.get("windowsOptions") or {}).get("hostProcess"):
        problems.append("hostProcess: pod")
    if (pod_context.get("seccompProfile") or {}).get("type") == "Unconfined":
        problems.append("seccompProfile: pod is Unconfined")
    problems += _selinux(pod_context, "pod")
    problems += _apparmor(pod_context, "pod")
    for sysctl in pod_context.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            problems.append(f"forbidden sysctls: {sysctl.get('name')}")
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            problems.append(f"hostPath volumes: {volume.get('name')}")
    for c in _containers(spec):
        context = c.get("securityContext") or {}
        name = c.get("name")
        if context.get("privileged"):
            problems.append(f"privileged: container {name}")
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            problems.append(f"hostProcess: container {name}")
        added = set((context.get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            problems.append(f"non-default capabilities: container {name} adds {sorted(added - BASELINE_CAPABILITIES)}")
        if any(p.get("hostPort") for p in c.get("ports") or []):
            problems.append(f"hostPort: container {name}")
        if context.get("procMount") not in (None, "Default"):
            problems.append(f"procMount: container {name}")
        if (context.get("seccompProfile") or {}).get("type") == "Unconfined":
            problems.append(f"seccompProfile: container {name} is Unconfined")
        problems += _selinux(context, f"container {name}")
        problems += _apparmor(context, f"container {name}")
    return problems


def _selinux(context: dict[str, Any], where: str) -> list[str]:
    options = context.get("seLinuxOptions") or {}
    problems = []
    if options.get("type", "") not in SELINUX_TYPES:
        problems.append(f"seLinuxOptions: {where} type {options['type']}")
    if options.get("user") or options.get("role"):
        problems.append(f"seLinuxOptions: {where} sets user or role")
    return problems


def _apparmor(context: dict[str, Any], where: str) -> list[str]:
    kind = (context.get("appArmorProfile") or {}).get("type")
    if kind not in (None, "RuntimeDefault", "Localhost"):
        return [f"appArmorProfile: {where} is {kind}"]
    return []
