"""The lock files (``requirements/*.txt``, made by ``make lock``) and pyproject.toml agree,
and this environment is what the lock says: a fresh clone installs exactly what was tested
(a dependency's new release once broke a fresh clone's ``make test`` with nothing changed
in the repository)."""

from __future__ import annotations

import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from scripts.lock import DIGEST_LINE, PIN, inputs_digest

ROOT = Path(__file__).resolve().parents[1]
LOCKS = ROOT / "requirements"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def read_pins(name: str) -> dict[str, list[tuple[str, str | None]]]:
    """A lock's pins: distribution → (version, marker or None) for each branch."""
    found: dict[str, list[tuple[str, str | None]]] = {}
    for line in (LOCKS / f"{name}.txt").read_text().splitlines():
        match = PIN.match(line)
        if match:
            found.setdefault(canonicalize_name(match[1]), []).append((match[2], match[3]))
    return found


def requirements(*extras: str) -> list[Requirement]:
    project = PYPROJECT["project"]
    texts = list(project["dependencies"])
    for extra in extras:
        texts += project["optional-dependencies"][extra]
    found = []
    for text in texts:
        requirement = Requirement(text)
        if canonicalize_name(requirement.name) == "toolgate":  # the project's own extras
            found += requirements(*requirement.extras)
        else:
            found.append(requirement)
    return found


LOCKED = {
    "runtime": requirements(),
    "dev": requirements("dev"),
    "build": [Requirement(text) for text in PYPROJECT["build-system"]["requires"]],
}


@pytest.mark.parametrize("name", sorted(LOCKED))
def test_each_lock_was_made_from_todays_pyproject(name: str) -> None:
    first = (LOCKS / f"{name}.txt").read_text().splitlines()[0]
    assert first.startswith(DIGEST_LINE)
    assert first.removeprefix(DIGEST_LINE) == inputs_digest(), (
        f"requirements/{name}.txt was made from another pyproject.toml: run `make lock`"
    )


@pytest.mark.parametrize("name", sorted(LOCKED))
def test_each_requirement_is_pinned_within_its_range(name: str) -> None:
    pins = read_pins(name)
    for requirement in LOCKED[name]:
        versions = [v for v, _ in pins.get(canonicalize_name(requirement.name), [])]
        assert versions, f"{requirement.name} is not in requirements/{name}.txt"
        outside = [v for v in versions if Version(v) not in requirement.specifier]
        assert not outside, f"requirements/{name}.txt pins {requirement.name} {outside}"


def test_the_runtime_lock_is_the_tested_one() -> None:
    """``make run`` and the image install the versions ``make test`` ran with."""
    dev = read_pins("dev")
    for name, branches in read_pins("runtime").items():
        assert {v for v, _ in branches} <= {v for v, _ in dev[name]}, name


@pytest.mark.parametrize("name", sorted(LOCKED))
def test_every_pin_carries_hashes(name: str) -> None:
    """pip's ``--require-hashes`` refuses a pin without one; this says which."""
    lines = (LOCKS / f"{name}.txt").read_text().splitlines()
    pinned = [i for i, line in enumerate(lines) if PIN.match(line)]
    assert pinned
    bare = [lines[i] for i in pinned if not lines[i + 1].startswith("    --hash=sha256:")]
    assert not bare


def test_this_environment_is_the_dev_lock() -> None:
    """What is installed here is what the lock pins (``make test`` installs from it)."""
    wrong = {}
    for name, branches in read_pins("dev").items():
        for pinned, marker in branches:
            if marker and not Marker(marker).evaluate():
                continue
            try:
                installed = version(name)
            except PackageNotFoundError:
                installed = "missing"
            if installed != pinned:
                wrong[name] = (pinned, installed)
    assert not wrong, f"installed apart from the lock (pinned, installed): {wrong}"


def install_lines(path: Path) -> list[str]:
    """Each ``pip install`` or ``pip wheel`` command of a build file (with the Makefile's
    variables put in their place)."""
    text = path.read_text().replace("\\\n", " ")
    variables = dict(line.split(" := ", 1) for line in text.splitlines() if " := " in line)
    lines = []
    for line in text.splitlines():
        for name, value in variables.items():
            line = line.replace(f"$({name})", value)
        if " := " not in line and ("pip install" in line or "pip wheel" in line):
            lines.append(line.strip())
    return lines


@pytest.mark.parametrize("build_file", ["Makefile", "Dockerfile"])
def test_every_install_is_from_the_lock(build_file: str) -> None:
    """A requirement pip resolves itself is one the lock did not choose: every install
    takes the lock with its hashes, or the project alone with no dependencies, built by
    the locked backend."""
    lines = install_lines(ROOT / build_file)
    assert any("-r requirements/" in line or "/runtime.txt" in line for line in lines)
    for line in lines:
        assert "--no-deps" in line, line
        if "-r " in line:
            assert "--require-hashes" in line, line
        else:
            assert "--no-build-isolation" in line or "/wheels/" in line, line
