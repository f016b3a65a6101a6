"""The per-role pod template: what users may add to the worker and parameter server pods.

Shaped like a Kubernetes PodTemplateSpec (``metadata`` + ``spec`` with one ``containers`` entry named
``trainer``), as Kubeflow's TFJob and JobSet users write it, but a subset: only what a platform team
needs (a service account for Workload Identity, env and envFrom, volumes and their mounts, labels and
annotations, a priority class, image pull secrets, node placement extras, the UIDs the image runs as).
The operator merges it under what ttj owns (its labels, TF_CONFIG and its other env, its volumes and
mounts, GPU and node placement, the security context of the restricted profile); an override of any of
those makes the job ``Invalid``. Field descriptions are ``kubectl explain`` text.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from ttj_contract import CONTAINER_NAME
from ttj_contract.quantity import parse_quantity

#: A Kubernetes quantity as a string (no sign: requests, limits and sizes are never negative).
QUANTITY_PATTERN = r"^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE][+]?[0-9]{1,2}))?$"
#: The largest quantity the API server accepts (its int64 scaled value, in units).
MAX_QUANTITY = Decimal(2**63 - 1) / 1000

#: Kubernetes name rules, as the API server checks them.
DNS_1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
#: A label or annotation key: an optional DNS subdomain prefix and '/', then a name of at most 63 characters.
QUALIFIED_NAME = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
ENV_VAR_NAME = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
#: Resources a container of a ttj pod may request; nvidia.com/gpu is ttj's (workers.gpusPerWorker).
RESOURCE_NAMES = ("cpu", "memory", "ephemeral-storage")


def quantity_value(value: int | str) -> Decimal:
    """A quantity's value in units; ValueError when it is none or out of the API server's range."""
    number = parse_quantity(value)
    if number < 0 or number > MAX_QUANTITY:
        raise ValueError(f"quantity {value!r} is out of range (0 to {MAX_QUANTITY:.0f})")
    return number


#: A Kubernetes quantity ("500m", "2Gi") or a plain integer, never negative.
Quantity = Annotated[
    Annotated[int, Field(ge=0, le=2**53)] | Annotated[str, Field(pattern=QUANTITY_PATTERN, max_length=64)],
    Field(json_schema_extra={"x-kubernetes-int-or-string": True}),
]


def _cel_string(text: str) -> str:
    """``text`` inside a single-quoted CEL string literal."""
    return text.replace("\\", "\\\\").replace("'", "\\'")


#: CEL: a path with no '..' element.
NO_DOT_DOT = "!self.matches('(^|/)[.][.](/|$)')"


def cel(*rules: tuple[str, str]) -> dict[str, Any]:
    """CEL rules for ``x-kubernetes-validations``, each with the message users see."""
    return {"x-kubernetes-validations": [{"rule": rule, "message": message} for rule, message in rules]}


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


LabelValue = Annotated[str, Field(max_length=63, pattern=LABEL_VALUE)]


def _qualified_keys(what: str) -> Any:
    """A map's keys are qualified names (an optional DNS prefix and '/', then a name): refused by the API
    server's CEL rule and, for clusters without CEL, by the models."""

    def check(mapping: dict[str, Any]) -> dict[str, Any]:
        for key in mapping:
            if len(key) > 317 or not re.match(QUALIFIED_NAME, key):
                raise ValueError(f"{what} key {key!r} is not a qualified name (an optional DNS prefix and '/', a name)")
        return mapping

    rule = f"self.all(k, size(k) <= 317 && k.matches('{_cel_string(QUALIFIED_NAME)}'))"
    return (AfterValidator(check), Field(json_schema_extra=cel((rule, f"{what} keys must be qualified names"))))


Labels = Annotated[dict[str, LabelValue], Field(max_length=64), *_qualified_keys("label")]
#: Node labels a pod's node must carry.
NodeSelector = Annotated[dict[str, LabelValue], Field(max_length=32), *_qualified_keys("node label")]
Annotations = Annotated[
    dict[str, Annotated[str, Field(max_length=65536)]], Field(max_length=64), *_qualified_keys("annotation")
]


class PodMetadata(_Model):
    """Labels and annotations added to the role's pods (ttj's own, under transient.training/, are refused)."""

    labels: Labels | None = Field(default=None, description="Labels added to the pods.")
    annotations: Annotations | None = Field(
        default=None, description="Annotations added to the pods (e.g. for a service mesh or a log agent)."
    )


