"""Tools from every source in one answer, through the openai SDK: an inline HTTP tool,
an OpenAPI operation (its document fetched from a URL) and an MCP server's tool, with
allowlist globs over the imported names. The far sides record what they received."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from gateway.cli.main import main
from tests.support.mcp_servers import HeaderLog, tools_server
from tests.support.recorder import Answer, Received, Recorder
from tests.support.scripted import (
    MODEL,
    OTHER_KEY,
    TENANT_KEY,
    Harness,
    Model,
    asks,
    call,
    says,
)
from tests.support.servers import ServerThread, free_port

PETS = Path(__file__).parent.parent / "fixtures" / "openapi" / "pets-3.0.json"
PETS_KEY = "pets-query-key-CANARY-0006"
MCP_TOKEN = "mcp-bearer-CANARY-0007"


def pets_api(hit: Received) -> Answer:
    """Serves the pets document at /specs/pets.json and answers its operations."""
    if hit.raw_path == "/specs/pets.json":
        return Answer(body=PETS.read_bytes())
    if hit.raw_path.startswith("/v1/pets?"):
        pets = [{"id": 7, "name": "Rex", "owner_email": "x@y"}, {"id": 8, "name": "Ace"}]
        return Answer(body=json.dumps(pets).encode())
    return Answer(404, b'{"error": "no"}')


def stack(harness: Harness, model: Model) -> tuple[ServerThread, Recorder, Recorder, HeaderLog]:
    tools = Recorder(lambda hit: Answer(body=b'{"length": 5}'))
    pets = Recorder(pets_api)
    mcp = HeaderLog(tools_server().streamable_http_app())
    tools_url = harness.serve(tools).url
    pets_url = harness.serve(pets).url
    mcp_url = harness.serve(mcp).url
    upstream = harness.serve(model.recorder).url
    config: dict[str, Any] = {
        "upstreams": [{"name": "up", "base_url": f"{upstream}/v1", "api_key": "sk-up-0000"}],
        "models": [{"name": MODEL, "upstream": "up"}],
        "tools": [
            {
                "name": "string_length",
                "description": "Length of a string.",
                "parameters": {"type": "object", "properties": {"s": {"type": "string"}}},
                "http": {"url": f"{tools_url}/len"},
                "result": {"pick": "length"},
            }
        ],
        "openapi": [
            {
                "spec": f"{pets_url}/specs/pets.json",
                "prefix": "pets_",
                "auth": {"queryKey": PETS_KEY},
                "result": {"pick": "[].name"},
            }
        ],
        "mcp": [
            {
                "name": "demo",
                "url": f"{mcp_url}/mcp",
                "prefix": "demo_",
                "headers": {"Authorization": f"Bearer {MCP_TOKEN}"},
            }
        ],
        "tenants": [
            {"id": "acme", "keys": [TENANT_KEY], "tools": ["string_length", "pets_*", "demo_a*"]},
            {"id": "beta", "keys": [OTHER_KEY], "tools": ["demo_files_*"]},
        ],
    }
    return harness.gateway(config), tools, pets, mcp


def test_one_answer_uses_an_http_an_openapi_and_an_mcp_tool(harness: Harness) -> None:
    model = Model(
        asks(
            call("string_length", {"s": "hello"}, "c1"),
            call("pets_findPetsByStatus", {"status": "sold"}, "c2"),
            call("demo_add", {"a": 40, "b": 2}, "c3"),
        ),
        says("Done."),
    )
    gateway, tools, pets, mcp = stack(harness, model)
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=TENANT_KEY)
    harness.on_close(client.close)

    answer = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "go"}]
    )
    completion = answer.parse()
    assert completion.choices[0].message.content == "Done."
    assert answer.headers["x-toolgate-tool-calls"] == "3"

    offered = {t["function"]["name"] for t in model.requests[0]["tools"]}
    assert offered == {
        "string_length",
        "pets_getPetById",
        "pets_findPetsByStatus",
        "pets_deletePet",
        "pets_updatePet",
        "demo_add",
    }
    for definition in model.requests[0]["tools"]:  # nothing the model sees names a secret
        assert PETS_KEY not in json.dumps(definition)
    assert model.tool_results(1) == ["5", '["Rex","Ace"]', "42"]

    hit = next(h for h in pets.hits if h.raw_path.startswith("/v1/pets?"))
    assert hit.raw_path == f"/v1/pets?status=sold&key={PETS_KEY}"  # filled from the config
    assert [h.raw_path for h in tools.hits] == ["/len?s=hello"]
    assert all(h.get("authorization") == f"Bearer {MCP_TOKEN}" for h in mcp.seen)

    metrics = harness.client(gateway).get("/metrics").text
    for tool, source in (
        ("string_length", "http"),
        ("pets_findPetsByStatus", "openapi"),
        ("demo_add", "mcp"),
    ):
        series = f'outcome="ok",source="{source}",tenant="acme",tool="{tool}"'
        assert f"toolgate_tool_calls_total{{{series}}} 1.0" in metrics


def test_allowlist_globs_cover_imported_names_per_tenant(harness: Harness) -> None:
    model = Model(
        asks(call("demo_files_read", {"path": "/etc/x"}, "c1"), call("demo_add", {"a": 1, "b": 1})),
        says("ok"),
    )
    gateway, _, _, _ = stack(harness, model)
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=OTHER_KEY)
    harness.on_close(client.close)
    client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "go"}])
    assert [t["function"]["name"] for t in model.requests[0]["tools"]] == ["demo_files_read"]
    results = model.tool_results(1)
    assert results[0] == "contents of /etc/x"
    assert "not available" in json.loads(results[1])["error"]  # acme's tool, not beta's
    assert "demo_add" not in results[1].split("Available tools:")[1]


def test_check_reads_the_remote_sources_and_says_which_cannot_be_read(
    harness: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mcp_url = harness.serve(tools_server().streamable_http_app()).url
    pets_url = harness.serve(Recorder(pets_api)).url
    data: dict[str, Any] = {
        "upstreams": [{"name": "up", "base_url": "http://127.0.0.1:9/v1"}],
        "models": [{"name": MODEL, "upstream": "up"}],
        "openapi": [{"spec": f"{pets_url}/specs/pets.json", "prefix": "pets_"}],
        "mcp": [
            {"name": "demo", "url": f"{mcp_url}/mcp", "prefix": "demo_"},
            {"name": "gone", "url": f"http://127.0.0.1:{free_port()}/mcp", "timeout_s": 2},
        ],
    }
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump(data))
    assert main(["check", "--config", str(config)]) == 1
    out = capsys.readouterr().out
    assert f"openapi {pets_url}/specs/pets.json: ready, 4 tools" in out
    assert "mcp demo: ready, 6 tools" in out
    assert "mcp gone: down, 0 tools: cannot be reached" in out
    assert "1 tool sources could not be read (1 upstreams, 1 models, 10 tools" in out

    assert main(["check", "--config", str(config), "--offline"]) == 0
    out = capsys.readouterr().out
    assert "3 remote tool sources not read (--offline)" in out
    assert ": ok (1 upstreams, 1 models, 0 tools" in out

    data["mcp"] = data["mcp"][:1]
    config.write_text(yaml.safe_dump(data))
    assert main(["check", "--config", str(config)]) == 0


def test_tools_cli_lists_imported_tools_with_their_source(
    harness: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mcp_url = harness.serve(tools_server().streamable_http_app()).url
    data = {
        "upstreams": [{"name": "up", "base_url": "http://127.0.0.1:9/v1"}],
        "models": [{"name": MODEL, "upstream": "up"}],
        "openapi": [{"spec": str(PETS), "prefix": "pets_", "base_url": "http://127.0.0.1:9"}],
        "mcp": [{"name": "demo", "url": f"{mcp_url}/mcp", "prefix": "demo_"}],
    }
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump(data))
    assert main(["tools", "list", "--config", str(config)]) == 0
    rows = [line.split("\t")[:2] for line in capsys.readouterr().out.splitlines()]
    assert ["pets_getPetById", "openapi"] in rows
    assert ["demo_files_read", "mcp"] in rows
    assert (
        main(["tools", "call", "demo_add", "--config", str(config), "--args", '{"a": 1, "b": 2}'])
        == 0
    )
    assert json.loads(capsys.readouterr().out)["content"] == "3"
