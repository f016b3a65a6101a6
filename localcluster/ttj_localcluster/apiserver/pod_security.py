"""Pod Security admission: a pod created in a namespace labelled ``pod-security.kubernetes.io/enforce`` must pass
that level of the Pod Security Standards (``privileged``, ``baseline``, ``restricted``), or is refused with 403
and kube-apiserver's message (``pods "x" is forbidden: violates PodSecurity "restricted:latest": ...``).

The checks are the standards' as of Kubernetes 1.32, each with the reason and detail kube words it, reported in
kube's order (by check id). ``warn`` gives ``would violate PodSecurity ...`` warnings, for pods and for the pod
templates of workload resources (which ``enforce`` does not refuse); ``audit`` is not acted on; every version
label is read as ``latest``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .errors import ApiError

PREFIX = "pod-security.kubernetes.io/"
LEVELS = ("privileged", "baseline", "restricted")

Pod = dict[str, Any]
#: (check id, the lowest level it applies from, the check) — a check returns (reason, detail) or None
Check = tuple[str, str, Callable[[Pod], tuple[str, str] | None]]

_BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
_SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}  # fmt: skip
_RESTRICTED_VOLUMES = (
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
)
_SELINUX_TYPES = ("", "container_t", "container_init_t", "container_kvm_t", "container_engine_t")


def _spec(pod: Pod) -> dict[str, Any]:
    return pod.get("spec") or {}


def _containers(pod: Pod) -> Iterator[dict[str, Any]]:
    spec = _spec(pod)
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _security(container: dict[str, Any]) -> dict[str, Any]:
    return container.get("securityContext") or {}


def _names(containers: list[dict[str, Any]]) -> str:
    """``container "a"`` or ``containers "a", "b"``, as kube's details say."""
    quoted = ", ".join(f'"{c.get("name")}"' for c in containers)
    return f"container {quoted}" if len(containers) == 1 else f"containers {quoted}"


def _verb(containers: list[dict[str, Any]], singular: str, plural: str) -> str:
    return singular if len(containers) == 1 else plural