class ResourceRequirements(_Model):
    """Compute resources of a container, as in a Pod's ``resources``: cpu, memory, ephemeral-storage."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            (
                "!has(self.requests) || self.requests.all(k, k in ['cpu', 'memory', 'ephemeral-storage'])",
                "requests may name cpu, memory and ephemeral-storage (GPUs: workers.gpusPerWorker)",
            ),
            (
                "!has(self.limits) || self.limits.all(k, k in ['cpu', 'memory', 'ephemeral-storage'])",
                "limits may name cpu, memory and ephemeral-storage (GPUs: workers.gpusPerWorker)",
            ),
        )
    )

    requests: Annotated[dict[str, Quantity], Field(max_length=3)] | None = Field(
        default=None,
        description="Minimum resources the container needs, e.g. {cpu: 500m, memory: 2Gi}. Without a cpu or "
        "memory request (or limit), ttj requests a default so that namespaces with a ResourceQuota accept the pods.",
    )
    limits: Annotated[dict[str, Quantity], Field(max_length=3)] | None = Field(
        default=None,
        description="Maximum resources the container may use; a request may not exceed its limit. For workers, "
        "nvidia.com/gpu is set from gpusPerWorker and may not be given here.",
    )

    @model_validator(mode="after")
    def _valid(self) -> ResourceRequirements:
        for part in (self.requests, self.limits):
            for name, value in (part or {}).items():
                if name not in RESOURCE_NAMES:
                    raise ValueError(
                        f"resource {name!r} is not one of {', '.join(RESOURCE_NAMES)} "
                        "(GPUs come from workers.gpusPerWorker)"
                    )
                quantity_value(value)
        for name, request in (self.requests or {}).items():
            limit = (self.limits or {}).get(name)
            if limit is not None and quantity_value(request) > quantity_value(limit):
                raise ValueError(f"the {name} request {request!r} exceeds its limit {limit!r}")
        return self


class Toleration(_Model):
    """A Pod toleration."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            (
                "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
                "a toleration with operator Exists takes no value",
            ),
            (
                "has(self.key) && self.key != '' || (has(self.operator) && self.operator == 'Exists')",
                "a toleration without a key needs operator Exists",
            ),
            (
                "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
                "tolerationSeconds needs effect NoExecute",
            ),
        )
    )

    key: str | None = Field(
        default=None, max_length=317, description="Taint key the toleration applies to; empty matches all keys."
    )
    operator: Literal["Exists", "Equal"] | None = Field(
        default=None, description="Exists or Equal (the default) between key and value."
    )
    value: LabelValue | None = Field(default=None, description="Taint value to match when operator is Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to match; empty matches all effects."
    )
    toleration_seconds: int | None = Field(
        default=None,
        ge=-(2**53),
        le=2**53,
        description="How long a NoExecute taint is tolerated before eviction, in seconds.",
    )

    @model_validator(mode="after")
    def _valid(self) -> Toleration:
        if self.key and not re.match(QUALIFIED_NAME, self.key):
            raise ValueError(f"toleration key {self.key!r} is not a qualified name")
        if self.operator == "Exists" and self.value:
            raise ValueError("a toleration with operator Exists takes no value")
        if not self.key and self.operator != "Exists":
            raise ValueError("a toleration without a key needs operator Exists")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds needs effect NoExecute")
        return self


# -- env ---------------------------------------------------------------------------------------------
class KeySelector(_Model):
    """A key of a ConfigMap or Secret in the pod's namespace."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS_1123_SUBDOMAIN, description="The object's name.")
    key: str = Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$", description="The key to read.")
    optional: bool | None = Field(default=None, description="Whether a missing object or key is allowed.")


class FieldSelector(_Model):
    """A field of the pod, as the downward API reads it."""

    field_path: Literal[
        "metadata.name",
        "metadata.namespace",
        "metadata.uid",
        "spec.nodeName",
        "spec.serviceAccountName",
        "status.hostIP",
        "status.podIP",
    ] = Field(description="The pod field to read.")


class EnvVarSource(_Model):
    """Where an environment variable's value comes from: exactly one of the sources."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            (
                "[has(self.configMapKeyRef), has(self.secretKeyRef), has(self.fieldRef)].filter(x, x).size() == 1",
                "valueFrom takes exactly one of configMapKeyRef, secretKeyRef, fieldRef",
            )
        )
    )

    config_map_key_ref: KeySelector | None = Field(default=None, description="A key of a ConfigMap.")
    secret_key_ref: KeySelector | None = Field(default=None, description="A key of a Secret.")
    field_ref: FieldSelector | None = Field(default=None, description="A field of the pod.")

    @model_validator(mode="after")
    def _one(self) -> EnvVarSource:
        if sum(x is not None for x in (self.config_map_key_ref, self.secret_key_ref, self.field_ref)) != 1:
            raise ValueError("valueFrom takes exactly one of configMapKeyRef, secretKeyRef, fieldRef")
        return self


