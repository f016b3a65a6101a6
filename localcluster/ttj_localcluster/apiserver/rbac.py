"""Role-based access control as kube-apiserver's RBAC authorizer and its rbac.authorization.k8s.io storage do it.

:class:`RbacAuthorizer` decides a request from the Roles, ClusterRoles, RoleBindings and ClusterRoleBindings in
the store: ClusterRoleBindings grant their ClusterRole's rules everywhere (non-resource URLs included), a
RoleBinding grants its Role's or ClusterRole's resource rules in its own namespace. Rules match on verbs,
apiGroups, resources (``*``, ``resource/subresource``, ``*/subresource``), resourceNames and nonResourceURLs
(exact or ``prefix/*``); ``system:masters`` is always allowed. :func:`check_escalation` refuses a Role or
ClusterRole that grants more than its author holds, and a binding to a role whose rules its author does not hold,
unless the author has ``escalate`` (roles) or ``bind`` (bindings) on that role, as kube does.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .errors import ApiError
from .identity import AUTHENTICATED, MASTERS, UNAUTHENTICATED, UserInfo
from .requestinfo import RequestAttributes
from .resources import StorageKey
from .store import Store

GROUP = "rbac.authorization.k8s.io"
ROLES: StorageKey = (GROUP, "roles")
CLUSTER_ROLES: StorageKey = (GROUP, "clusterroles")
ROLE_BINDINGS: StorageKey = (GROUP, "rolebindings")
CLUSTER_ROLE_BINDINGS: StorageKey = (GROUP, "clusterrolebindings")
Rule = dict[str, Any]


@dataclass
class RuleSet:
    """The rules a user holds in one scope, and why some could not be read (a binding to a missing role)."""

    rules: list[Rule] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


# -- matching ----------------------------------------------------------------------------------------


def _has(values: Iterable[str] | None, wanted: str) -> bool:
    values = list(values or [])
    return "*" in values or wanted in values


def _resource_matches(rule: Rule, resource: str, subresource: str) -> bool:
    combined = f"{resource}/{subresource}" if subresource else resource
    for candidate in rule.get("resources") or []:
        if candidate in ("*", combined):
            return True
        if subresource and candidate == f"*/{subresource}":
            return True
    return False


def _url_matches(pattern: str, path: str) -> bool:
    """A nonResourceURLs entry: ``*``, the path itself, or ``prefix*``."""
    return pattern in ("*", path) or (pattern.endswith("*") and path.startswith(pattern[:-1]))


def _non_resource_matches(rule: Rule, path: str) -> bool:
    return any(_url_matches(url, path) for url in rule.get("nonResourceURLs") or [])


def rule_allows(rule: Rule, request: RequestAttributes) -> bool:
    if not _has(rule.get("verbs"), request.verb):
        return False
    if not request.resource_request:
        return _non_resource_matches(rule, request.path)
    if not _has(rule.get("apiGroups"), request.api_group):
        return False
    if not _resource_matches(rule, request.resource, request.subresource):
        return False
    names = rule.get("resourceNames") or []
    return not names or request.name in names


def _subject_matches(subject: dict[str, Any], user: UserInfo, binding_namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return bool(name == user.name)
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return user.name == f"system:serviceaccount:{namespace}:{name}"
    return False


# -- the authorizer ----------------------------------------------------------------------------------


class RbacAuthorizer:
    def __init__(self, store: Store) -> None:
        self.store = store

    def role_rules(self, ref: dict[str, Any], namespace: str) -> tuple[list[Rule], str | None]:
        """The rules of the Role (in ``namespace``) or ClusterRole a roleRef names; or why there are none."""
        kind, name = ref.get("kind"), str(ref.get("name") or "")
        if kind == "ClusterRole":
            role = self.store.get(CLUSTER_ROLES, "", name)
            what = f'clusterrole.rbac.authorization.k8s.io "{name}" not found'
        else:
            role = self.store.get(ROLES, namespace, name)
            what = f'role.rbac.authorization.k8s.io "{name}" not found'
        if role is None:
            return [], what
        return list(role.get("rules") or []), None

    def _bindings(self, user: UserInfo, namespace: str | None) -> Iterator[tuple[dict[str, Any], str]]:
        """(roleRef, namespace it is read in) of every binding naming the user: cluster-wide first."""
        for binding in self.store.items(CLUSTER_ROLE_BINDINGS):
            if any(_subject_matches(s, user, "") for s in binding.get("subjects") or []):
                yield binding.get("roleRef") or {}, ""
        if namespace:
            for binding in self.store.items(ROLE_BINDINGS, namespace):
                if any(_subject_matches(s, user, namespace) for s in binding.get("subjects") or []):
                    yield binding.get("roleRef") or {}, namespace

    def rules_for(self, user: UserInfo, namespace: str | None) -> RuleSet:
        """Every rule the user holds in ``namespace`` (None or "": cluster-wide rules only)."""
        held = RuleSet()
        for ref, scope in self._bindings(user, namespace):
            rules, error = self.role_rules(ref, scope)
            if error:
                held.errors.append(error)
            elif scope:
                held.rules.extend(r for r in rules if not r.get("nonResourceURLs"))
            else:
                held.rules.extend(rules)
        return held

    def authorize(self, user: UserInfo, request: RequestAttributes) -> tuple[bool, str]:
        """(allowed, the reason kube appends to a denial: the role lookups that failed, if any)."""
        if user.is_superuser:
            return True, ""
        held = self.rules_for(user, request.namespace if request.resource_request else None)
        if any(rule_allows(rule, request) for rule in held.rules):
            return True, ""
        if not held.errors:
            return False, ""
        errors = held.errors
        return False, "RBAC: " + (errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")


def forbidden_message(user: UserInfo, request: RequestAttributes) -> str:
    """kube-apiserver's words for a denial, without the ``<resource> "<name>" is forbidden:`` lead."""
    if not request.resource_request:
        return f'User "{user.name}" cannot {request.verb} path "{request.path}"'
    what = (
        f'User "{user.name}" cannot {request.verb} resource "{request.resource_and_subresource}" '
        f'in API group "{request.api_group}"'
    )
    if request.namespace:
        return f'{what} in the namespace "{request.namespace}"'
    return f"{what} at the cluster scope"


