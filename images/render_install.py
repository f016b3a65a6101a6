"""Render manifests/base into one install.yaml with both images set to a release (``make install-yaml``).

The rendering is kustomize's (``kubectl kustomize``, else ``kustomize build``): a throwaway overlay on
manifests/base sets the operator's image to ``IMAGE_REPO/ttj-operator:VERSION`` and the trainer image of jobs
that name none to ``IMAGE_REPO/ttj-trainer:VERSION``, the way manifests/overlays/my-registry does. The base's
own image name is read from its kustomization, never repeated here.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "manifests" / "base"
OPERATOR = "ttj-operator"
TRAINER = "ttj-trainer"
CRD = "transienttrainingjobs.transient.training"
TRAINER_DEFAULT_PATH = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/image/default"


def kustomize_command() -> list[str]:
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    raise SystemExit("install-yaml needs kubectl (kubectl kustomize) or kustomize on PATH")


def base_operator_image() -> str:
    """The operator image's name as manifests/base renders it (its kustomization's ``newName``)."""
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    for image in kustomization.get("images", []):
        if image.get("name") == OPERATOR:
            return str(image.get("newName", OPERATOR))
    return OPERATOR


def trainer_default_patch(image: str) -> dict[str, object]:
    """The kustomize patch that makes ``image`` the trainer image of jobs that name none: the CRD's default of
    spec.image, which the API server writes into each job as it is created (a running job keeps its image when
    an install changes the default). manifests/overlays/my-registry carries the same patch for kustomize users."""
    return {
        "target": {"kind": "CustomResourceDefinition", "name": CRD},
        "patch": yaml.safe_dump([{"op": "replace", "path": TRAINER_DEFAULT_PATH, "value": image}]),
    }


def render(image_repo: str, version: str, scratch: Path) -> str:
    """The manifests, rendered; ``scratch`` holds the overlay while kustomize runs (inside the repository,
    as kustomize takes a base only by a relative path)."""
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="install-", dir=scratch) as directory:
        overlay = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [os.path.relpath(BASE, directory)],
            "images": [{"name": base_operator_image(), "newName": f"{image_repo}/{OPERATOR}", "newTag": version}],
            "patches": [trainer_default_patch(f"{image_repo}/{TRAINER}:{version}")],
        }
        (Path(directory) / "kustomization.yaml").write_text(yaml.safe_dump(overlay, sort_keys=False))
        done = subprocess.run([*kustomize_command(), directory], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"kustomize failed:\n{done.stderr}")
    for expected in (f"image: {image_repo}/{OPERATOR}:{version}", f"default: {image_repo}/{TRAINER}:{version}"):
        if expected not in done.stdout:
            raise SystemExit(f"the rendered manifests do not name {expected!r}")
    return done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image-repo", required=True, help="where the images are pushed, e.g. ghcr.io/OWNER")
    parser.add_argument("--version", required=True, help="the release, without a leading v")
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(render(args.image_repo, args.version, ROOT / "build"))
    print(f"wrote {args.output} ({args.image_repo}/{OPERATOR}:{args.version})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
