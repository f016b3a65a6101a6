"""TensorFlow's distributed runtime across two pods, by the stable DNS names the operator puts in TF_CONFIG.

The worker places an op on the PS that consumes a tensor produced on the worker: the PS fetches it from
the worker's address (``w-0.tfjob.default.svc:2222`` → the worker's pod IP), so both directions work."""

from __future__ import annotations

import json
import textwrap

import pytest

from ttj_localcluster.nodes.netns import PodNetworkNamespaces

from .conftest import NodesCluster, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.tensorflow,
    pytest.mark.skipif(not PodNetworkNamespaces.available(), reason="needs pod network namespaces (root)"),
]

CLUSTER = {"ps": ["ps-0.tfjob.default.svc:2222"], "worker": ["w-0.tfjob.default.svc:2222"]}

PS = textwrap.dedent(
    """
    import json, os
    import tensorflow as tf
    config = json.loads(os.environ["TF_CONFIG"])
    server = tf.distribute.Server(tf.train.ClusterSpec(config["cluster"]), job_name="ps", task_index=0,
                                  protocol="grpc", start=True)
    print("ps serving", flush=True)
    server.join()
    """
)
WORKER = textwrap.dedent(
    """
    import json, os
    import tensorflow as tf
    config = json.loads(os.environ["TF_CONFIG"])
    cluster = tf.train.ClusterSpec(config["cluster"])
    # serves this worker on 0.0.0.0:2222 of its pod and connects to the PS
    tf.config.experimental_connect_to_cluster(cluster, job_name="worker", task_index=0)
    with tf.device("/job:worker/task:0"):
        produced = tf.constant([1.0, 2.0, 3.0])
    with tf.device("/job:ps/task:0"):
        total = tf.reduce_sum(produced * 2.0)
    print("total", float(total.numpy()), flush=True)
    """
)


def tf_pod(name: str, code: str, hostname: str, task: str) -> dict[str, object]:
    tf_config = {"cluster": CLUSTER, "task": {"type": task, "index": 0}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"job": "tfjob"}},
        "spec": {
            "hostname": hostname,
            "subdomain": "tfjob",
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "tf",
                    "image": "tensorflow/tensorflow:2.21.0",
                    "command": ["python", "-c", code],
                    "env": [
                        {"name": "TF_CONFIG", "value": json.dumps(tf_config)},
                        {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"},
                    ],
                }
            ],
        },
    }


def test_ps_and_worker_reach_each_other_by_dns(nodes_cluster: NodesCluster) -> None:
    c = nodes_cluster
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "tfjob"},
        "spec": {"clusterIP": "None", "selector": {"job": "tfjob"}, "publishNotReadyAddresses": True},
    }
    c.kube.request("POST", "/api/v1/namespaces/default/services", body=service)
    c.kube.request("POST", "/api/v1/namespaces/default/pods", body=tf_pod("tf-ps", PS, "ps-0", "ps"))
    c.kube.request("POST", "/api/v1/namespaces/default/pods", body=tf_pod("tf-worker", WORKER, "w-0", "worker"))
    worker = wait_for(
        lambda: (
            (c.pod("tf-worker") or {}).get("status", {}).get("phase") in ("Succeeded", "Failed") and c.pod("tf-worker")
        ),
        timeout=240,
        what="worker finished",
    )
    log_path = c.fleet.log_file("default", "tf-worker")
    log = log_path.read_text() if log_path else ""
    assert worker["status"]["phase"] == "Succeeded", log[-2000:]
    assert "total 12.0" in log
    c.kube.delete("/api/v1/namespaces/default/pods/tf-ps")
    wait_for(lambda: c.pod("tf-ps") is None, timeout=60, what="PS deleted")
