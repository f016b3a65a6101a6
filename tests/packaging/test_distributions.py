"""The four distributions stay apart: what each one ships and depends on, read from its pyproject.toml.

The operator image installs only ``contract/`` and ``operator/``: none of the local cluster's code or its
dependencies (jsonschema, cel-python), and no plotting, may come along with them.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTIONS = {
    "contract": "ttj-contract",
    "operator": "ttj",
    "trainer-image": "ttj-trainer",
    "localcluster": "ttj-localcluster",
}


def _project(folder: str) -> dict:  # type: ignore[type-arg]
    return tomllib.loads((ROOT / folder / "pyproject.toml").read_text())["project"]


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in requirements}


def _packages(folder: str) -> list[str]:
    config = tomllib.loads((ROOT / folder / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    return find_packages(where=str(ROOT / folder), include=config["include"])


@pytest.mark.parametrize(("folder", "name"), DISTRIBUTIONS.items())
def test_each_folder_is_the_distribution_it_says(folder: str, name: str) -> None:
    assert _project(folder)["name"] == name


def test_the_operator_ships_no_local_cluster_code_and_none_of_its_dependencies() -> None:
    packages = _packages("operator")
    assert {"ttj", "ttj.planner", "ttj.controller"} <= set(packages)
    assert not [p for p in packages if "localcluster" in p or "demo" in p], packages
    runtime = _names(_project("operator")["dependencies"])
    assert runtime.isdisjoint(
        {"jsonschema", "cel-python", "matplotlib", "tensorflow", "tensorflow-cpu", "ttj-localcluster"}
    )
    assert "ttj-contract" in runtime


def test_the_local_cluster_and_the_demo_live_in_their_own_distribution() -> None:
    packages = _packages("localcluster")
    assert {"ttj_localcluster", "ttj_localcluster.apiserver", "ttj_localcluster.nodes", "ttj_demo"} <= set(packages)
    assert not [p for p in packages if p == "ttj" or p.startswith("ttj.")]
    project = _project("localcluster")
    assert {"jsonschema", "cel-python", "ttj"} <= _names(project["dependencies"])
    assert project["entry-points"]["ttj.commands"] == {"local-cluster": "ttj_localcluster.cli"}


def test_the_trainer_and_the_contract_do_not_pull_the_operator_in() -> None:
    assert "ttj" not in _names(_project("trainer-image")["dependencies"])
    assert "ttj-contract" in _names(_project("trainer-image")["dependencies"])
    assert _project("contract")["dependencies"] == []


def test_the_operator_image_installs_only_the_contract_and_the_operator() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    copied = re.findall(r"^COPY (?!--from)(\S+)", dockerfile, flags=re.M)
    assert copied, "the operator Dockerfile copies nothing from the build context"
    assert {c.rstrip("/") for c in copied} <= {"contract", "operator"}, copied


def test_ttj_finds_the_local_cluster_command_through_its_entry_point() -> None:
    out = subprocess.run([sys.executable, "-m", "ttj", "--help"], capture_output=True, text=True, check=True).stdout
    for command in ("crd", "operator", "simulate", "local-cluster"):
        assert re.search(rf"^\s+{command}\b", out, flags=re.M), out
    version = subprocess.run([sys.executable, "-m", "ttj", "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() == f"ttj {_project('operator')['version']}"