def forbidden(group: str, resource: str, name: str, detail: str) -> ApiError:
    """403 Forbidden in kube's shape (``NewForbidden``)."""
    if not resource:
        message = f"forbidden: {detail}"
    else:
        qualified = f"{resource}.{group}" if group else resource
        message = f'{qualified} "{name}" is forbidden: {detail}' if name else f"{qualified} is forbidden: {detail}"
    return ApiError(403, "Forbidden", message, name=name or None, group=group, kind=resource or None)


# -- validation --------------------------------------------------------------------------------------


def validation_errors(kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> list[tuple[str, str]]:
    """kube's field errors for a Role, ClusterRole or binding: rules need verbs and say what they apply to, a
    Role cannot name non-resource URLs, a binding refers to a role kind it may and never changes its roleRef."""
    errors: list[tuple[str, str]] = []
    if kind in ("Role", "ClusterRole"):
        for index, rule in enumerate(obj.get("rules") or []):
            errors.extend(_rule_errors(f"rules[{index}]", rule, namespaced=kind == "Role"))
        return errors
    ref = obj.get("roleRef") or {}
    allowed = ["ClusterRole"] if kind == "ClusterRoleBinding" else ["Role", "ClusterRole"]
    if ref.get("apiGroup") != GROUP:
        errors.append(
            ("roleRef.apiGroup", f'Unsupported value: "{ref.get("apiGroup", "")}": supported values: "{GROUP}"')
        )
    if ref.get("kind") not in allowed:
        supported = ", ".join(f'"{k}"' for k in allowed)
        errors.append(("roleRef.kind", f'Unsupported value: "{ref.get("kind", "")}": supported values: {supported}'))
    if not ref.get("name"):
        errors.append(("roleRef.name", "Required value"))
    if old is not None and (old.get("roleRef") or {}) != ref:
        old_ref = old.get("roleRef") or {}
        shown = (
            f'rbac.RoleRef{{APIGroup:"{old_ref.get("apiGroup")}", Kind:"{old_ref.get("kind")}", '
            f'Name:"{old_ref.get("name")}"}}'
        )
        errors.append(("roleRef", f"Invalid value: {shown}: cannot change roleRef"))
    for index, subject in enumerate(obj.get("subjects") or []):
        where = f"subjects[{index}]"
        if subject.get("kind") not in ("User", "Group", "ServiceAccount"):
            errors.append(
                (
                    f"{where}.kind",
                    f'Unsupported value: "{subject.get("kind", "")}": '
                    'supported values: "ServiceAccount", "User", "Group"',
                )
            )
        if not subject.get("name"):
            errors.append((f"{where}.name", "Required value"))
        if subject.get("kind") == "ServiceAccount" and kind == "ClusterRoleBinding" and not subject.get("namespace"):
            errors.append((f"{where}.namespace", "Required value"))
    return errors


def _rule_errors(where: str, rule: dict[str, Any], namespaced: bool) -> list[tuple[str, str]]:
    errors = []
    if not rule.get("verbs"):
        errors.append((f"{where}.verbs", "Required value: verbs must contain at least one value"))
    urls = rule.get("nonResourceURLs") or []
    if urls and namespaced:
        errors.append(
            (f"{where}.nonResourceURLs", f"Invalid value: {urls}: namespaced rules cannot apply to non-resource URLs")
        )
    if urls and (rule.get("apiGroups") or rule.get("resources")):
        errors.append(
            (
                f"{where}.nonResourceURLs",
                f"Invalid value: {urls}: rules cannot apply to both regular resources and non-resource URLs",
            )
        )
    if not urls:
        if not rule.get("apiGroups"):
            errors.append((f"{where}.apiGroups", "Required value: resource rules must supply at least one api group"))
        if not rule.get("resources"):
            errors.append((f"{where}.resources", "Required value: resource rules must supply at least one resource"))
    return errors


# -- privilege escalation ----------------------------------------------------------------------------


def _atoms(rule: Rule) -> Iterator[tuple[str, str, str, str, str]]:
    """A rule broken into single permissions: (verb, group, resource, name, nonResourceURL)."""
    verbs = rule.get("verbs") or []
    if rule.get("nonResourceURLs"):
        for url in rule["nonResourceURLs"]:
            for verb in verbs:
                yield verb, "", "", "", url
        return
    for group in rule.get("apiGroups") or []:
        for resource in rule.get("resources") or []:
            for verb in verbs:
                for name in rule.get("resourceNames") or [""]:
                    yield verb, group, resource, name, ""


def _covers(owner: Rule, atom: tuple[str, str, str, str, str]) -> bool:
    verb, group, resource, name, url = atom
    if not _has(owner.get("verbs"), verb):
        return False
    if url:
        return any(_url_matches(pattern, url) for pattern in owner.get("nonResourceURLs") or [])
    if not _has(owner.get("apiGroups"), group):
        return False
    resources = owner.get("resources") or []
    sub = resource.partition("/")[2]
    if not ("*" in resources or resource in resources or (sub and f"*/{sub}" in resources)):
        return False
    names = owner.get("resourceNames") or []
    return not names or (bool(name) and name in names)


def missing_rules(held: list[Rule], granted: list[Rule]) -> list[Rule]:
    """The permissions in ``granted`` that no rule in ``held`` covers, one rule each, in kube's compact form."""
    missing = []
    for rule in granted:
        for atom in _atoms(rule):
            if not any(_covers(owner, atom) for owner in held):
                verb, group, resource, name, url = atom
                if url:
                    missing.append({"nonResourceURLs": [url], "verbs": [verb]})
                else:
                    piece: Rule = {"apiGroups": [group], "resources": [resource], "verbs": [verb]}
                    if name:
                        piece["resourceNames"] = [name]
                    missing.append(piece)
    return missing


def _compact(rule: Rule) -> str:
    def quoted(values: list[str]) -> str:
        return "[" + " ".join(f'"{v}"' for v in values) + "]"

    if "nonResourceURLs" in rule:
        return f"{{NonResourceURLs:{quoted(rule['nonResourceURLs'])}, Verbs:{quoted(rule['verbs'])}}}"
    text = f"{{APIGroups:{quoted(rule['apiGroups'])}, Resources:{quoted(rule['resources'])}"
    if rule.get("resourceNames"):
        text += f", ResourceNames:{quoted(rule['resourceNames'])}"
    return text + f", Verbs:{quoted(rule['verbs'])}}}"


def check_escalation(authorizer: RbacAuthorizer, user: UserInfo | None, kind: str, obj: dict[str, Any]) -> None:
    """Raise 403 if ``user`` may not write this Role, ClusterRole, RoleBinding or ClusterRoleBinding."""
    if user is None or user.is_superuser:
        return
    meta = obj.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    plural = {"Role": "roles", "ClusterRole": "clusterroles"}
    if kind in plural:
        granted = list(obj.get("rules") or [])
        waiver = RequestAttributes("escalate", "", True, GROUP, "v1", namespace, plural[kind], "", name)
    else:
        ref = obj.get("roleRef") or {}
        ref_plural = "clusterroles" if ref.get("kind") == "ClusterRole" else "roles"
        waiver = RequestAttributes("bind", "", True, GROUP, "v1", namespace, ref_plural, "", str(ref.get("name") or ""))
        granted, error = authorizer.role_rules(ref, namespace)
        if error and not authorizer.authorize(user, waiver)[0]:
            raise forbidden(GROUP, _binding_plural(kind), name, error)
    if authorizer.authorize(user, waiver)[0]:
        return
    held = authorizer.rules_for(user, namespace or None)
    missing = missing_rules(held.rules, granted)
    if not missing:
        return
    groups = "[" + " ".join(f'"{g}"' for g in user.groups) + "]"
    detail = (
        f'user "{user.name}" (groups={groups}) is attempting to grant RBAC permissions not currently held:\n'
        + "\n".join(_compact(r) for r in missing)
    )
    if held.errors:
        detail += "; resolution errors: [" + ", ".join(held.errors) + "]"
    resource = plural.get(kind) or _binding_plural(kind)
    raise forbidden(GROUP, resource, name, detail)


def _binding_plural(kind: str) -> str:
    return "clusterrolebindings" if kind == "ClusterRoleBinding" else "rolebindings"


# -- what every cluster starts with ------------------------------------------------------------------


def bootstrap_policy() -> list[tuple[StorageKey, dict[str, Any]]]:
    """The default ClusterRoles and ClusterRoleBindings this server's RBAC relies on, as kube-apiserver's
    bootstrap policy creates them: cluster-admin for system:masters, discovery and health for everyone."""
    discovery = [
        "/api",
        "/api/*",
        "/apis",
        "/apis/*",
        "/healthz",
        "/livez",
        "/openapi",
        "/openapi/*",
        "/readyz",
        "/version",
        "/version/",
    ]
    public = ["/healthz", "/livez", "/readyz", "/version", "/version/"]
    roles = {
        "cluster-admin": [
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
            {"nonResourceURLs": ["*"], "verbs": ["*"]},
        ],
        "system:discovery": [{"nonResourceURLs": discovery, "verbs": ["get"]}],
        "system:public-info-viewer": [{"nonResourceURLs": public, "verbs": ["get"]}],
        "system:basic-user": [
            {
                "apiGroups": ["authorization.k8s.io"],
                "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                "verbs": ["create"],
            }
        ],
    }
    bindings = {
        "cluster-admin": [MASTERS],
        "system:discovery": [AUTHENTICATED],
        "system:public-info-viewer": [AUTHENTICATED, UNAUTHENTICATED],
        "system:basic-user": [AUTHENTICATED],
    }
    labels = {"kubernetes.io/bootstrapping": "rbac-defaults"}
    annotations = {"rbac.authorization.kubernetes.io/autoupdate": "true"}
    objects: list[tuple[StorageKey, dict[str, Any]]] = []
    for name, rules in roles.items():
        meta = {"name": name, "labels": labels, "annotations": annotations}
        objects.append((CLUSTER_ROLES, {"metadata": meta, "rules": rules}))
    for name, groups in bindings.items():
        meta = {"name": name, "labels": labels, "annotations": annotations}
        subjects = [{"apiGroup": GROUP, "kind": "Group", "name": g} for g in groups]
        ref = {"apiGroup": GROUP, "kind": "ClusterRole", "name": name}
        objects.append((CLUSTER_ROLE_BINDINGS, {"metadata": meta, "roleRef": ref, "subjects": subjects}))
    return objects
