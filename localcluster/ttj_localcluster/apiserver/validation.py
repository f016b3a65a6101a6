"""kube-apiserver's field validation of object metadata, pod specs (pods and workload templates) and
NetworkPolicies, for the fields the project's clients write.

Each check follows the rule of ``k8s.io/apimachinery/pkg/util/validation`` and ``pkg/apis/core/validation``
(names, label keys and values, quantities, ports, env, volumes, tolerations, affinity, security context) and
``pkg/apis/networking/validation``, and words its error as they do: ``(field path, "Invalid value: ...")``.
Admission plugins (ResourceQuota, Pod Security, Priority) have their own modules; docs/local-cluster.md lists what
the local cluster leaves out.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from ttj_contract import quantity as quantities

Errors = list[tuple[str, str]]

DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_IANA_SVC_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
_MAX_QUANTITY = Decimal(2**63 - 1)
_STANDARD_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
_VOLUME_SOURCES = frozenset(
    {
        "emptyDir",
        "configMap",
        "secret",
        "persistentVolumeClaim",
        "csi",
        "projected",
        "downwardAPI",
        "hostPath",
        "ephemeral",
        "nfs",
    }
)
_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_TOTAL_ANNOTATION_BYTES = 256 * 1024


def _invalid(value: Any, detail: str) -> str:
    return f"Invalid value: {json.dumps(value)}: {detail}"


# -- names -----------------------------------------------------------------------------------------
def qualified_name(path: str, value: Any) -> Errors:
    """A label or annotation key: an optional DNS-1123 subdomain prefix of at most 253 characters and '/',
    then a name of at most 63 characters."""
    if not isinstance(value, str) or not value:
        return [(path, _invalid(value, "name part must be non-empty"))]
    prefix, _, name = value.rpartition("/")
    errors: Errors = []
    if "/" in value and (not prefix or len(prefix) > 253 or not DNS_1123_SUBDOMAIN.match(prefix)):
        errors.append((path, _invalid(value, "prefix part must be a lowercase RFC 1123 subdomain")))
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        errors.append(
            (
                path,
                _invalid(
                    value,
                    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                    "with an alphanumeric character (at most 63 characters)",
                ),
            )
        )
    return errors


def label_value(path: str, value: Any) -> Errors:
    if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
        return [
            (
                path,
                _invalid(
                    value,
                    "a valid label must be an empty string or consist of alphanumeric characters, "
                    "'-', '_' or '.', and must start and end with an alphanumeric character",
                ),
            )
        ]
    return []


def dns_label(path: str, value: Any) -> Errors:
    if not isinstance(value, str) or len(value) > 63 or not DNS_1123_LABEL.match(value):
        return [
            (
                path,
                _invalid(
                    value,
                    "a lowercase RFC 1123 label must consist of lower case alphanumeric "
                    "characters or '-', and must start and end with an alphanumeric character",
                ),
            )
        ]
    return []


def dns_subdomain(path: str, value: Any) -> Errors:
    if not isinstance(value, str) or len(value) > 253 or not DNS_1123_SUBDOMAIN.match(value):
        return [
            (
                path,
                _invalid(
                    value,
                    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                    "characters, '-' or '.', and must start and end with an alphanumeric character",
                ),
            )
        ]
    return []


def labels(path: str, value: Any) -> Errors:
    errors: Errors = []
    for key, item in (value or {}).items():
        errors += qualified_name(path, key)
        errors += label_value(path, item)
    return errors


def metadata(meta: dict[str, Any]) -> Errors:
    """Label keys and values, annotation keys and their total size, as ValidateObjectMeta checks them."""
    errors = labels("metadata.labels", meta.get("labels"))
    annotations = meta.get("annotations") or {}
    for key in annotations:
        errors += qualified_name("metadata.annotations", key)
    size = sum(len(k) + len(str(v)) for k, v in annotations.items())
    if size > _TOTAL_ANNOTATION_BYTES:
        errors.append(("metadata.annotations", f"Too long: must have at most {_TOTAL_ANNOTATION_BYTES} bytes"))
    return errors


# -- quantities ------------------------------------------------------------------------------------
def parse_quantity(value: Any) -> Decimal | None:
    """A quantity's value, None when the API server would not parse it."""
    try:
        return quantities.parse_quantity(value)
    except ValueError:
        return None


