"""The access-review APIs of ``authorization.k8s.io/v1`` (what ``kubectl auth can-i`` asks): SelfSubjectAccessReview
(may I?), SubjectAccessReview (may this user?, cluster-wide) and LocalSubjectAccessReview (the same, in one
namespace), answered by the server's own authorizer; nothing is stored."""

from __future__ import annotations

import copy
from typing import Any

from .access import AccessControl
from .errors import bad_request, invalid
from .identity import CURRENT_USER, UserInfo
from .requestinfo import RequestAttributes

GROUP = "authorization.k8s.io"
KINDS = {
    "selfsubjectaccessreviews": "SelfSubjectAccessReview",
    "subjectaccessreviews": "SubjectAccessReview",
    "localsubjectaccessreviews": "LocalSubjectAccessReview",
}


def review(access: AccessControl, plural: str, namespace: str, body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise bad_request("the body of the request must be a JSON object")
    kind = KINDS[plural]
    spec = body.get("spec") or {}
    if plural == "selfsubjectaccessreviews":
        user = CURRENT_USER.get() or UserInfo("system:anonymous")
    else:
        if not spec.get("user") and not spec.get("groups"):
            raise invalid(
                kind, GROUP, "", [("spec.user", 'Invalid value: "": at least one of user or group must be specified')]
            )
        user = UserInfo(str(spec.get("user") or ""), tuple(spec.get("groups") or ()))
    resource, non_resource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if bool(resource) == bool(non_resource):
        raise invalid(
            kind,
            GROUP,
            "",
            [
                (
                    "spec.resourceAttributes",
                    "Invalid value: exactly one of nonResourceAttributes or resourceAttributes must be specified",
                )
            ],
        )
    if resource:
        attributes = RequestAttributes(
            verb=str(resource.get("verb") or ""),
            path="",
            resource_request=True,
            api_group=str(resource.get("group") or ""),
            api_version=str(resource.get("version") or ""),
            namespace=namespace or str(resource.get("namespace") or ""),
            resource=str(resource.get("resource") or ""),
            subresource=str(resource.get("subresource") or ""),
            name=str(resource.get("name") or ""),
        )
    else:
        assert isinstance(non_resource, dict)
        attributes = RequestAttributes(
            verb=str(non_resource.get("verb") or ""), path=str(non_resource.get("path") or ""), resource_request=False
        )
    allowed, reason = (True, "") if not access.enforcing else access.rbac.authorize(user, attributes)
    answer = copy.deepcopy(body)
    answer.update({"apiVersion": f"{GROUP}/v1", "kind": kind})
    answer.setdefault("metadata", {})["creationTimestamp"] = None
    answer["status"] = {"allowed": allowed, **({"reason": reason} if reason else {})}
    return answer