class EnvVar(_Model):
    """An environment variable of the trainer container; ttj's own (TF_CONFIG, TTJ_*, POD_*) are refused."""

    model_config = ConfigDict(
        json_schema_extra=cel(("!has(self.value) || !has(self.valueFrom)", "env takes value or valueFrom, not both"))
    )

    name: str = Field(min_length=1, max_length=256, pattern=ENV_VAR_NAME, description="The variable's name.")
    value: str | None = Field(default=None, max_length=32768, description="The value.")
    value_from: EnvVarSource | None = Field(default=None, description="Where the value comes from instead.")

    @model_validator(mode="after")
    def _one(self) -> EnvVar:
        if self.value is not None and self.value_from is not None:
            raise ValueError(f"env {self.name}: value or valueFrom, not both")
        return self


class ObjectRef(_Model):
    """A ConfigMap or Secret in the pod's namespace."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS_1123_SUBDOMAIN, description="Its name.")
    optional: bool | None = Field(default=None, description="Whether it may be missing.")


class EnvFromSource(_Model):
    """Every key of a ConfigMap or a Secret as environment variables; ttj's own variables still win."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            (
                # not has(...) != has(...): kube prices == and != on values of unknown size (has() gives
                # one) at 2**64 / 10, over any budget; a conditional costs 1
                "has(self.configMapRef) ? !has(self.secretRef) : has(self.secretRef)",
                "envFrom takes exactly one of configMapRef, secretRef",
            )
        )
    )

    prefix: str | None = Field(
        default=None, max_length=253, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$", description="Put before every name."
    )
    config_map_ref: ObjectRef | None = Field(default=None, description="The ConfigMap.")
    secret_ref: ObjectRef | None = Field(default=None, description="The Secret.")

    @model_validator(mode="after")
    def _one(self) -> EnvFromSource:
        if (self.config_map_ref is None) == (self.secret_ref is None):
            raise ValueError("envFrom takes exactly one of configMapRef, secretRef")
        return self


# -- volumes -----------------------------------------------------------------------------------------
class KeyToPath(_Model):
    """One key of a ConfigMap or Secret as a file."""

    key: str = Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$", description="The key.")
    path: str = Field(
        min_length=1,
        max_length=1024,
        pattern=r"^[^/]",
        description="Relative file path, at most 1024 characters (no '..' element).",
        json_schema_extra=cel((NO_DOT_DOT, "path may not contain '..'")),
    )

    @model_validator(mode="after")
    def _relative(self) -> KeyToPath:
        if ".." in self.path.split("/"):
            raise ValueError(f"path {self.path!r} may not contain '..'")
        return self


class ConfigMapVolume(_Model):
    """A ConfigMap's keys as files."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS_1123_SUBDOMAIN, description="The ConfigMap.")
    items: Annotated[list[KeyToPath], Field(max_length=64)] | None = Field(
        default=None, description="The keys to project (at most 64); all when empty."
    )
    default_mode: int | None = Field(default=None, ge=0, le=0o777, description="File mode bits (0-0777).")
    optional: bool | None = Field(default=None, description="Whether the ConfigMap may be missing.")


class SecretVolume(_Model):
    """A Secret's keys as files."""

    secret_name: str = Field(min_length=1, max_length=253, pattern=DNS_1123_SUBDOMAIN, description="The Secret.")
    items: Annotated[list[KeyToPath], Field(max_length=64)] | None = Field(
        default=None, description="The keys to project (at most 64); all when empty."
    )
    default_mode: int | None = Field(default=None, ge=0, le=0o777, description="File mode bits (0-0777).")
    optional: bool | None = Field(default=None, description="Whether the Secret may be missing.")


