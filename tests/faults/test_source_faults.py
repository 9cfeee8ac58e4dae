"""Faults from sources and the operator's own file (issue 19): a result cut inside a
secret shows none of it, a broken configuration file never quotes a key back, a
document that cannot be read again on reload is a failed source (its last tools stay,
it is retried) and never a 500, and a start-up probe of an IPv6-mapped origin answers."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gateway import GatewayConfig, create_app, load_config
from gateway.runtime.probe import probe_tools
from gateway.runtime.remote_sources import RemoteSources
from gateway.runtime.services import Gateway
from tests.support.hostile import HostileMcp, advertised
from tests.support.mcp_servers import LegacyOnly
from tests.support.recorder import Answer, Received, Recorder
from tests.support.scripted import (
    Harness,
    Model,
    asks,
    call,
    chat,
    config,
    says,
    tool,
)
from tests.support.servers import WAIT_S, ServerThread, wait_for

TOOL_KEY = "tool-own-key-CANARY-0040"
MCP_KEY = "mcp-own-key-CANARY-00041"
LITERAL_KEY = "sk-literal-in-file-CANARY-0042"
ADMIN_KEY = "admin-key-CANARY-0043"


def shows_part_of(text: str, secret: str, at_least: int = 3) -> bool:
    return any(secret[:n] in text for n in range(at_least, len(secret) + 1))


def keyed(name: str, url: str) -> dict[str, Any]:
    """A tool that sends ``TOOL_KEY`` in a header with every call."""
    made = tool(name, url)
    made["http"]["headers"] = {"x-key": TOOL_KEY}
    return made


def test_a_result_cut_inside_the_tools_own_key_shows_none_of_it(harness: Harness) -> None:
    def echo_key(hit: Received) -> Answer:  # the tool quotes its own credential back
        return Answer(body=("x" * 10 + hit.headers["x-key"] + " tail" * 5).encode())

    tools = harness.serve(Recorder(echo_key)).url
    cuts = range(10 + 1, 10 + len(TOOL_KEY))  # every place inside the key
    echoes = [keyed(f"echo{n}", f"{tools}/echo") | {"result": {"max_chars": n}} for n in cuts]
    model = Model(asks(*(call(f"echo{n}", {}, f"c{n}") for n in cuts)), says("done"))
    gateway = harness.gateway(config(harness.serve(model.recorder).url, echoes))
    assert harness.client(gateway).post("/v1/chat/completions", json=chat()).status_code == 200
    results = model.tool_results()
    assert len(results) == len(cuts)
    for result in results:
        assert "…[truncated" in result
        assert not shows_part_of(result, TOOL_KEY), result


def test_an_error_body_and_a_byte_limit_cut_inside_a_key_show_none_of_it(
    harness: Harness,
) -> None:
    def answer(hit: Received) -> Answer:
        body = ("y" * 490 + hit.headers["x-key"]).encode()
        return Answer(500 if hit.raw_path == "/fails" else 200, body)

    tools = harness.serve(Recorder(answer)).url
    fails = keyed("fails", f"{tools}/fails")
    capped = keyed("capped", f"{tools}/capped")
    capped["http"]["max_response_bytes"] = 500
    model = Model(asks(call("fails", {}, "c1"), call("capped", {}, "c2")), says("done"))
    gateway = harness.gateway(config(harness.serve(model.recorder).url, [fails, capped]))
    assert harness.client(gateway).post("/v1/chat/completions", json=chat()).status_code == 200
    for result in model.tool_results():
        assert not shows_part_of(result, TOOL_KEY), result


def test_an_mcp_result_cut_inside_the_servers_bearer_shows_none_of_it(harness: Harness) -> None:
    server = HostileMcp([advertised("echo", {"type": "object"})])
    url = harness.serve(LegacyOnly(server.streamable_http_app())).url
    model = Model(asks(call("echo", {"s": "z" * 20 + MCP_KEY + "w" * 60})), says("done"))
    data = config(harness.serve(model.recorder).url, [])
    data["mcp"] = [
        {
            "name": "h",
            "url": f"{url}/mcp",
            "headers": {"authorization": f"Bearer {MCP_KEY}"},
            "max_chars": 20 + 20,  # the JSON's `{"s": "` and 20 z's, then 13 of the key
        }
    ]
    data["tenants"][0]["tools"] = ["*"]
    gateway = harness.gateway(data)
    assert harness.client(gateway).post("/v1/chat/completions", json=chat()).status_code == 200
    (result,) = model.tool_results()
    assert "…[truncated" in result
    assert not shows_part_of(result, MCP_KEY), result


# --- Reloads -------------------------------------------------------------------------


def served_with_file(
    harness: Harness, path: Path, data: dict[str, Any]
) -> tuple[ServerThread, Gateway]:
    path.write_text(yaml.safe_dump(data))
    app = create_app(load_config(path), config_path=path)
    return harness.serve(app), app.state.gateway


def reload(gateway: ServerThread) -> httpx.Response:
    headers = {"authorization": f"Bearer {ADMIN_KEY}"}
    return httpx.post(f"{gateway.url}/admin/reload", headers=headers, timeout=30)


def test_a_yaml_error_on_a_line_holding_a_key_never_quotes_it(
    harness: Harness, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "gateway.yaml"
    data = config("http://127.0.0.1:9", [], server={"admin_key": ADMIN_KEY})
    gateway, _ = served_with_file(harness, path, data)
    path.write_text(
        f"upstreams:\n  - name: up\n    api_key: {LITERAL_KEY}: and a colon too many\nmodels: [\n"
    )
    answer = reload(gateway)
    assert answer.status_code == 422
    assert "invalid YAML" in answer.text
    assert "line 3" in answer.text
    assert LITERAL_KEY not in answer.text
    assert not shows_part_of(answer.text, LITERAL_KEY, 8)
    assert not shows_part_of(caplog.text, LITERAL_KEY, 8)


def deep(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


def test_a_document_that_cannot_be_read_again_keeps_its_tools_and_is_retried(
    harness: Harness, tmp_path: Path
) -> None:
    good: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "t", "version": "1"},
        "paths": {"/pets": {"get": {"operationId": "pets"}}},
    }
    served = {"doc": json.dumps(good).encode(), "new": deep(50_000)}

    def documents(hit: Received) -> Answer:
        return Answer(body=served[hit.raw_path.strip("/")])

    docs = harness.serve(Recorder(documents)).url
    path = tmp_path / "gateway.yaml"
    source = {"spec": f"{docs}/doc", "base_url": docs}
    data = config("http://127.0.0.1:9", [], server={"admin_key": ADMIN_KEY}, openapi=[source])
    data["tenants"][0]["tools"] = ["*"]
    gateway, made = served_with_file(harness, path, data)
    assert "pets" in made.registry
    served["doc"] = deep(50_000)  # the same source, now hostile
    data["openapi"].append({"spec": f"{docs}/new", "base_url": docs})  # and a new one
    path.write_text(yaml.safe_dump(data))
    answer = reload(gateway)
    assert answer.status_code == 200, answer.text
    warnings = " ".join(answer.json()["warnings"])
    assert f"openapi {docs}/doc: cannot be read again; its last tools stay" in warnings
    assert f"openapi {docs}/new: down (" in warnings
    assert "nests too deep" in warnings
    assert "pets" in made.registry  # the last good reading stays in use
    states = {source.label: source.state for source in made.runtimes.sources.all()}  # type: ignore[union-attr]
    assert states == {f"openapi {docs}/doc": "ready", f"openapi {docs}/new": "down"}
    served["new"] = json.dumps(good).encode()
    # The failed source is retried in the background and its tools arrive.
    assert wait_for(lambda: made.runtimes.sources.all()[1].state == "ready", 10)  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_a_probe_of_an_ipv6_mapped_origin_answers() -> None:
    data = config("http://127.0.0.1:9", [tool("mapped", "http://[::ffff:127.0.0.1]:9/x")])
    gateway = Gateway(GatewayConfig.model_validate(data))
    async with gateway:
        probes = await probe_tools(gateway)
    assert [probe.target for probe in probes] == ["http://[::ffff:127.0.0.1]:9"]
    assert not probes[0].ok


@pytest.mark.anyio
async def test_a_document_still_being_read_keeps_its_last_tools_then_takes_their_place(
    harness: Harness,
) -> None:
    """A valid document slow to read and build (over the reload's wait) is not "cannot
    be read again": its last tools stay until the new reading is done, which then takes
    their place (it used to be dropped, and its source never read again)."""
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "t", "version": "1"},
        "paths": {"/pets": {"get": {"operationId": "pets"}}},
    }
    slow = threading.Event()

    def documents(hit: Received) -> Answer:
        if slow.is_set():
            time.sleep(1.0)  # the document's own server, slow to answer
        return Answer(body=json.dumps(document).encode())

    docs = harness.serve(Recorder(documents)).url
    data = config("http://127.0.0.1:9", [], openapi=[{"spec": f"{docs}/doc", "base_url": docs}])
    configured = GatewayConfig.model_validate(data)
    changed = asyncio.Event()  # a rebuild was asked for
    async with Gateway(configured) as gateway:
        sources = RemoteSources(gateway.tool_transport, changed.set)
        first = await sources.plan(configured, 5.0)
        sources.adopt(first)
        [old] = sources.all()
        assert [tool.name for tool in sources.tools()] == ["pets"]
        document["paths"]["/owners"] = {"get": {"operationId": "owners"}}
        slow.set()
        changed.clear()
        again = await sources.plan(configured, 0.2)
        warnings = " ".join(again.warnings())
        assert "still being read after 0.2s" in warnings
        assert "cannot be read again" not in warnings
        sources.adopt(again)
        await sources.close_dropped(again)
        assert sources.all() == [old]  # its last tools, meanwhile
        await asyncio.wait_for(changed.wait(), WAIT_S)  # the new reading took its place
        assert sorted(tool.name for tool in sources.tools()) == ["owners", "pets"]
        await sources.aclose()
