"""The documentation a newcomer follows: every link and every repository path it names exists, and the pages
that list contract values (exit codes, finalizers, labels) list the ones the code has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ttj.planner.stages.ending import PERMANENT_EXITS
from ttj_contract import FINALIZER, JOB_FINALIZER, LABEL_CHIEF, LABEL_METRICS_SCRAPER

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "trainer-image" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Folders whose paths the pages name in backticks (`manifests/components/gke`, `bench/operator_scale.py`).
NAMED_ROOTS = ("manifests/", "examples/", "crds/", "docs/", "images/", "bench/")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.MULTILINE)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_and_named_path_exists(page: Path) -> None:
    text = page.read_text()
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"`[^`]*`", "", text)):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in _anchors(linked)):
            broken.append(target)
    roots = "|".join(map(re.escape, NAMED_ROOTS))
    for named in re.findall(rf"`((?:{roots})[^`\s]*)`", text):
        path = named.rstrip(".,:;")
        if any(c in path for c in "*<>{}$") or path.isupper():
            continue  # a pattern or a placeholder, not a path
        if not (ROOT / path).exists():
            broken.append(named)
    assert broken == []


def test_the_troubleshooting_page_lists_every_exit_code_that_ends_a_job() -> None:
    text = (ROOT / "docs" / "troubleshooting.md").read_text()
    rows = dict(re.findall(r"^\| (\d+) \| `(\w+)` \|", text, re.MULTILINE))
    assert {int(code): reason for code, reason in rows.items()} == {
        int(code): str(reason) for code, reason in PERMANENT_EXITS.items()
    }


def test_the_operator_page_names_every_exit_code_that_ends_a_job() -> None:
    text = (ROOT / "docs" / "operator.md").read_text()
    assert all(f"`{reason}`" in text for reason in PERMANENT_EXITS.values())


def test_what_the_install_and_monitoring_pages_tell_users_to_type_is_the_contracts() -> None:
    install = (ROOT / "docs" / "install.md").read_text()
    assert f"`{JOB_FINALIZER}`" in install
    assert f"`{FINALIZER}`" in install
    assert f"{LABEL_CHIEF}=true" in (ROOT / "docs" / "troubleshooting.md").read_text()
    assert f"{LABEL_METRICS_SCRAPER}=true" in (ROOT / "docs" / "monitoring.md").read_text()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_make_target_a_page_names_exists(page: Path) -> None:
    targets = set(re.findall(r"^([a-zA-Z0-9_-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    named = {
        word
        for command in re.findall(r"(?:`|^[ \t]*)make ((?:[a-z][a-z0-9-]*[ \t]?)+)", page.read_text(), re.MULTILINE)
        for word in command.split()
    }
    assert named - targets == set()
