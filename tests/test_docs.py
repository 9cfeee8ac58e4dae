"""The README and the manual (``docs/``) hold true: every relative link reaches a file,
and an anchor a heading of it; every YAML block that shows configuration uses only
keys the configuration has (a whole configuration loads); every ``section.key`` the
prose names exists."""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from gateway.config import GatewayConfig

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_VARIABLE = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")
_DOTTED = re.compile(r"`([a-z_]+(?:\.[a-z_]+)+)`")
# Dotted names the prose uses that start like a section but are not settings: a
# module, span attributes, the SDK's methods.
NOT_SETTINGS = frozenset(
    {"mcp.py", "server.address", "mcp.method.name"}
    | {f"responses.{method}" for method in ("create", "stream", "parse")}
)


def _prose(text: str) -> str:
    return _FENCE.sub("", text)


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {
        slug(line.lstrip("#"))
        for line in _prose(page.read_text()).splitlines()
        if re.match(r"^#{1,6} ", line)
    }


def links() -> Iterator[tuple[str, Path, str]]:
    for page in PAGES:
        for target in _LINK.findall(_prose(page.read_text())):
            if not re.match(r"^[a-z]+:", target):
                yield page.relative_to(ROOT).as_posix(), page, target


@pytest.mark.parametrize(("name", "page", "target"), list(links()))
def test_every_link_reaches_its_file_and_heading(name: str, page: Path, target: str) -> None:
    path, _, anchor = target.partition("#")
    found = (page.parent / path).resolve() if path else page
    assert found.exists(), f"{name}: {target} is not a file of the checkout"
    if anchor:
        assert anchor in anchors(found), f"{name}: {target} names no heading there"


def test_the_manual_is_linked_from_the_readme() -> None:
    linked = {t.partition("#")[0] for n, _, t in links() if n == "README.md"}
    for page in PAGES[1:]:
        assert f"docs/{page.name}" in linked, f"{page.name} is not in the README's map"


# ------------------------------------------------------------------ configuration shown


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field's value (or its items) may be."""
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if origin in (list, dict, typing.Union, types.UnionType, typing.Annotated):
        args = typing.get_args(annotation)
        if origin is dict:
            args = args[1:]
        elif origin is typing.Annotated:
            args = args[:1]
        return [m for a in args for m in _models(a)]
    return []


def unknown_keys(model: type[BaseModel], data: Any, where: str) -> list[str]:
    """The keys of ``data`` that ``model`` (and the models inside it) does not have."""
    if isinstance(data, list):
        return [k for i, item in enumerate(data) for k in unknown_keys(model, item, where)]
    if not isinstance(data, dict):
        return []
    wrong = []
    fields = model.model_fields
    for key, value in data.items():
        if key not in fields:
            wrong.append(f"{where}{key}")
            continue
        inner = _models(fields[key].annotation)
        if len(inner) == 1:  # a union of several models is the model's to judge
            wrong += unknown_keys(inner[0], value, f"{where}{key}.")
    return wrong


def _placeholder(name: str) -> str:
    """A value of the kind a variable's name says it holds (an address, a grants key,
    else a key of any shape)."""
    if name.endswith(("_URL", "_ISSUER")):
        return "https://docs.example.com"
    if name.startswith("GRANTS_KEY"):
        return "A" * 43 + "="  # 32 bytes, base64
    return "sk-docs-x1234"


def _substituted(text: str) -> str:
    return _VARIABLE.sub(
        lambda m: m.group(2) if m.group(2) is not None else _placeholder(m.group(1)), text
    )


def config_blocks() -> Iterator[tuple[str, Any]]:
    sections = set(GatewayConfig.model_fields)
    for page in PAGES:
        for kind, body in _FENCE.findall(page.read_text()):
            if kind not in ("yaml", "yml"):
                continue
            try:
                data = yaml.safe_load(_substituted(body))
            except yaml.YAMLError:
                continue  # a sketch with "…" in it
            if isinstance(data, dict) and sections & set(data):
                yield page.relative_to(ROOT).as_posix(), data


@pytest.mark.parametrize(("name", "data"), list(config_blocks()))
def test_every_configuration_shown_uses_real_keys(name: str, data: dict[str, Any]) -> None:
    assert unknown_keys(GatewayConfig, data, "") == [], name
    if {"upstreams", "models"} <= set(data):  # a whole configuration: it loads
        GatewayConfig.model_validate(data)


def _resolves(path: list[str]) -> bool:
    model: type[BaseModel] = GatewayConfig
    for index, part in enumerate(path):
        if part not in model.model_fields:
            return False
        inner = _models(model.model_fields[part].annotation)
        if index < len(path) - 1:
            if not inner:
                return False
            model = inner[0]
    return True


def test_every_setting_the_prose_names_exists() -> None:
    sections = set(GatewayConfig.model_fields)
    missing = []
    for page in PAGES:
        for name in _DOTTED.findall(_prose(page.read_text())):
            parts = name.split(".")
            if parts[0] in sections and name not in NOT_SETTINGS and not _resolves(parts):
                missing.append(f"{page.name}: {name}")
    assert missing == []


_CITED = re.compile(r"docs/design\.md §(\d+)|\(design\.md\) §(\d+)")


def _tracked_texts() -> Iterator[tuple[str, str]]:
    for folder in ("gateway", "tool_registry", "tests", "bench", "docs", "config", "deploy"):
        for path in (ROOT / folder).rglob("*"):
            if (
                path.is_file()
                and "node_modules" not in path.parts
                and path.suffix
                in (
                    ".py",
                    ".md",
                    ".html",
                    ".yaml",
                )
            ):
                yield path.relative_to(ROOT).as_posix(), path.read_text(errors="replace")
    yield "README.md", (ROOT / "README.md").read_text()


def test_the_code_cites_the_design_notes_in_the_repository() -> None:
    """The design the code cites is ``docs/design.md``, by its sections: a citation of a
    file outside the repository, or of a section the notes do not have, fails."""
    sections = {
        int(match)
        for match in re.findall(r"^## (\d+)\. ", (ROOT / "docs" / "design.md").read_text(), re.M)
    }
    assert sections == set(range(1, 22))
    cited = 0
    for name, text in _tracked_texts():
        assert "DESIGN" + ".md" not in text, f"{name} cites a design outside the repository"
        for found in _CITED.findall(text):
            number = int(found[0] or found[1])
            assert number in sections, f"{name} cites docs/design.md §{number}"
            cited += 1
    assert cited > 200


def test_the_connections_recipe_is_the_example_configuration_and_it_loads() -> None:
    """docs/connections.md shows config/examples/connections.yaml, which loads."""
    import base64
    import os

    from gateway.runtime.loader import load_config

    example = ROOT / "config" / "examples" / "connections.yaml"
    page = (ROOT / "docs" / "connections.md").read_text()
    body = "\n".join(line for line in example.read_text().splitlines() if not line.startswith("#"))
    assert f"```yaml\n{body}\n```" in page
    env = {
        "TOOLGATE_PUBLIC_URL": "https://gateway.example.com",
        "GRANTS_KEY": base64.b64encode(os.urandom(32)).decode(),
        "IDP_ISSUER": "https://idp.example.com",
        "TICKETS_CLIENT_ID": "toolgate",
        "TICKETS_CLIENT_SECRET": "secret",
        "TICKETS_API_URL": "https://tickets.example.com",
        "SUPPORT_APP_KEY": "sk-app",
        "APP_CLIENT_ID": "support-app",
    }
    config = load_config(example, env)
    [connection] = config.connections
    assert connection.display_name == "Ticket desk"
    assert config.tools[0].auth is not None