class EmptyDirVolume(_Model):
    """A scratch directory that lives as long as the pod."""

    medium: Literal["", "Memory"] | None = Field(default=None, description="'' (node disk) or Memory (tmpfs).")
    size_limit: Quantity | None = Field(default=None, description="Largest size, e.g. 10Gi.")

    @model_validator(mode="after")
    def _size(self) -> EmptyDirVolume:
        if self.size_limit is not None:
            quantity_value(self.size_limit)
        return self


class ClaimVolume(_Model):
    """A PersistentVolumeClaim in the pod's namespace."""

    claim_name: str = Field(min_length=1, max_length=253, pattern=DNS_1123_SUBDOMAIN, description="The claim.")
    read_only: bool | None = Field(default=None, description="Mount it read-only.")


class CsiVolume(_Model):
    """An inline CSI volume, e.g. Cloud Storage FUSE (driver gcsfuse.csi.storage.gke.io)."""

    driver: str = Field(min_length=1, max_length=63, pattern=DNS_1123_SUBDOMAIN, description="The CSI driver.")
    read_only: bool | None = Field(default=None, description="Mount it read-only.")
    volume_attributes: Annotated[dict[str, Annotated[str, Field(max_length=4096)]], Field(max_length=32)] | None = (
        Field(default=None, description="Driver-specific settings (e.g. bucketName).")
    )


class Volume(_Model):
    """A volume of the role's pods: exactly one source. Names ttj uses itself are refused."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            (
                "[has(self.emptyDir), has(self.configMap), has(self.secret), has(self.persistentVolumeClaim), "
                "has(self.csi)].filter(x, x).size() == 1",
                "a volume takes exactly one of emptyDir, configMap, secret, persistentVolumeClaim, csi",
            )
        )
    )

    name: str = Field(min_length=1, max_length=63, pattern=DNS_1123_LABEL, description="The volume's name.")
    empty_dir: EmptyDirVolume | None = Field(default=None, description="A scratch directory.")
    config_map: ConfigMapVolume | None = Field(default=None, description="A ConfigMap's keys as files.")
    secret: SecretVolume | None = Field(default=None, description="A Secret's keys as files.")
    persistent_volume_claim: ClaimVolume | None = Field(default=None, description="A PersistentVolumeClaim.")
    csi: CsiVolume | None = Field(default=None, description="An inline CSI volume (e.g. Cloud Storage FUSE).")

    @model_validator(mode="after")
    def _one(self) -> Volume:
        sources = (self.empty_dir, self.config_map, self.secret, self.persistent_volume_claim, self.csi)
        if sum(s is not None for s in sources) != 1:
            raise ValueError(
                f"volume {self.name}: exactly one of emptyDir, configMap, secret, persistentVolumeClaim, csi"
            )
        return self


class VolumeMount(_Model):
    """Where a volume appears in the trainer container; ttj's own mount points are refused."""

    name: str = Field(min_length=1, max_length=63, pattern=DNS_1123_LABEL, description="The volume's name.")
    mount_path: str = Field(
        min_length=2,
        max_length=1024,
        pattern=r"^/[^:]*$",
        description="Absolute path in the container, at most 1024 characters (no ':').",
        json_schema_extra=cel((NO_DOT_DOT, "mountPath may not contain '..'")),
    )
    read_only: bool | None = Field(default=None, description="Mount it read-only.")
    sub_path: str | None = Field(
        default=None,
        max_length=1024,
        pattern=r"^([^/].*)?$",
        description="A path inside the volume, at most 1024 characters (relative, no '..').",
        json_schema_extra=cel((NO_DOT_DOT, "subPath may not contain '..'")),
    )

    @model_validator(mode="after")
    def _paths(self) -> VolumeMount:
        for what, path in (("mountPath", self.mount_path), ("subPath", self.sub_path or "")):
            if ".." in path.split("/"):
                raise ValueError(f"{what} {path!r} may not contain '..'")
        return self