def resources(path: str, value: Any) -> Errors:
    """ValidateResourceRequirements: names, quantities, and each request against its limit (reported on the
    ``requests`` map, as kube does)."""
    errors: Errors = []
    parsed: dict[str, dict[str, Decimal]] = {}
    written: dict[str, Any] = (value or {}).get("requests") or {}
    for part in ("limits", "requests"):
        for name, quantity in ((value or {}).get(part) or {}).items():
            where = f"{path}.{part}[{name}]"
            if name not in _STANDARD_RESOURCES and not name.startswith("hugepages-") and "/" not in name:
                errors.append((where, _invalid(name, "must be a standard resource type or fully qualified")))
                continue
            if "/" in name:
                errors += qualified_name(where, name)
            number = parse_quantity(quantity)
            if number is None:
                errors.append((where, _invalid(quantity, "must match the regular expression of a quantity")))
                continue
            if number < 0:
                errors.append((where, _invalid(quantity, "must be greater than or equal to 0")))
            elif number * 1000 > _MAX_QUANTITY:
                errors.append((where, _invalid(quantity, "quantity is too large")))
            extended = "/" in name and not name.startswith("kubernetes.io/")
            if extended and number != number.to_integral_value():
                errors.append((where, _invalid(quantity, "must be an integer")))
            parsed.setdefault(part, {})[name] = number
    for name, request in parsed.get("requests", {}).items():
        limit = parsed.get("limits", {}).get(name)
        overcommit_allowed = ("/" not in name or "kubernetes.io/" in name) and not name.startswith("hugepages-")
        shown = str(written[name])
        if limit is not None and not overcommit_allowed and request != limit:
            errors.append((f"{path}.requests", _invalid(shown, f"must be equal to {name} limit")))
        elif limit is not None and request > limit:
            errors.append((f"{path}.requests", _invalid(shown, f"must be less than or equal to {name} limit")))
        elif limit is None and not overcommit_allowed:
            errors.append((f"{path}.limits", "Required value: Limit must be set for non overcommitable resources"))
    return errors


# -- pods ------------------------------------------------------------------------------------------
def _unique(path: str, names: Iterable[Any], what: str = "Duplicate value") -> Errors:
    seen: set[Any] = set()
    errors: Errors = []
    for i, name in enumerate(names):
        if name in seen:
            errors.append((f"{path}[{i}]", f"{what}: {json.dumps(name)}"))
        seen.add(name)
    return errors


