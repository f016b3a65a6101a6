"""The image tooling's own logic, without images: how an image's config becomes a chroot command
(images/imageroot.py), what counts as a compiler (images/check.py), and install.yaml's rendering
(images/render_install.py, with kubectl kustomize when present). ``make image-test`` runs them on real images."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def load(name: str) -> ModuleType:
    """A script under images/ (it is not a package): imported by path, as check.py imports imageroot."""
    sys.path.insert(0, str(ROOT / "images"))
    try:
        spec = importlib.util.spec_from_file_location(name, ROOT / "images" / f"{name}.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "images"))


@pytest.fixture
def rootfs(tmp_path: Path) -> Path:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/passwd").write_text(
        "root:x:0:0:root:/root:/bin/bash\ntrainer:x:10001:10002::/home/trainer:/bin/sh\n"
    )
    (tmp_path / "etc/group").write_text("root:x:0:\ntrainer:x:10002:\n")
    return tmp_path


def test_a_numeric_user_runs_in_the_workdir_with_the_image_env(rootfs: Path) -> None:
    imageroot = load("imageroot")
    config = {
        "User": "65532:65532",
        "Entrypoint": ["ttj"],
        "Env": ["PATH=/opt/ttj/bin:/usr/bin", "A=b=c"],
        "WorkingDir": "/work",
    }
    root = imageroot.ImageRoot(image="x", path=rootfs, config=config)
    argv, env = root.command(["crd"], {"KUBECONFIG": "/tmp/k"})
    chroot = argv.index(shutil.which("chroot"))
    assert argv[chroot:] == [
        shutil.which("chroot"),
        "--userspec=65532:65532",
        "--groups=65532",
        str(rootfs),
        "/usr/bin/env",
        "--chdir=/work",
        "ttj",
        "crd",
    ]
    assert argv[0] == shutil.which("unshare")
    assert env == {"PATH": "/opt/ttj/bin:/usr/bin", "A": "b=c", "HOME": "/", "KUBECONFIG": "/tmp/k"}


def test_a_named_user_is_looked_up_in_the_image_not_the_host(rootfs: Path) -> None:
    imageroot = load("imageroot")
    root = imageroot.ImageRoot(image="x", path=rootfs, config={"User": "trainer", "Entrypoint": ["python"]})
    assert (root.uid, root.gid) == (10001, 10002)
    assert root.env["HOME"] == "/home/trainer"
    argv, _ = root.command([])
    assert "--chdir=/" not in " ".join(argv)  # chroot starts in / already
    with pytest.raises(imageroot.ImageRootError, match="'nobody' is not in the image's passwd"):
        _ = imageroot.ImageRoot(image="x", path=rootfs, config={"User": "nobody"}).uid


def test_no_user_means_root(rootfs: Path) -> None:
    imageroot = load("imageroot")
    assert imageroot.ImageRoot(image="x", path=rootfs, config={}).uid == 0


@pytest.mark.parametrize(
    ("name", "compiler"),
    [
        ("gcc", True),
        ("gcc-12", True),
        ("x86_64-linux-gnu-gcc-12", True),
        ("c++", True),
        ("cc", True),
        ("clang-16", True),
        ("c++filt", False),
        ("gcc-ar", False),
        ("python3.11", False),
        ("ccache", False),
    ],
)
def test_compilers_by_name(name: str, compiler: bool) -> None:
    assert bool(load("check").COMPILERS.match(name)) is compiler


@pytest.mark.skipif(not (shutil.which("kubectl") or shutil.which("kustomize")), reason="no kustomize here")
def test_install_yaml_names_the_release_image_and_holds_the_crd(tmp_path: Path) -> None:
    rendered = load("render_install").render("ghcr.io/example", "9.8.7", tmp_path)
    documents = list(yaml.safe_load_all(rendered))
    kinds = {document["kind"] for document in documents}
    assert {"CustomResourceDefinition", "Deployment", "Namespace", "ClusterRole"} <= kinds
    deployment = next(document for document in documents if document["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "ghcr.io/example/ttj-operator:9.8.7"
    crd = next(document for document in documents if document["kind"] == "CustomResourceDefinition")
    image = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["image"]
    assert image["default"] == "ghcr.io/example/ttj-trainer:9.8.7"  # jobs that name no image


def test_a_read_only_root_keeps_only_the_named_directories_writable(rootfs: Path) -> None:
    imageroot = load("imageroot")
    root = imageroot.ImageRoot(image="x", path=rootfs, config={"User": "1:1", "Entrypoint": ["ttj"]})
    argv, _ = root.command(["crd"], writable=["/tmp"])
    mounts = argv[argv.index(str(rootfs)) + 1 : argv.index(shutil.which("chroot"))]
    assert mounts == ["--read-only", "/tmp", "--"]
    argv, _ = root.command(["crd"])
    assert argv[argv.index(str(rootfs)) + 1] == "--"


def test_the_operator_is_checked_as_its_deployment_runs_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    check = load("check")
    deployment = {
        "spec": {
            "template": {
                "spec": {
                    "securityContext": {"runAsUser": 65532, "runAsGroup": 65532},
                    "containers": [
                        {
                            "securityContext": {"readOnlyRootFilesystem": True},
                            "volumeMounts": [
                                {"name": "tmp", "mountPath": "/tmp"},
                                {"name": "prices", "mountPath": "/etc/ttj/prices"},
                            ],
                        }
                    ],
                    "volumes": [{"name": "tmp", "emptyDir": {}}, {"name": "prices", "configMap": {"name": "p"}}],
                }
            }
        }
    }
    path = tmp_path / "deployment.yaml"
    path.write_text(yaml.safe_dump(deployment))
    monkeypatch.setattr(check, "DEPLOYMENT", path)
    assert check.operator_pod_runtime() == check.PodRuntime(uid=65532, gid=65532, writable=("/tmp",))
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {}
    path.write_text(yaml.safe_dump(deployment))
    assert check.operator_pod_runtime().writable is None


def test_host_tools_name_what_is_missing_in_one_line(tmp_path: Path) -> None:
    """``make image-test`` where nothing it runs is installed (an empty PATH; installing turned off): one line
    naming the Debian packages to install."""
    script = str(ROOT / "images" / "host_tools.sh")

    def run(*tools: str, path: str) -> tuple[int, str, str]:
        env = {"PATH": path, "TTJ_IMAGE_TOOLS_INSTALL": "0", "IMAGE_TOOLS_PYTHON": "/bin/false"}
        done = subprocess.run(["/bin/bash", script, *tools], env=env, capture_output=True, text=True, check=False)
        return done.returncode, done.stdout, done.stderr

    packages = "podman buildah debootstrap util-linux mount coreutils python3-yaml"
    assert run("podman", "buildah", "debootstrap", "unshare", "mount", "chroot", "pyyaml", path=str(tmp_path)) == (
        1,
        "",
        "missing podman buildah debootstrap unshare mount chroot pyyaml: "
        f"install {packages} (as root on Debian/Ubuntu: apt-get install -y {packages})\n",
    )
    assert run("sh", "tar", path="/usr/bin:/bin") == (0, "", "")
