"""The operator end to end with a GKE custom compute class: ``ttj operator`` as a process on a local cluster whose
GPU pools serve one class (a spot L4 pool and an on-demand T4 pool, labelled and tainted with the class). The
class's active migration comes through the fleet's control endpoint: the cluster autoscaler drains a worker's
node (its taint, the Eviction API) and deletes it. The worker is replaced in its slot, the job says Migrated and
counts a migration, not a preemption.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import config
from tests.e2e.operator_identity import install_operator_identity
from tests.e2e.operator_support import ChiefHeartbeat, OperatorProcess, cluster_with_nodes, install_crd, wait_for
from tests.e2e.test_operator_recovery import (
    PREFIX,
    create_job,
    env,  # noqa: F401  (the fixture, over this module's stack)
    job_events,
    job_status,
    needs_control,
    running,
    slot_of,
    workers,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

CLASS = "flex"


def class_pools() -> list[Any]:
    from ttj_localcluster.nodes.pools import NodePool

    def gpu(name: str, accelerator: str, provisioning: str) -> NodePool:
        return NodePool(
            name=name,
            nodes=2,
            provisioning=provisioning,
            accelerator=accelerator,
            gpus=1,
            cpu="8",
            memory="30Gi",
            machine_type="g2-standard-8" if accelerator == "nvidia-l4" else "n1-standard-8",
            compute_class=CLASS,
        )

    return [
        NodePool(name="cpu-pool", nodes=2, cpu="8", memory="30Gi"),
        gpu("flex-l4", "nvidia-l4", "spot"),
        gpu("flex-t4", "nvidia-tesla-t4", "on-demand"),
    ]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    logs = tmp_path_factory.mktemp("operator")
    with cluster_with_nodes(class_pools()) as (kubeconfig, control, _access):
        api = config.new_client_from_config(config_file=kubeconfig)
        install_crd(api)
        operator_kubeconfig, _ = install_operator_identity(api, kubeconfig, logs)
        operator = OperatorProcess(operator_kubeconfig, f"{PREFIX}-*", logs)
        operator.start()
        try:
            with ChiefHeartbeat(api):
                yield {"api": api, "kubeconfig": kubeconfig, "control": control, "operator": operator}
        finally:
            operator.kill()
            for log in sorted(logs.glob("operator-*.log")):
                print(log.name, log.read_text()[-3000:])
            api.close()


def test_a_worker_the_class_migrates_is_replaced_as_a_planned_handover(env: dict[str, Any]) -> None:  # noqa: F811
    control = needs_control(env)
    nodes = {n.metadata.name: n for n in env["core"].list_node().items}
    if not any((n.metadata.labels or {}).get("cloud.google.com/compute-class") == CLASS for n in nodes.values()):
        pytest.skip(f"this cluster has no nodes of compute class {CLASS}")
    create_job(env, replicas=2, workers={"groups": [{"name": "flex", "computeClass": CLASS}]})
    status = running(env, replicas=2, epoch=1)
    chief = status["chief"]["pod"]
    moved = next(p for p in workers(env) if p.metadata.name != chief)
    assert moved.spec.node_selector == {"cloud.google.com/compute-class": CLASS}

    record = control.migrate_node(moved.spec.node_name)
    assert record["pods"] == [f"{env['ns']}/{moved.metadata.name}"]
    wait_for("the migration counted", lambda: job_status(env).get("migrations") == 1)
    status = running(env, replicas=2, epoch=1)
    assert (status["preemptions"], status["failures"], status["replacements"]) == (0, 0, 1)
    assert not status.get("preemptionCosts")
    replacement = next(p for p in workers(env) if slot_of(p) == slot_of(moved))
    assert replacement.metadata.name != moved.metadata.name
    assert replacement.metadata.labels["transient.training/worker-group"] == "flex"
    assert replacement.spec.node_name != moved.spec.node_name
    [event] = wait_for("the Migrated event", lambda: [e for e in job_events(env) if e.reason == "Migrated"])
    assert event.type == "Normal"
    assert moved.metadata.name in event.message
    assert not [e for e in job_events(env) if e.reason == "WorkerPreempted"]
    metrics = env["operator"].metrics()
    assert f'ttj_worker_migrations_total{{job="train",namespace="{env["ns"]}"}} 1.0' in metrics
    assert f'ttj_preemptions_total{{job="train",namespace="{env["ns"]}"}}' not in metrics
    entries = {e["name"]: e for e in (status.get("cost") or {}).get("pods") or []}
    priced = entries.get(moved.metadata.name)
    if priced is not None:  # priced as the node it ran on: spot L4 or on-demand T4, whatever spec.workers says
        pool = nodes[moved.spec.node_name].metadata.labels["cloud.google.com/gke-nodepool"]
        assert priced["provisioning"] == {"flex-l4": "spot", "flex-t4": "on-demand"}[pool]
