from __future__ import annotations

import hashlib
import re
import textwrap
from pathlib import Path

import pytest

from gateway import ConfigError, load_config
from gateway.cli.main import main
from gateway.runtime.services import Gateway

ROOT = Path(__file__).resolve().parents[2]

BASE = """
upstreams:
  - {name: up, base_url: "http://127.0.0.1:1/v1"}
models:
  - {name: m1, upstream: up}
tools:
  - name: t1
    parameters: {type: object, properties: {s: {type: string}}}
    http: {url: "http://127.0.0.1:2/t1"}
"""


def write(tmp_path: Path, text: str, name: str = "gateway.yaml") -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_the_example_config_loads() -> None:
    config = load_config(ROOT / "config" / "gateway.yaml", env={})
    assert {t.name for t in config.tools} == {"string_length", "add", "sqrt", "crm_lookup"}
    assert config.open_mode
    assert config.store.url == "memory://"
    assert config.models[1].target == "qwen2.5:7b"


def test_an_absolute_tool_files_pattern_is_taken(tmp_path: Path) -> None:
    """Issue 62 §8: an absolute glob ended ``toolgate check`` in a traceback."""
    write(tmp_path, "- name: t2\n  http: {url: 'http://tools.local/t2'}\n", "abs/more.yaml")
    path = write(tmp_path, BASE + f"tool_files: ['{tmp_path}/abs/*.yaml']\n")
    assert [t.name for t in load_config(path).tools] == ["t1", "t2"]


def test_env_substitution_and_tool_files(tmp_path: Path) -> None:
    write(tmp_path, "- name: t2\n  http: {url: '${TOOLS}/t2'}\n", "tools/more.yaml")
    path = write(
        tmp_path,
        BASE
        + """
tool_files: [tools/*.yaml]
tenants:
  - id: acme
    keys: ["${ACME_KEY}"]
    tools: ["t*"]
""",
    )
    config = load_config(path, env={"ACME_KEY": "k1", "TOOLS": "http://tools.local"})
    assert [t.name for t in config.tools] == ["t1", "t2"]
    assert config.tools[1].http.url == "http://tools.local/t2"
    assert config.tenants is not None
    assert config.tenants[0].keys[0].get_secret_value() == "k1"
    assert "k1" not in repr(config)  # secrets stay out of reprs and logs


DIGEST = hashlib.sha256(b"k").hexdigest()


