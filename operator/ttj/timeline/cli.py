"""``ttj timeline NAMESPACE/NAME``: a job's timeline from what the cluster keeps, as text or a picture."""

from __future__ import annotations

import argparse
import sys
from typing import Any

HELP = "show a job's timeline (pods, chiefs, preemptions and their cost) as text, or draw it with -o FILE.png"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "job", metavar="NAMESPACE/NAME", help="the TransientTrainingJob (NAME alone: namespace default)"
    )
    parser.add_argument(
        "-o", "--output", metavar="FILE", help="draw the picture to FILE (.png, .svg or .pdf; needs matplotlib)"
    )
    parser.add_argument("--text", action="store_true", help="print the text form too when drawing with -o")
    parser.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig to use (default: KUBECONFIG, ~/.kube/config)")


def main(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime
    from pathlib import Path

    from ttj import kubeapi
    from ttj.timeline.cluster import from_cluster
    from ttj.timeline.text import render

    namespace, _, name = args.job.rpartition("/")
    namespace = namespace or "default"
    try:
        client = _client(args.kubeconfig)
    except Exception as exc:  # no kubeconfig, no in-cluster account: say so in one line
        print(f"ttj timeline: no cluster to talk to: {exc}", file=sys.stderr)
        return 2
    try:
        read = read_job(client, namespace, name)
    except kubeapi.KubeError as exc:
        print(f"ttj timeline: {exc.message}", file=sys.stderr)
        return 1
    finally:
        client.close()
    if read is None:
        print(f"ttj timeline: no TransientTrainingJob {namespace}/{name}", file=sys.stderr)
        return 1
    job, events, pods, lease = read
    timeline = from_cluster(job, events, pods, lease, datetime.now(UTC))
    phase = (job.get("status") or {}).get("phase") or "Pending"
    title = f"{namespace}/{name} ({phase})"
    if args.output:
        try:
            from ttj.timeline.draw import draw
        except ImportError:  # pragma: no cover - depends on the installation
            print("ttj timeline: drawing needs matplotlib: pip install 'ttj[viz]'", file=sys.stderr)
            return 2
        picture = draw(timeline, Path(args.output), f"ttj timeline: {title}")
        if args.text:
            sys.stdout.write(render(timeline, title))
        print(f"picture written to {picture}")
        return 0
    sys.stdout.write(render(timeline, title))
    return 0


def _client(kubeconfig: str | None) -> Any:
    import os

    import kubernetes

    from ttj.kubeapi import KubeClient

    if kubeconfig or os.environ.get("KUBECONFIG") or not os.environ.get("KUBERNETES_SERVICE_HOST"):
        return KubeClient(kubernetes.config.new_client_from_config(config_file=kubeconfig))  # type: ignore[no-untyped-call]
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return KubeClient(kubernetes.client.ApiClient(configuration))


def read_job(
    client: Any, namespace: str, name: str
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], dict[str, Any] | None] | None:
    """The job, its Events, its pods and its Lease; None when there is no such job."""
    from ttj import kubeapi
    from ttj_contract import KIND, job_selector, lease_name

    job = client.get(kubeapi.path(KIND, namespace, name))
    if job is None:
        return None
    pods = client.request("GET", kubeapi.path("Pod", namespace), query=[("labelSelector", job_selector(name))])
    selector = f"involvedObject.kind={KIND},involvedObject.name={name}"
    try:
        listed = client.request("GET", kubeapi.path("Event", namespace), query=[("fieldSelector", selector)])
    except kubeapi.KubeError as exc:
        if exc.status != 400:
            raise
        listed = client.request("GET", kubeapi.path("Event", namespace))  # a server without that field selector
    uid = (job.get("metadata") or {}).get("uid")
    events = [
        e
        for e in listed.get("items") or []
        if (e.get("involvedObject") or {}).get("kind") == KIND
        and (e.get("involvedObject") or {}).get("name") == name
        and (not uid or (e.get("involvedObject") or {}).get("uid") in (None, uid))
    ]
    lease = client.get(kubeapi.path("Lease", namespace, lease_name(name)))
    return job, events, list(pods.get("items") or []), lease