def _env(path: str, env: list[dict[str, Any]]) -> Errors:
    errors: Errors = []
    for i, item in enumerate(env or []):
        where = f"{path}[{i}]"
        name = item.get("name")
        if not name or not _ENV_NAME.match(str(name)):
            errors.append(
                (
                    f"{where}.name",
                    _invalid(
                        name,
                        "a valid environment variable name must consist of "
                        "alphabetic characters, digits, '_', '-', or '.'",
                    ),
                )
            )
        source = item.get("valueFrom")
        if source is not None:
            if item.get("value"):
                errors.append(
                    (f"{where}.valueFrom", 'Invalid value: "": may not be specified when `value` is not empty')
                )
            kinds = [k for k in ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef") if k in source]
            if len(kinds) != 1:
                errors.append(
                    (
                        f"{where}.valueFrom",
                        'Invalid value: "": may not have more than one field specified at a time'
                        if kinds
                        else "Required value: must specify one of: `fieldRef`, `resourceFieldRef`, "
                        "`configMapKeyRef` or `secretKeyRef`",
                    )
                )
            for kind in ("configMapKeyRef", "secretKeyRef"):
                ref = source.get(kind)
                if ref is not None:
                    errors += dns_subdomain(f"{where}.valueFrom.{kind}.name", ref.get("name"))
                    if not _CONFIG_KEY.match(str(ref.get("key") or "")):
                        errors.append((f"{where}.valueFrom.{kind}.key", _invalid(ref.get("key"), "a valid config key")))
    return errors


def _env_from(path: str, sources: list[dict[str, Any]]) -> Errors:
    errors: Errors = []
    for i, source in enumerate(sources or []):
        where = f"{path}[{i}]"
        refs = [k for k in ("configMapRef", "secretRef") if k in source]
        if len(refs) != 1:
            errors.append(
                (
                    where,
                    'Invalid value: "": may not have more than one field specified at a time'
                    if refs
                    else "Required value: must specify one of: `configMapRef` or `secretRef`",
                )
            )
        for ref in refs:
            errors += dns_subdomain(f"{where}.{ref}.name", (source[ref] or {}).get("name"))
        prefix = source.get("prefix")
        if prefix and not _ENV_NAME.match(prefix):
            errors.append((f"{where}.prefix", _invalid(prefix, "a valid environment variable name")))
    return errors


def _port(path: str, value: Any) -> Errors:
    if isinstance(value, int) and not isinstance(value, bool):
        return [] if 1 <= value <= 65535 else [(path, _invalid(value, "must be between 1 and 65535, inclusive"))]
    if (
        isinstance(value, str)
        and 0 < len(value) <= 15
        and _IANA_SVC_NAME.match(value)
        and "--" not in value
        and re.search("[a-z]", value)
    ):
        return []
    return [
        (
            path,
            _invalid(
                value,
                "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-), at most "
                "15 characters, with at least one letter",
            ),
        )
    ]


def _container(path: str, container: dict[str, Any], volumes: set[str]) -> Errors:
    errors = dns_label(f"{path}.name", container.get("name"))
    image = container.get("image")
    if not image:
        errors.append((f"{path}.image", "Required value"))
    elif str(image) != str(image).strip():
        errors.append((f"{path}.image", _invalid(image, "must not have leading or trailing whitespace")))
    ports = container.get("ports") or []
    for i, port in enumerate(ports):
        number = port.get("containerPort")
        if not isinstance(number, int) or not 1 <= number <= 65535:
            errors.append(
                (f"{path}.ports[{i}].containerPort", _invalid(number, "must be between 1 and 65535, inclusive"))
            )
        if port.get("name"):
            errors += _port(f"{path}.ports[{i}].name", port["name"])
        if port.get("protocol", "TCP") not in ("TCP", "UDP", "SCTP"):
            errors.append((f"{path}.ports[{i}].protocol", f"Unsupported value: {json.dumps(port.get('protocol'))}"))
    errors += _unique(f"{path}.ports", [p["name"] for p in ports if p.get("name")])
    errors += _env(f"{path}.env", container.get("env") or [])
    errors += _env_from(f"{path}.envFrom", container.get("envFrom") or [])
    errors += resources(f"{path}.resources", container.get("resources"))
    mounts = container.get("volumeMounts") or []
    for i, mount in enumerate(mounts):
        where = f"{path}.volumeMounts[{i}]"
        if mount.get("name") not in volumes:
            errors.append((f"{where}.name", f"Not found: {json.dumps(mount.get('name'))}"))
        mount_path = str(mount.get("mountPath") or "")
        if not mount_path:
            errors.append((f"{where}.mountPath", "Required value"))
        sub_path = str(mount.get("subPath") or "")
        if sub_path.startswith("/") or ".." in sub_path.split("/"):
            errors.append((f"{where}.subPath", _invalid(sub_path, "must be a relative path without '..'")))
    errors += _unique(f"{path}.volumeMounts", [m.get("mountPath") for m in mounts], "Invalid value: must be unique")
    context = container.get("securityContext") or {}
    for key in ("runAsUser", "runAsGroup"):
        if key in context and not 0 <= int(context[key]) <= 2**31 - 1:
            errors.append((f"{path}.securityContext.{key}", _invalid(context[key], "must be between 0 and 2147483647")))
    if context.get("privileged") and context.get("allowPrivilegeEscalation") is False:
        errors.append(
            (
                f"{path}.securityContext",
                "Invalid value: cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
            )
        )
    return errors


def _volumes(path: str, volumes: list[dict[str, Any]]) -> Errors:
    errors: Errors = []
    for i, volume in enumerate(volumes):
        where = f"{path}[{i}]"
        errors += dns_label(f"{where}.name", volume.get("name"))
        sources = [k for k in volume if k != "name"]
        if len(sources) != 1:
            errors.append(
                (
                    where,
                    "Invalid value: may not specify more than 1 volume type"
                    if sources
                    else "Required value: must specify a volume type",
                )
            )
        for source in sources:
            if source not in _VOLUME_SOURCES:
                errors.append((f"{where}.{source}", "Forbidden: not a volume type the local cluster knows"))
        size = (volume.get("emptyDir") or {}).get("sizeLimit")
        if size is not None:
            number = parse_quantity(size)
            if number is None or number < 0:
                errors.append((f"{where}.emptyDir.sizeLimit", _invalid(size, "must be a non-negative quantity")))
        for key, name_key in (("configMap", "name"), ("secret", "secretName"), ("persistentVolumeClaim", "claimName")):
            if key in volume:
                errors += dns_subdomain(f"{where}.{key}.{name_key}", (volume[key] or {}).get(name_key))
                mode = (volume[key] or {}).get("defaultMode")
                if mode is not None and not 0 <= int(mode) <= 0o777:
                    errors.append(
                        (f"{where}.{key}.defaultMode", _invalid(mode, "must be a number between 0 and 0777 (octal)"))
                    )
    errors += _unique(path, [v.get("name") for v in volumes])
    return errors


def _tolerations(path: str, tolerations: list[dict[str, Any]]) -> Errors:
    errors: Errors = []
    for i, toleration in enumerate(tolerations):
        where = f"{path}[{i}]"
        key, operator = toleration.get("key") or "", toleration.get("operator") or "Equal"
        if key:
            errors += qualified_name(f"{where}.key", key)
        if not key and operator != "Exists":
            errors.append((f"{where}.operator", _invalid(operator, "operator must be Exists when `key` is empty")))
        if operator == "Exists" and toleration.get("value"):
            errors.append(
                (
                    f"{where}.operator",
                    _invalid(toleration.get("value"), "value must be empty when `operator` is 'Exists'"),
                )
            )
        elif operator == "Equal":
            errors += label_value(f"{where}.value", toleration.get("value") or "")
        elif operator != "Exists":
            errors.append((f"{where}.operator", f"Unsupported value: {json.dumps(operator)}"))
        effect = toleration.get("effect")
        if effect not in (None, "", "NoSchedule", "PreferNoSchedule", "NoExecute"):
            errors.append((f"{where}.effect", f"Unsupported value: {json.dumps(effect)}"))
        if toleration.get("tolerationSeconds") is not None and effect != "NoExecute":
            errors.append(
                (f"{where}.effect", _invalid(effect, "effect must be 'NoExecute' when `tolerationSeconds` is set"))
            )
    return errors


def _node_requirements(path: str, requirements: list[dict[str, Any]]) -> Errors:
    errors: Errors = []
    for i, req in enumerate(requirements or []):
        where = f"{path}[{i}]"
        errors += qualified_name(f"{where}.key", req.get("key"))
        operator, values = req.get("operator"), req.get("values") or []
        if operator in ("In", "NotIn") and not values:
            errors.append((f"{where}.values", "Required value: must be specified when `operator` is 'In' or 'NotIn'"))
        elif operator in ("Exists", "DoesNotExist") and values:
            errors.append(
                (f"{where}.values", "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
            )
        elif operator in ("Gt", "Lt") and (len(values) != 1 or not str(values[0]).lstrip("-").isdigit()):
            errors.append(
                (f"{where}.values", "Required value: must be specified single value when `operator` is 'Lt' or 'Gt'")
            )
        elif operator not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
            errors.append(
                (f"{where}.operator", f"Invalid value: {json.dumps(operator)}: not a valid selector operator")
            )
        for j, value in enumerate(values):
            errors += label_value(f"{where}.values[{j}]", value)
    return errors


def label_selector(path: str, selector: Any) -> Errors:
    if selector is None:
        return []
    errors = labels(f"{path}.matchLabels", selector.get("matchLabels"))
    for i, req in enumerate(selector.get("matchExpressions") or []):
        where = f"{path}.matchExpressions[{i}]"
        errors += qualified_name(f"{where}.key", req.get("key"))
        operator, values = req.get("operator"), req.get("values") or []
        if operator not in _SELECTOR_OPERATORS:
            errors.append(
                (f"{where}.operator", f"Invalid value: {json.dumps(operator)}: not a valid selector operator")
            )
        elif operator in ("In", "NotIn") and not values:
            errors.append((f"{where}.values", "Required value: must be specified when `operator` is 'In' or 'NotIn'"))
        elif operator in ("Exists", "DoesNotExist") and values:
            errors.append(
                (f"{where}.values", "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
            )
        for j, value in enumerate(values):
            errors += label_value(f"{where}.values[{j}]", value)
    return errors


def _affinity(path: str, affinity: dict[str, Any]) -> Errors:
    errors: Errors = []
    node = affinity.get("nodeAffinity") or {}
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is not None:
        terms = required.get("nodeSelectorTerms") or []
        if not terms:
            errors.append(
                (
                    f"{path}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
                    "Required value: must have at least one node selector term",
                )
            )
        for i, term in enumerate(terms):
            errors += _node_requirements(
                f"{path}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}].matchExpressions",
                term.get("matchExpressions") or [],
            )
    for i, preferred in enumerate(node.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
        where = f"{path}.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
        if not 1 <= int(preferred.get("weight") or 0) <= 100:
            errors.append((f"{where}.weight", _invalid(preferred.get("weight"), "must be in the range 1-100")))
        errors += _node_requirements(
            f"{where}.preference.matchExpressions", (preferred.get("preference") or {}).get("matchExpressions") or []
        )
    for kind in ("podAffinity", "podAntiAffinity"):
        pods = affinity.get(kind) or {}
        terms = [
            (f"{path}.{kind}.requiredDuringSchedulingIgnoredDuringExecution[{i}]", t)
            for i, t in enumerate(pods.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
        ]
        for i, weighted in enumerate(pods.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
            where = f"{path}.{kind}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
            if not 1 <= int(weighted.get("weight") or 0) <= 100:
                errors.append((f"{where}.weight", _invalid(weighted.get("weight"), "must be in the range 1-100")))
            terms.append((f"{where}.podAffinityTerm", weighted.get("podAffinityTerm") or {}))
        for where, term in terms:
            if not term.get("topologyKey"):
                errors.append((f"{where}.topologyKey", "Required value: can not be empty"))
            else:
                errors += qualified_name(f"{where}.topologyKey", term["topologyKey"])
            errors += label_selector(f"{where}.labelSelector", term.get("labelSelector"))
    return errors


def pod_spec(path: str, spec: dict[str, Any]) -> Errors:
    """ValidatePodSpec for the fields the project's clients write."""
    errors: Errors = []
    containers = spec.get("containers") or []
    if not containers:
        errors.append((f"{path}.containers", "Required value"))
    volumes = spec.get("volumes") or []
    errors += _volumes(f"{path}.volumes", volumes)
    names = {str(v.get("name")) for v in volumes}
    for i, container in enumerate(containers):
        errors += _container(f"{path}.containers[{i}]", container, names)
    errors += _unique(f"{path}.containers", [c.get("name") for c in containers])
    for key in ("hostname", "subdomain"):
        if spec.get(key):
            errors += dns_label(f"{path}.{key}", spec[key])
    for key in ("serviceAccountName", "priorityClassName"):
        if spec.get(key):
            errors += dns_subdomain(f"{path}.{key}", spec[key])
    for i, secret in enumerate(spec.get("imagePullSecrets") or []):
        errors += dns_subdomain(f"{path}.imagePullSecrets[{i}].name", secret.get("name"))
    errors += labels(f"{path}.nodeSelector", spec.get("nodeSelector"))
    errors += _tolerations(f"{path}.tolerations", spec.get("tolerations") or [])
    if spec.get("affinity"):
        errors += _affinity(f"{path}.affinity", spec["affinity"])
    if spec.get("restartPolicy", "Always") not in ("Always", "OnFailure", "Never"):
        errors.append((f"{path}.restartPolicy", f"Unsupported value: {json.dumps(spec.get('restartPolicy'))}"))
    grace = spec.get("terminationGracePeriodSeconds")
    if grace is not None and int(grace) < 0:
        errors.append((f"{path}.terminationGracePeriodSeconds", _invalid(grace, "must be greater than or equal to 0")))
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and not 1 <= int(deadline) <= 2**31 - 1:
        errors.append(
            (f"{path}.activeDeadlineSeconds", _invalid(deadline, "must be between 1 and 2147483647, inclusive"))
        )
    context = spec.get("securityContext") or {}
    for key in ("runAsUser", "runAsGroup", "fsGroup"):
        if key in context and not 0 <= int(context[key]) <= 2**31 - 1:
            errors.append((f"{path}.securityContext.{key}", _invalid(context[key], "must be between 0 and 2147483647")))
    return errors


# -- NetworkPolicy ---------------------------------------------------------------------------------
def _peers(path: str, peers: list[dict[str, Any]]) -> Errors:
    errors: Errors = []
    for i, peer in enumerate(peers):
        where = f"{path}[{i}]"
        selectors = [k for k in ("podSelector", "namespaceSelector") if k in peer]
        if "ipBlock" in peer and selectors:
            errors.append((where, "Forbidden: may not specify both ipBlock and another peer"))
        elif "ipBlock" not in peer and not selectors:
            errors.append((where, "Required value: must specify a peer"))
        for key in selectors:
            errors += label_selector(f"{where}.{key}", peer[key])
        block = peer.get("ipBlock")
        if block is not None:
            try:
                cidr = ipaddress.ip_network(str(block.get("cidr")), strict=False)
            except ValueError:
                errors.append(
                    (
                        f"{where}.ipBlock.cidr",
                        _invalid(block.get("cidr"), "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"),
                    )
                )
                continue
            for j, excepted in enumerate(block.get("except") or []):
                try:
                    inner = ipaddress.ip_network(str(excepted), strict=False)
                except ValueError:
                    errors.append((f"{where}.ipBlock.except[{j}]", _invalid(excepted, "must be a valid CIDR value")))
                    continue
                if inner.version != cidr.version or not inner.subnet_of(cidr) or inner == cidr:  # type: ignore[arg-type]
                    errors.append(
                        (f"{where}.ipBlock.except[{j}]", _invalid(excepted, "must be a strict subset of `cidr`"))
                    )
    return errors


def _policy_ports(path: str, ports: list[dict[str, Any]]) -> Errors:
    errors: Errors = []
    for i, port in enumerate(ports):
        where = f"{path}[{i}]"
        if port.get("protocol", "TCP") not in ("TCP", "UDP", "SCTP"):
            errors.append(
                (
                    f"{where}.protocol",
                    f'Unsupported value: {json.dumps(port.get("protocol"))}: supported values: "SCTP", "TCP", "UDP"',
                )
            )
        if "port" in port:
            errors += _port(f"{where}.port", port["port"])
        end = port.get("endPort")
        if end is not None:
            start = port.get("port")
            if not isinstance(start, int):
                errors.append((f"{where}.endPort", "Required value: may not be specified when `port` is not a number"))
            elif not isinstance(end, int) or end < start or end > 65535:
                errors.append((f"{where}.endPort", _invalid(end, "must be greater than or equal to `port`")))
    return errors


def network_policy(spec: dict[str, Any]) -> Errors:
    """ValidateNetworkPolicySpec."""
    if "podSelector" not in spec:
        return [("spec.podSelector", "Required value")]
    errors = label_selector("spec.podSelector", spec.get("podSelector"))
    for i, rule in enumerate(spec.get("ingress") or []):
        errors += _policy_ports(f"spec.ingress[{i}].ports", rule.get("ports") or [])
        errors += _peers(f"spec.ingress[{i}].from", rule.get("from") or [])
    for i, rule in enumerate(spec.get("egress") or []):
        errors += _policy_ports(f"spec.egress[{i}].ports", rule.get("ports") or [])
        errors += _peers(f"spec.egress[{i}].to", rule.get("to") or [])
    types = spec.get("policyTypes") or []
    for i, kind in enumerate(types):
        if kind not in ("Ingress", "Egress"):
            errors.append(
                (
                    f"spec.policyTypes[{i}]",
                    f'Unsupported value: {json.dumps(kind)}: supported values: "Egress", "Ingress"',
                )
            )
    if len(types) > 2:
        errors.append(("spec.policyTypes", _invalid(types, "may not specify more than two policyTypes")))
    return errors