@pytest.mark.parametrize(
    ("extra", "env", "fragments"),
    [
        ("tenants: [{id: a, keys: ['${ACME_KEY}']}]", {}, ["tenants[0].keys[0]", "ACME_KEY"]),
        (
            "tenants: [{id: a, keys: [k], tools: [nope*]}]",
            {},
            ["tenants[0].tools[0]", "matches no tool"],
        ),
        (
            "tenants: [{id: a, keys: [k], models: [gpt*]}]",
            {},
            ["tenants[0].models[0]", "matches no model"],
        ),
        ("tenants: [{id: a}]", {}, ["tenants[0]", "no keys"]),
        (
            f"tenants: [{{id: a, keys: [k]}}, {{id: b, key_sha256: ['{DIGEST}']}}]",
            {},
            ["more than once", "a, b"],
        ),
        ("tenants: [{id: a, key_sha256: [abc]}]", {}, ["key_sha256[0]", "64 hexadecimal"]),
        ("tenants: [{id: a, keys: ['']}]", {}, ["tenants[0].keys", "empty"]),
        ("tenants: [{id: 'bad id', keys: [k]}]", {}, ["tenants[0].id"]),
        ("server: {port: 99999}", {}, ["server.port"]),
        ("surprise: 1", {}, ["surprise", "Extra inputs"]),
        ("tool_files: [missing/*.yaml]", {}, ["tool_files[0]", "matches no file"]),
        ("tool_files: ['']", {}, ["tool_files pattern ''", "cannot be used"]),
    ],
)
def test_invalid_configs_name_file_path_and_reason(
    tmp_path: Path, extra: str, env: dict[str, str], fragments: list[str]
) -> None:
    path = write(tmp_path, BASE + extra + "\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env=env)
    message = str(caught.value)
    assert message.startswith(str(path))
    for fragment in fragments:
        assert fragment in message
    assert DIGEST not in message


@pytest.mark.parametrize(
    ("replace", "by", "fragments"),
    [
        (
            "upstream: up}",
            "upstream: nowhere}",
            ["models[0].upstream", "unknown upstream 'nowhere'"],
        ),
        ("name: t1", "name: 't 1'", ["tools[0].name", "does not match"]),
        ("type: string", "type: strnig", ["tools[0].parameters", "invalid JSON Schema"]),
        ('url: "http://127.0.0.1:2/t1"', 'url: "http://127.0.0.1:2/{x}"', ["tools[0]", "x"]),
        ("models:", "models: 5\nx:", ["models"]),
    ],
)
def test_invalid_sections(tmp_path: Path, replace: str, by: str, fragments: list[str]) -> None:
    assert replace in BASE
    path = write(tmp_path, BASE.replace(replace, by, 1))
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_duplicate_tools_name_both_places(tmp_path: Path) -> None:
    write(tmp_path, "- name: t1\n  http: {url: 'http://x.example/'}\n", "tools/dup.yaml")
    path = write(tmp_path, BASE + "tool_files: [tools/*.yaml]\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    message = str(caught.value)
    assert "duplicate tool name 't1'" in message
    assert "gateway.yaml: tools[0]" in message
    assert "dup.yaml: [0]" in message


def test_errors_in_tool_files_name_that_file(tmp_path: Path) -> None:
    tool_file = write(tmp_path, "tools:\n  - name: t2\n    http: {url: 'ftp://x'}\n", "t/bad.yaml")
    path = write(tmp_path, BASE + "tool_files: [t/bad.yaml]\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    assert str(caught.value).startswith(f"{tool_file}: tools[0].http.url")


def test_yaml_errors_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(write(tmp_path, "upstreams: [\n"), env={})
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.yaml", env={})
    with pytest.raises(ConfigError, match="mapping at the top level"):
        load_config(write(tmp_path, "- 1\n"), env={})


def test_check_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write(tmp_path, BASE)
    assert main(["check", "--config", str(good)]) == 0
    assert "ok (1 upstreams, 1 models, 1 tools, no tenants (open mode))" in capsys.readouterr().out
    bad = write(tmp_path, BASE.replace("upstream: up}", "upstream: x}"), "bad.yaml")
    assert main(["check", "--config", str(bad)]) == 2
    assert "unknown upstream 'x'" in capsys.readouterr().err


PETS = ROOT / "tests" / "fixtures" / "openapi" / "pets-3.0.json"


def test_openapi_files_are_found_beside_the_config_and_their_tools_are_allowlisted(
    tmp_path: Path,
) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "pets.json").write_bytes(PETS.read_bytes())
    path = write(
        tmp_path,
        BASE
        + """
openapi:
  - spec: specs/pets.json
    base_url: http://pets.internal/v1
    prefix: pets_
    include: [getPetById, findPetsByStatus]
    auth: {queryKey: "${PETS_KEY}"}
tenants:
  - {id: acme, keys: [k1], tools: ["pets_*"]}
""",
    )
    config = load_config(path, env={"PETS_KEY": "pets-key-123"})
    assert config.openapi[0].spec == str(tmp_path / "specs" / "pets.json")
    gateway = Gateway(config)
    assert gateway.tenants.all()[0].tools == ("pets_getPetById", "pets_findPetsByStatus")
    assert gateway.registry.get("pets_getPetById") is not None
    assert "pets-key-123" in gateway.redactor.secrets  # the configured secret is redacted


@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        ("{spec: nowhere.json}", "openapi[0].spec: no file 'nowhere.json'"),
        (f"{{spec: {PETS}, include: [nope]}}", "include 'nope' matches no operation"),
    ],
)
def test_openapi_problems_name_the_source(tmp_path: Path, entry: str, fragment: str) -> None:
    path = write(tmp_path, BASE + f"openapi:\n  - {entry}\n")
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        load_config(path, env={})


def test_an_openapi_tool_clashing_with_an_inline_one_names_both(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        BASE.replace("name: t1", "name: getPetById")
        + f"openapi:\n  - {{spec: {PETS}, base_url: 'http://x/'}}\n",
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    message = str(caught.value)
    assert "duplicate tool name 'getPetById'" in message
    assert "gateway.yaml: tools[0]" in message
    assert f"{PETS}: GET /pets/{{petId}}" in message


def test_an_allowlist_pattern_for_an_openapi_url_is_checked_once_fetched(tmp_path: Path) -> None:
    text = BASE + (
        "openapi:\n  - {spec: 'http://specs.internal/pets.json', prefix: pets_}\n"
        "tenants:\n  - {id: acme, keys: [k1], tools: [t1, 'pets_*']}\n"
    )
    assert load_config(write(tmp_path, text), env={}).openapi[0].is_url
    wrong = text.replace("'pets_*'", "'cats_*'")
    with pytest.raises(ConfigError, match="'cats_\\*' matches no tool"):
        load_config(write(tmp_path, wrong), env={})


def test_a_pattern_for_remote_tools_that_match_nothing_yet_is_a_warning(tmp_path: Path) -> None:
    text = BASE + (
        "mcp:\n  - {name: docs, url: 'http://127.0.0.1:9/mcp', prefix: docs_}\n"
        "tenants:\n  - {id: acme, keys: [k1], tools: [t1, 'docs_*']}\n"
    )
    gateway = Gateway(load_config(write(tmp_path, text), env={}))
    assert "tenants[0].tools[1]: 'docs_*' matches no tool (yet)" in gateway.runtime.warnings
    assert gateway.tenants.all()[0].tools == ("t1",)