def _host_namespaces(pod: Pod) -> tuple[str, str] | None:
    spec = _spec(pod)
    used = [f"{key}=true" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    return ("host namespaces", ", ".join(used)) if used else None


def _privileged(pod: Pod) -> tuple[str, str] | None:
    bad = [c for c in _containers(pod) if _security(c).get("privileged")]
    if not bad:
        return None
    return "privileged", f"{_names(bad)} {_verb(bad, 'must', 'must')} not set securityContext.privileged=true"


def _capabilities_baseline(pod: Pod) -> tuple[str, str] | None:
    added: list[str] = []
    bad = []
    for container in _containers(pod):
        extra = [
            c
            for c in (_security(container).get("capabilities") or {}).get("add") or []
            if c not in _BASELINE_CAPABILITIES
        ]
        if extra:
            bad.append(container)
            added.extend(c for c in extra if c not in added)
    if not bad:
        return None
    caps = ", ".join(f'"{c}"' for c in added)
    return "non-default capabilities", f"{_names(bad)} must not include {caps} in securityContext.capabilities.add"


def _host_path_volumes(pod: Pod) -> tuple[str, str] | None:
    bad = [v.get("name") for v in _spec(pod).get("volumes") or [] if "hostPath" in v]
    if not bad:
        return None
    noun = "volume" if len(bad) == 1 else "volumes"
    return "hostPath volumes", f"{noun} " + ", ".join(f'"{n}"' for n in bad)


def _host_ports(pod: Pod) -> tuple[str, str] | None:
    bad: list[dict[str, Any]] = []
    ports: list[str] = []
    for container in _containers(pod):
        used = [p["hostPort"] for p in container.get("ports") or [] if p.get("hostPort")]
        if used:
            bad.append(container)
            ports.extend(str(p) for p in used)
    if not bad:
        return None
    noun = "hostPort" if len(ports) == 1 else "hostPorts"
    return "hostPort", f"{_names(bad)} {_verb(bad, 'uses', 'use')} {noun} {', '.join(ports)}"


def _proc_mount(pod: Pod) -> tuple[str, str] | None:
    bad = [c for c in _containers(pod) if _security(c).get("procMount") not in (None, "Default")]
    if not bad:
        return None
    return "procMount", f'{_names(bad)} must not set securityContext.procMount to "Unmasked"'


def _se_linux(pod: Pod) -> tuple[str, str] | None:
    options = [_spec(pod).get("securityContext", {}).get("seLinuxOptions") or {}]
    options += [_security(c).get("seLinuxOptions") or {} for c in _containers(pod)]
    for option in options:
        if option.get("type", "") not in _SELINUX_TYPES or option.get("user") or option.get("role"):
            return "seLinuxOptions", "forbidden securityContext.seLinuxOptions"
    return None


def _seccomp_type(context: dict[str, Any]) -> str | None:
    return (context.get("seccompProfile") or {}).get("type")


def _seccomp_baseline(pod: Pod) -> tuple[str, str] | None:
    if _seccomp_type(_spec(pod).get("securityContext") or {}) == "Unconfined":
        return "seccompProfile", 'pod must not set securityContext.seccompProfile.type to "Unconfined"'
    bad = [c for c in _containers(pod) if _seccomp_type(_security(c)) == "Unconfined"]
    if bad:
        return "seccompProfile", f'{_names(bad)} must not set securityContext.seccompProfile.type to "Unconfined"'
    return None


def _sysctls(pod: Pod) -> tuple[str, str] | None:
    bad = [
        s.get("name")
        for s in (_spec(pod).get("securityContext") or {}).get("sysctls") or []
        if s.get("name") not in _SAFE_SYSCTLS
    ]
    return ("forbidden sysctls", ", ".join(str(b) for b in bad)) if bad else None


def _allow_privilege_escalation(pod: Pod) -> tuple[str, str] | None:
    bad = [c for c in _containers(pod) if _security(c).get("allowPrivilegeEscalation") is not False]
    if not bad:
        return None
    return "allowPrivilegeEscalation != false", f"{_names(bad)} must set securityContext.allowPrivilegeEscalation=false"


def _capabilities_restricted(pod: Pod) -> tuple[str, str] | None:
    no_drop: list[dict[str, Any]] = []
    bad_add: list[dict[str, Any]] = []
    added: list[str] = []
    for container in _containers(pod):
        capabilities = _security(container).get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            no_drop.append(container)
        extra = [c for c in capabilities.get("add") or [] if c != "NET_BIND_SERVICE"]
        if extra:
            bad_add.append(container)
            added.extend(c for c in extra if c not in added)
    details = []
    if no_drop:
        details.append(f'{_names(no_drop)} must set securityContext.capabilities.drop=["ALL"]')
    if bad_add:
        caps = ", ".join(f'"{c}"' for c in added)
        details.append(f"{_names(bad_add)} must not include {caps} in securityContext.capabilities.add")
    return ("unrestricted capabilities", "; ".join(details)) if details else None


def _restricted_volumes(pod: Pod) -> tuple[str, str] | None:
    bad = []
    for volume in _spec(pod).get("volumes") or []:
        kinds = [k for k in volume if k != "name"]
        if kinds and not any(k in _RESTRICTED_VOLUMES for k in kinds):
            bad.append((volume.get("name"), kinds[0]))
    if not bad:
        return None
    if len(bad) == 1:
        return "restricted volume types", f'volume "{bad[0][0]}" uses restricted volume type "{bad[0][1]}"'
    volumes = ", ".join(f'"{n}"' for n, _ in bad)
    types = ", ".join(f'"{k}"' for k in dict.fromkeys(k for _, k in bad))
    return "restricted volume types", f"volumes {volumes} use restricted volume types {types}"


def _run_as_non_root(pod: Pod) -> tuple[str, str] | None:
    pod_level = (_spec(pod).get("securityContext") or {}).get("runAsNonRoot")
    explicit_false = [c for c in _containers(pod) if _security(c).get("runAsNonRoot") is False]
    unset = [c for c in _containers(pod) if _security(c).get("runAsNonRoot") is None]
    if pod_level is False:
        return "runAsNonRoot != true", "pod must not set securityContext.runAsNonRoot=false"
    if explicit_false:
        return "runAsNonRoot != true", f"{_names(explicit_false)} must not set securityContext.runAsNonRoot=false"
    if pod_level is not True and unset:
        return "runAsNonRoot != true", f"pod or {_names(unset)} must set securityContext.runAsNonRoot=true"
    return None


def _run_as_user(pod: Pod) -> tuple[str, str] | None:
    if (_spec(pod).get("securityContext") or {}).get("runAsUser") == 0:
        return "runAsUser=0", "pod must not set runAsUser=0"
    bad = [c for c in _containers(pod) if _security(c).get("runAsUser") == 0]
    return ("runAsUser=0", f"{_names(bad)} must not set runAsUser=0") if bad else None


def _seccomp_restricted(pod: Pod) -> tuple[str, str] | None:
    allowed = ("RuntimeDefault", "Localhost")
    pod_type = _seccomp_type(_spec(pod).get("securityContext") or {})
    if pod_type is not None and pod_type not in allowed:
        return "seccompProfile", f'pod must not set securityContext.seccompProfile.type to "{pod_type}"'
    bad = [c for c in _containers(pod) if _seccomp_type(_security(c)) not in (*allowed, None)]
    if bad:
        return "seccompProfile", f'{_names(bad)} must not set securityContext.seccompProfile.type to "Unconfined"'
    unset = [c for c in _containers(pod) if _seccomp_type(_security(c)) is None]
    if pod_type is None and unset:
        return (
            "seccompProfile",
            f'pod or {_names(unset)} must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"',
        )
    return None


#: kube's checks in its order (by id); a restricted check replaces the baseline one it overrides.
CHECKS: list[Check] = [
    ("allowPrivilegeEscalation", "restricted", _allow_privilege_escalation),
    ("capabilities_baseline", "baseline", _capabilities_baseline),
    ("capabilities_restricted", "restricted", _capabilities_restricted),
    ("hostNamespaces", "baseline", _host_namespaces),
    ("hostPathVolumes", "baseline", _host_path_volumes),
    ("hostPorts", "baseline", _host_ports),
    ("privileged", "baseline", _privileged),
    ("procMount", "baseline", _proc_mount),
    ("restrictedVolumes", "restricted", _restricted_volumes),
    ("runAsNonRoot", "restricted", _run_as_non_root),
    ("runAsUser", "restricted", _run_as_user),
    ("seLinuxOptions", "baseline", _se_linux),
    ("seccompProfile_baseline", "baseline", _seccomp_baseline),
    ("seccompProfile_restricted", "restricted", _seccomp_restricted),
    ("sysctls", "baseline", _sysctls),
]
_OVERRIDDEN_IN_RESTRICTED = ("capabilities_baseline", "seccompProfile_baseline")


def violations(pod: Pod, level: str) -> list[str]:
    """``reason (detail)`` of every check the pod fails at ``level``."""
    if level == "privileged":
        return []
    wanted = LEVELS[: LEVELS.index(level) + 1]
    found = []
    for check_id, applies_from, check in CHECKS:
        if applies_from not in wanted or (level == "restricted" and check_id in _OVERRIDDEN_IN_RESTRICTED):
            continue
        result = check(pod)
        if result is not None:
            found.append(f"{result[0]} ({result[1]})")
    return found


def mode_level(namespace: dict[str, Any] | None, mode: str = "enforce") -> tuple[str, str]:
    """(level, version) of a namespace's ``enforce`` or ``warn`` label; a level that is not one of the three is
    read as restricted; no label: privileged."""
    labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    level = labels.get(f"{PREFIX}{mode}")
    if level is None:
        return "privileged", "latest"
    return (level if level in LEVELS else "restricted"), labels.get(f"{PREFIX}{mode}-version") or "latest"


def admit_pod(pod: Pod, namespace: dict[str, Any] | None) -> list[str]:
    """Raise 403 Forbidden when the namespace's enforced level refuses the pod; else the warnings its ``warn``
    level gives (kube sends them as ``Warning`` headers, which kubectl prints)."""
    level, version = mode_level(namespace)
    found = violations(pod, level)
    if found:
        name = (pod.get("metadata") or {}).get("name", "")
        message = f'pods "{name}" is forbidden: violates PodSecurity "{level}:{version}": ' + ", ".join(found)
        raise ApiError(403, "Forbidden", message, name=name, group="", kind="pods")
    return warnings(pod, namespace)


def warnings(pod: Pod, namespace: dict[str, Any] | None) -> list[str]:
    """``would violate PodSecurity ...`` for a pod, or a workload's pod template, that breaks the ``warn`` level."""
    level, version = mode_level(namespace, "warn")
    found = violations(pod, level)
    return [f'would violate PodSecurity "{level}:{version}": ' + ", ".join(found)] if found else []


#: a pod update that changes only these (and metadata other than seccomp/AppArmor annotations) is not checked
_UPDATE_EXEMPT_SPEC = ("activeDeadlineSeconds", "tolerations")
_CHECKED_ANNOTATIONS = ("seccomp.security.alpha.kubernetes.io/", "container.seccomp.security.alpha.kubernetes.io/",
                        "container.apparmor.security.beta.kubernetes.io/")  # fmt: skip


def update_is_checked(old: Pod, new: Pod) -> bool:
    """Whether a pod update is evaluated again: it changes the spec (a container image, say) beyond the exempt
    fields, or a seccomp or AppArmor annotation."""

    def checked(pod: Pod) -> tuple[dict[str, Any], dict[str, Any]]:
        spec = {k: v for k, v in (pod.get("spec") or {}).items() if k not in _UPDATE_EXEMPT_SPEC}
        annotations = ((pod.get("metadata") or {}).get("annotations")) or {}
        return spec, {k: v for k, v in annotations.items() if k.startswith(_CHECKED_ANNOTATIONS)}

    return checked(old) != checked(new)


def pod_template(kind: str, obj: dict[str, Any]) -> Pod | None:
    """The pod a workload object makes, as Pod Security checks it (Deployments, ReplicaSets, StatefulSets,
    DaemonSets, Jobs, CronJobs)."""
    spec = obj.get("spec") or {}
    if kind == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    elif kind not in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "ReplicationController"):
        return None
    template = spec.get("template")
    return template if isinstance(template, dict) else None
