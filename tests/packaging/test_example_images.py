"""The example programs' Dockerfiles, read as a builder would read them (no image is built): each builds on
the trainer image of this release, copies files that are there into the directory it puts on PYTHONPATH,
runs as the trainer's non-root user, and checks at build time the entrypoint its job manifest names; the
own-TensorFlow-image Dockerfile installs the contract and the trainer the way the trainer image does."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "programs"
TRAINER_USER = "10001:10001"


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str


def instructions(dockerfile: Path) -> list[Instruction]:
    """The Dockerfile's instructions: comments dropped, continuation lines joined."""
    text = re.sub(
        r"\\\n",
        " ",
        "\n".join(line for line in dockerfile.read_text().splitlines() if not line.lstrip().startswith("#")),
    )
    parsed = []
    for line in text.splitlines():
        if line.strip():
            keyword, _, arguments = line.strip().partition(" ")
            parsed.append(Instruction(keyword.upper(), " ".join(arguments.split())))
    return parsed


def final_stage(parsed: list[Instruction]) -> list[Instruction]:
    last_from = max(i for i, instruction in enumerate(parsed) if instruction.keyword == "FROM")
    return parsed[last_from:]


def make_default(variable: str) -> str:
    """A variable's default in the Makefile (IMAGE_REPO, VERSION): what `make image` builds by default."""
    match = re.search(rf"^{variable} \?= (\S+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert match is not None
    return match.group(1)


def copied_sources(instruction: Instruction) -> tuple[list[str], str]:
    words = [w for w in shlex.split(instruction.arguments) if not w.startswith("--")]
    return words[:-1], words[-1]


def env_value(stage: list[Instruction], name: str) -> str:
    values = [
        value
        for instruction in stage
        if instruction.keyword == "ENV"
        for key, _, value in (word.partition("=") for word in shlex.split(instruction.arguments))
        if key == name
    ]
    assert values, f"no ENV {name}"
    return values[-1]


@pytest.mark.parametrize("example", ["cifar_applications", "ctr", "custom_step"])
def test_an_example_builds_on_the_trainer_image_as_its_user_and_checks_its_program(example: str) -> None:
    directory = EXAMPLES / example
    parsed = instructions(directory / "Dockerfile")
    assert parsed[:2] == [
        Instruction("ARG", f"IMAGE_REPO={make_default('IMAGE_REPO')}"),
        Instruction("ARG", f"VERSION={make_default('VERSION')}"),
    ]
    assert [i.arguments for i in parsed if i.keyword == "FROM"] == ["${IMAGE_REPO}/ttj-trainer:${VERSION}"]
    [copy] = [i for i in parsed if i.keyword == "COPY"]
    sources, target = copied_sources(copy)
    assert all((directory / source).is_file() for source in sources), sources
    assert f"--chown={TRAINER_USER}" in copy.arguments
    assert env_value(parsed, "PYTHONPATH") == target.rstrip("/")
    assert [i.arguments for i in parsed if i.keyword == "USER"] == [TRAINER_USER]
    job = yaml.safe_load((directory / "job.yaml").read_text())
    entrypoint = job["spec"]["program"]["entrypoint"]
    assert (directory / f"{entrypoint.partition(':')[0]}.py").is_file()
    checks = [i.arguments for i in parsed if i.keyword == "RUN" and "--self-check" in i.arguments]
    assert checks
    assert all(f"--program {entrypoint}" in check for check in checks)
    assert parsed.index(next(i for i in parsed if i.keyword == "USER")) < parsed.index(
        next(i for i in parsed if i.keyword == "RUN")
    ), "the build-time steps run as the trainer's user"


def test_the_own_tensorflow_image_installs_the_trainer_as_the_trainer_image_does() -> None:
    """Dockerfile.tensorflow builds from the repository root: the same TensorFlow base as trainer-image/,
    wheels in a first stage, a non-root user, and the entrypoint the operator runs (python -m ttj_trainer)."""
    parsed = instructions(EXAMPLES / "custom_step" / "Dockerfile.tensorflow")
    trainer = instructions(ROOT / "trainer-image" / "Dockerfile")
    tf_image = next(i for i in trainer if i.keyword == "ARG" and i.arguments.startswith("TF_IMAGE="))
    assert parsed[0] == tf_image
    assert [i.arguments for i in parsed if i.keyword == "FROM"] == ["${TF_IMAGE} AS wheels", "${TF_IMAGE}"]
    for copy in (i for i in parsed if i.keyword == "COPY"):
        sources, _ = copied_sources(copy)
        assert all((ROOT / source).exists() for source in sources), sources
    stage = final_stage(parsed)
    install = next(i.arguments for i in stage if i.keyword == "RUN" and "pip install" in i.arguments)
    assert "from=wheels" in install
    assert "--no-index" in install
    assert [i.arguments for i in stage if i.keyword == "USER"] == [TRAINER_USER]
    assert env_value(stage, "PYTHONPATH") == "/home/trainer/app"
    assert Instruction("ENTRYPOINT", '["python", "-m", "ttj_trainer"]') in stage
    assert any("--self-check --program custom_step:program" in i.arguments for i in stage if i.keyword == "RUN")


def _sent(ignore_file: Path, path: str) -> bool:
    """Whether a build context sends ``path`` under a .dockerignore: the last pattern matching the path or one of
    its parent directories decides, a ``!`` pattern sending it again (Docker's rules, for the patterns used here)."""
    patterns = [
        line.strip() for line in ignore_file.read_text().splitlines() if line.strip() and not line.startswith("#")
    ]
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    sent = True
    for pattern in patterns:
        negated = pattern.startswith("!")
        glob = pattern.removeprefix("!")
        regex = re.escape(glob).replace(r"\*\*/", "(.*/)?").replace(r"\*", "[^/]*")
        if any(re.fullmatch(regex, candidate) for candidate in candidates):
            sent = negated
    return sent


@pytest.mark.parametrize(
    "dockerfile",
    ["Dockerfile", "trainer-image/Dockerfile", "examples/programs/custom_step/Dockerfile.tensorflow"],
)
def test_what_a_dockerfile_built_from_the_root_copies_is_in_its_build_context(dockerfile: str) -> None:
    """BuildKit reads DOCKERFILE.dockerignore beside a Dockerfile when there is one, else the root's."""
    own = ROOT / f"{dockerfile}.dockerignore"
    ignore = own if own.is_file() else ROOT / ".dockerignore"
    for copy in (i for i in instructions(ROOT / dockerfile) if i.keyword == "COPY" and "--from" not in i.arguments):
        sources, _ = copied_sources(copy)
        for source in sources:
            files = (
                [source]
                if (ROOT / source).is_file()
                else [str(p.relative_to(ROOT)) for p in (ROOT / source).rglob("*.py")]
            )
            assert files, source
            assert all(_sent(ignore, f) for f in files), (dockerfile, source)