# -- placement ---------------------------------------------------------------------------------------
class NodeSelectorRequirement(_Model):
    """A node label compared with values."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            (
                "self.operator in ['In', 'NotIn'] ? has(self.values) && size(self.values) > 0 : "
                "self.operator in ['Exists', 'DoesNotExist'] ? !has(self.values) || size(self.values) == 0 : "
                "has(self.values) && size(self.values) == 1",
                "In/NotIn need values, Exists/DoesNotExist none, Gt/Lt exactly one",
            )
        )
    )

    key: str = Field(min_length=1, max_length=317, pattern=QUALIFIED_NAME, description="The node label.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"] = Field(description="The comparison.")
    values: Annotated[list[Annotated[LabelValue, Field(description="A value.")]], Field(max_length=64)] | None = Field(
        default=None, description="The values."
    )

    @model_validator(mode="after")
    def _values(self) -> NodeSelectorRequirement:
        count = len(self.values or [])
        if self.operator in ("In", "NotIn") and count == 0:
            raise ValueError(f"{self.key}: operator {self.operator} needs values")
        if self.operator in ("Exists", "DoesNotExist") and count:
            raise ValueError(f"{self.key}: operator {self.operator} takes no values")
        one_integer = count == 1 and (self.values or [""])[0].lstrip("-").isdigit()
        if self.operator in ("Gt", "Lt") and not one_integer:
            raise ValueError(f"{self.key}: operator {self.operator} needs one integer value")
        return self


class NodeSelectorTerm(_Model):
    """Node label requirements, all of which must hold."""

    match_expressions: Annotated[list[NodeSelectorRequirement], Field(min_length=1, max_length=16)] = Field(
        description="The requirements."
    )


class PreferredTerm(_Model):
    """A node preference with its weight."""

    weight: int = Field(ge=1, le=100, description="1-100; higher counts more.")
    preference: NodeSelectorTerm = Field(description="The preferred nodes.")


class RequiredNodes(_Model):
    """Nodes the pod must run on: any of the terms."""

    node_selector_terms: Annotated[list[NodeSelectorTerm], Field(min_length=1, max_length=8)] = Field(
        description="Terms, of which one must hold (ttj's own requirements are added to each)."
    )


class NodeAffinity(_Model):
    """Node affinity added to ttj's placement (ttj's requirements are added to every required term)."""

    required_during_scheduling_ignored_during_execution: RequiredNodes | None = Field(
        default=None, description="Nodes the pod must run on."
    )
    preferred_during_scheduling_ignored_during_execution: (
        Annotated[list[PreferredTerm], Field(max_length=16)] | None
    ) = Field(default=None, description="Nodes the pod prefers.")


class LabelSelector(_Model):
    """Pods with these labels."""

    match_labels: Labels | None = Field(default=None, description="Labels the pods must carry.")


class PodAffinityTerm(_Model):
    """Pods matched by a selector within a topology domain."""

    label_selector: LabelSelector = Field(description="The pods.")
    topology_key: str = Field(
        min_length=1,
        max_length=317,
        pattern=QUALIFIED_NAME,
        description="Node label of the domain, e.g. kubernetes.io/hostname.",
    )


class WeightedPodAffinityTerm(_Model):
    """A pod (anti-)affinity preference with its weight."""

    weight: int = Field(ge=1, le=100, description="1-100; higher counts more.")
    pod_affinity_term: PodAffinityTerm = Field(description="The term.")


class PodAffinity(_Model):
    """Run near (affinity) or away from (anti-affinity) other pods."""

    required_during_scheduling_ignored_during_execution: (
        Annotated[list[PodAffinityTerm], Field(max_length=8)] | None
    ) = Field(default=None, description="Terms that must hold.")
    preferred_during_scheduling_ignored_during_execution: (
        Annotated[list[WeightedPodAffinityTerm], Field(max_length=8)] | None
    ) = Field(default=None, description="Terms preferred.")


class Affinity(_Model):
    """Scheduling constraints added to ttj's own."""

    node_affinity: NodeAffinity | None = Field(default=None, description="Node affinity.")
    pod_affinity: PodAffinity | None = Field(default=None, description="Pod affinity.")
    pod_anti_affinity: PodAffinity | None = Field(default=None, description="Pod anti-affinity.")


class PodSecurity(_Model):
    """The UIDs and GIDs the pods run as; the rest of the securityContext is ttj's (Pod Security restricted)."""

    run_as_user: int | None = Field(
        default=None, ge=1, le=2**31 - 1, description="UID the containers run as (never 0: the pods are non-root)."
    )
    run_as_group: int | None = Field(default=None, ge=0, le=2**31 - 1, description="GID the containers run as.")
    fs_group: int | None = Field(
        default=None,
        ge=0,
        le=2**31 - 1,
        description="GID that owns the volumes (for a PVC the image's user must write).",
    )
    supplemental_groups: (
        Annotated[list[Annotated[int, Field(ge=0, le=2**31 - 1, description="A GID.")]], Field(max_length=32)] | None
    ) = Field(default=None, description="More GIDs of the containers' processes.")


