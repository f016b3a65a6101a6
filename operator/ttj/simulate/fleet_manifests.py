"""The plan of ``ttj simulate --plan`` as TransientTrainingJob manifests: worker groups in order of preference."""

from __future__ import annotations

import math
from typing import Any

import yaml

from ttj.api.models import TransientTrainingJob
from ttj.simulate.fleet_search import Mix, PlanContext, mix_job, preference_order
from ttj_contract import API_VERSION, KIND

GROUPS_NOTE = (
    "each group holds its planned count (maxReplicas); slots fill in the groups' order, so raise a group's "
    "maxReplicas to let it take slots another cannot fill"
)


def manifests(plan_mix: Mix, context: PlanContext, name: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(the job with worker groups in order of preference, the single-group job if the mix is uniform); both
    checked against the API model, so what is printed applies."""
    job = mix_job(context.template, plan_mix, context)
    spec = job.spec.model_dump(by_alias=True, exclude_none=True, mode="json")
    metadata = {"name": name}
    today = {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec} if plan_mix.uniform else None
    workers = {k: v for k, v in spec["workers"].items() if k not in ("acceleratorType", "provisioning", "maxReplicas")}
    workers["groups"] = [
        {
            "name": group.name,
            "acceleratorType": group.accelerator,
            "provisioning": group.provisioning,
            **({"zone": zone} if (zone := context.zones.zone_of(group.accelerator, group.provisioning)) else {}),
            "maxReplicas": group.count,
        }
        for group in preference_order(plan_mix, context)
    ]
    grouped = {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": {**spec, "workers": workers}}
    for manifest in (grouped, today):
        if manifest is not None:
            TransientTrainingJob.model_validate(manifest)
    return grouped, today


def deadline_spec(plan_mix: Mix, deadline_s: float | None) -> dict[str, Any] | None:
    """The ``spec.deadline`` that holds the planned job to the deadline it was planned for: the operator's deadline
    policy then adds on-demand catch-up workers (up to the plan's size, in its on-demand group when it has one)
    when spot falls short. None without a deadline, or for a plan without spot workers (nothing to catch up)."""
    if deadline_s is None or all(g.provisioning == "on-demand" for g in plan_mix.groups):
        return None
    spec: dict[str, Any] = {"completeWithinSeconds": math.ceil(deadline_s), "maxCatchUpWorkers": plan_mix.workers}
    on_demand = [g.name for g in plan_mix.groups if g.provisioning == "on-demand"]
    if on_demand:
        spec["catchUpGroup"] = on_demand[0]
    return spec


def manifests_yaml(grouped: dict[str, Any], today: dict[str, Any] | None) -> str:
    """The manifests as one YAML file: the grouped job, then the uniform one when there is one."""
    text = f"# {GROUPS_NOTE}\n---\n" + yaml.safe_dump(grouped, sort_keys=False)
    if today is not None:
        text += "# the same plan without worker groups (a uniform fleet)\n---\n"
        text += yaml.safe_dump(today, sort_keys=False)
    return text
