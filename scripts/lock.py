"""`make lock`: resolve pyproject.toml's ranges anew into the lock files and say what moved.

Three files under ``requirements/``, each every distribution pinned with its hashes, for
every platform and Python from 3.11 (uv's universal resolution, markers where a pin is
one platform's):

- ``dev.txt``: the runtime, the dev extras and what they bring (``make test``, CI);
- ``runtime.txt``: the runtime alone (``make run``, the Docker image), at the pins of
  ``dev.txt``, so what runs is what was tested;
- ``build.txt``: the build backend (``[build-system].requires``), for installs without
  build isolation.

Each file's header carries a digest of the pyproject.toml sections it was made from
(``tests/test_lock.py`` fails when they disagree). ``--keep`` keeps every pin the ranges
still allow (after a change to pyproject.toml); without it every pin moves to the newest
release its range allows. uv resolves (in seconds, for every platform at once); pip
installs (``pip install --require-hashes --no-deps -r``), so an install needs nothing
Python does not ship.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
LOCKS = ROOT / "requirements"
DIGEST_LINE = "# toolgate-lock-digest: "
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^ ;\\]+)(?: ; ([^\\]+?))? *\\?$")


def inputs_digest(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """The digest of what the locks are made from: the requirements, parsed (so a comment
    or a line break moves nothing), and the Python versions supported."""
    data = tomllib.loads(pyproject.read_text())
    project = data["project"]

    def norm(texts: list[str]) -> list[str]:
        return sorted(str(Requirement(text)) for text in texts)

    source = {
        "requires-python": project["requires-python"],
        "dependencies": norm(project["dependencies"]),
        "optional-dependencies": {
            extra: norm(texts) for extra, texts in project["optional-dependencies"].items()
        },
        "build-system": norm(data["build-system"]["requires"]),
    }
    return hashlib.sha256(json.dumps(source, sort_keys=True).encode()).hexdigest()


def pins(path: Path) -> dict[str, set[str]]:
    """A lock file's pins: distribution name → its versions (one per marker branch)."""
    found: dict[str, set[str]] = {}
    if not path.exists():
        return found
    for line in path.read_text().splitlines():
        match = PIN.match(line)
        if match:
            found.setdefault(match[1].lower(), set()).add(match[2])
    return found


def pin_lines(path: Path) -> list[str]:
    """``name==version ; marker`` for every pin, as a constraints file takes them."""
    lines = []
    for line in path.read_text().splitlines():
        match = PIN.match(line)
        if match:
            marker = f" ; {match[3]}" if match[3] else ""
            lines.append(f"{match[1]}=={match[2]}{marker}")
    return lines


def uv() -> str:
    beside = Path(sys.executable).with_name("uv")
    found = str(beside) if beside.exists() else shutil.which("uv")
    if found is None:
        sys.exit("lock: uv is not installed (make lock installs the dev extras, uv with them)")
    return found


def compile_lock(
    out: Path, sources: list[str], *, keep: bool, extra: list[str], names: dict[str, str]
) -> None:
    """Runs uv; ``names`` turns a scratch file's path in its annotations into what it
    stands for, so the file reads the same whatever folder made it."""
    command = [
        uv(), "pip", "compile", *sources, "--universal", "--python-version", "3.11",
        "--generate-hashes", "--quiet", "--custom-compile-command", "make lock",
        "-o", str(out), *extra,
    ]  # fmt: skip
    if not keep:
        command.append("--upgrade")
    subprocess.run(command, cwd=ROOT, check=True)
    text = out.read_text()
    for scratch, name in names.items():
        text = text.replace(scratch, name)
    out.write_text(f"{DIGEST_LINE}{inputs_digest()}\n{text}")


def moved(before: dict[str, set[str]], after: dict[str, set[str]]) -> list[str]:
    lines = []
    for name in sorted(before.keys() | after.keys()):
        old, new = before.get(name, set()), after.get(name, set())
        if old == new:
            continue
        if not old:
            lines.append(f"  + {name} {', '.join(sorted(new))}")
        elif not new:
            lines.append(f"  - {name} {', '.join(sorted(old))}")
        else:
            lines.append(f"  {name} {', '.join(sorted(old))} -> {', '.join(sorted(new))}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep every pin still allowed")
    args = parser.parse_args()
    LOCKS.mkdir(exist_ok=True)
    files = {name: LOCKS / f"{name}.txt" for name in ("build", "dev", "runtime")}
    before = {name: pins(path) for name, path in files.items()}
    build_requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    with tempfile.TemporaryDirectory() as scratch:
        build_in = Path(scratch, "build.in")
        build_in.write_text("\n".join(build_requires["requires"]) + "\n")
        compile_lock(
            files["build"], [str(build_in)], keep=args.keep, extra=[],
            names={f"-r {build_in}": "pyproject.toml [build-system]"},
        )  # fmt: skip
        compile_lock(
            files["dev"], ["pyproject.toml"], keep=args.keep, extra=["--extra", "dev"], names={}
        )
        # The runtime at the dev lock's pins: what `make run` and the image install is
        # exactly what `make test` tested.
        constraints = Path(scratch, "tested.txt")
        constraints.write_text("\n".join(pin_lines(files["dev"])) + "\n")
        compile_lock(
            files["runtime"], ["pyproject.toml"], keep=True, extra=["-c", str(constraints)],
            names={f"-c {constraints}": "-c requirements/dev.txt"},
        )  # fmt: skip
    for name, path in files.items():
        changes = moved(before[name], pins(path))
        print(f"{path.relative_to(ROOT)}: " + ("moved" if changes else "nothing moved"))
        for change in changes:
            print(change)


if __name__ == "__main__":
    main()