class LocalObjectReference(_Model):
    """An object in the pod's namespace, by name."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS_1123_SUBDOMAIN, description="Its name.")


def _is_trainer(name: str) -> str:
    if name != CONTAINER_NAME:
        raise ValueError(f"must be {CONTAINER_NAME!r}, the trainer container's name")
    return name


class ContainerTemplate(_Model):
    """Additions to the trainer container (image, command, ports and resources are ttj's)."""

    name: Annotated[str, AfterValidator(_is_trainer)] = Field(
        default=CONTAINER_NAME,
        description=f"Always {CONTAINER_NAME}: the one container of ttj's pods.",
        json_schema_extra={"enum": [CONTAINER_NAME]},
    )
    env: Annotated[list[EnvVar], Field(max_length=128)] | None = Field(
        default=None,
        description=(
            "Environment variables (at most 128); ttj's own (TF_CONFIG, TTJ_*, POD_NAME, POD_NAMESPACE, POD_IP) "
            "are refused."
        ),
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    env_from: Annotated[list[EnvFromSource], Field(max_length=16)] | None = Field(
        default=None, description="ConfigMaps and Secrets whose keys become environment variables (at most 16)."
    )
    volume_mounts: Annotated[list[VolumeMount], Field(max_length=32)] | None = Field(
        default=None,
        description="Mounts of the template's volumes (at most 32); ttj's own mount points are refused.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["mountPath"]},
    )


class RolePodSpec(_Model):
    """Additions to the role's pod spec."""

    service_account_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=DNS_1123_SUBDOMAIN,
        description="Service account of the pods (e.g. one bound to a Google service account by Workload "
        "Identity). ttj grants it access to the job's chief Lease; without it, ttj's NAME-trainer account is used.",
    )
    priority_class_name: str | None = Field(
        default=None, max_length=253, pattern=DNS_1123_SUBDOMAIN, description="PriorityClass of the pods."
    )
    image_pull_secrets: Annotated[list[LocalObjectReference], Field(max_length=16)] | None = Field(
        default=None, description="Secrets to pull the trainer image with (at most 16)."
    )
    node_selector: NodeSelector | None = Field(
        default=None,
        description="Extra node labels the pods' nodes must carry; ttj's own (spot, preemptible, accelerator) "
        "are refused.",
    )
    tolerations: Annotated[list[Toleration], Field(max_length=32)] | None = Field(
        default=None, description="Extra tolerations (at most 32), added to ttj's."
    )
    affinity: Affinity | None = Field(default=None, description="Extra affinity, combined with ttj's placement.")
    security_context: PodSecurity | None = Field(default=None, description="UIDs and GIDs of the pods.")
    volumes: Annotated[list[Volume], Field(max_length=32)] | None = Field(
        default=None,
        description="Volumes of the pods (at most 32); names ttj uses are refused.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    containers: Annotated[list[ContainerTemplate], Field(max_length=1)] | None = Field(
        default=None, description="One entry, named trainer: additions to the trainer container."
    )

    @model_validator(mode="after")
    def _consistent(self) -> RolePodSpec:
        names = [v.name for v in self.volumes or []]
        if len(set(names)) != len(names):
            raise ValueError("volume names must be unique")
        container = (self.containers or [ContainerTemplate()])[0]
        env = [e.name for e in container.env or []]
        if len(set(env)) != len(env):
            raise ValueError("env names must be unique")
        paths = [m.mount_path.rstrip("/") for m in container.volume_mounts or []]
        if len(set(paths)) != len(paths):
            raise ValueError("mountPath must be unique")
        for mount in container.volume_mounts or []:
            if mount.name not in names:
                raise ValueError(f"volumeMount {mount.mount_path} names volume {mount.name!r}, not in spec.volumes")
        return self


class PodTemplate(_Model):
    """What to add to the role's pods, shaped like a PodTemplateSpec."""

    metadata: PodMetadata | None = Field(default=None, description="Labels and annotations of the pods.")
    spec: RolePodSpec | None = Field(default=None, description="Additions to the pod spec.")

    @property
    def container(self) -> ContainerTemplate:
        """The trainer container's additions (empty when the template has none)."""
        containers = (self.spec.containers if self.spec else None) or [ContainerTemplate()]
        return containers[0]
