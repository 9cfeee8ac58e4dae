"""Ollama's API as a surface (``POST /api/chat``, docs/ollama.md), driven by the official
``ollama`` Python library, sync and async, streamed and not: server tools run hidden,
the client's own tools come back as ``message.tool_calls`` (arguments as objects, no
ids) and its ``tool`` answers (by ``tool_name``) continue the turn; ``format`` with a
schema; the routes clients probe first; errors in Ollama's shape; any dialect behind."""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

import httpx
import ollama
import pytest

from tests.support.dialects import DIALECTS, ScriptedServer
from tests.support.node import NODE_DIR, node
from tests.support.recorder import Answer, Received, Recorder
from tests.support.scripted import MODEL, TENANT_KEY, Harness, asks, call, config, says, tool
from tests.support.servers import WAIT_S

WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "local_weather",
        "description": "The weather where the user is.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
PNG = (  # a one-pixel PNG
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5E"
    "rkJggg=="
)


@pytest.fixture(autouse=True)
def aws_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDMATRIX")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "matrix-secret")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")


def _tools(hit: Received) -> Answer:
    return Answer(body=b'{"length": 7}')


def start(
    harness: Harness, script: Any, dialect: str = "openai"
) -> tuple[ollama.Client, ScriptedServer, Recorder, str]:
    server = ScriptedServer(dialect, script)
    served = harness.serve(server.recorder).url
    tools = Recorder(_tools)
    at = harness.serve(tools).url
    length = tool(
        "string_length",
        f"{at}/len",
        {"s": {"type": "string"}},
        http={"url": f"{at}/len", "query": {"s": "{s}"}},
        result={"pick": "length"},
    )
    data = config(served, [length])
    data["upstreams"] = [server.upstream(served)]
    gateway = harness.gateway(data)
    headers = {"authorization": f"Bearer {TENANT_KEY}"}
    client = ollama.Client(host=gateway.url, headers=headers, timeout=WAIT_S)
    harness.on_close(client.close)
    return client, server, tools, gateway.url


def tool_results(view: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in view["messages"] if m["role"] == "tool"}


def mixed(view: dict[str, Any]) -> dict[str, Any]:
    """A server tool and the client's weather in one turn, then an answer."""
    done = tool_results(view)
    if len(done) >= 2:
        return says(f"sunny ({sorted(done.values())}) and 7 letters")
    offered = {t["function"]["name"] for t in view.get("tools") or []}
    if "local_weather" in offered:
        return asks(
            call("string_length", {"s": "example"}, "c_len"),
            call("local_weather", {"city": "Oslo"}, "c_weather"),
        )
    if done:
        return says(f"the length is {next(iter(done.values()))}")
    return asks(call("string_length", {"s": "example"}, "c_len"))


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("stream", [False, True])
def test_a_server_round_runs_hidden(harness: Harness, dialect: str, stream: bool) -> None:
    client, server, tools, _ = start(harness, mixed, dialect)
    asked: Any = {"model": MODEL, "messages": [{"role": "user", "content": "measure example"}]}
    if stream:
        parts = list(client.chat(**asked, stream=True))
        text = "".join(p.message.content or "" for p in parts)
        last = parts[-1]
        assert all(not p.done for p in parts[:-1])
    else:
        last = client.chat(**asked)
        text = last.message.content or ""
    assert text == "the length is 7"
    assert last.done
    assert last.done_reason == "stop"
    assert (last.prompt_eval_count or 0) > 0
    assert (last.eval_count or 0) > 0
    assert (last.total_duration or 0) > 0
    assert len(tools.hits) == 1
    assert server.refused == []


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("stream", [False, True])
def test_the_clients_tool_comes_back_and_its_answer_continues_the_turn(
    harness: Harness, dialect: str, stream: bool
) -> None:
    client, server, tools, _ = start(harness, mixed, dialect)
    history: list[Any] = [{"role": "user", "content": "weather and length"}]
    if stream:
        parts = list(client.chat(model=MODEL, messages=history, tools=[WEATHER], stream=True))
        calls = [c for p in parts for c in p.message.tool_calls or []]
        echoed = parts[-1].message
        assert parts[-1].done
    else:
        answer = client.chat(model=MODEL, messages=history, tools=[WEATHER])
        calls = list(answer.message.tool_calls or [])
        echoed = answer.message
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [
        ("local_weather", {"city": "Oslo"})
    ]
    assert len(tools.hits) == 1
    # The client runs its tool and answers as Ollama's clients do: by the tool's name.
    history.append({"role": "assistant", "content": echoed.content or "", "tool_calls": calls})
    history.append({"role": "tool", "content": "sunny", "tool_name": "local_weather"})
    done = client.chat(model=MODEL, messages=history, tools=[WEATHER])
    assert done.message.content == "sunny (['7', 'sunny']) and 7 letters"
    assert len(tools.hits) == 1  # the server's half of the turn was put back, not run again
    assert server.refused == []


def test_the_async_client_and_a_format_schema(harness: Harness) -> None:
    _client, server, _, url = start(harness, lambda view: says('{"n": 7}'))

    async def ask() -> ollama.ChatResponse:
        async_client = ollama.AsyncClient(
            host=url, headers={"authorization": f"Bearer {TENANT_KEY}"}, timeout=WAIT_S
        )
        schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
        answer = await async_client.chat(
            model=MODEL,
            messages=[{"role": "user", "content": "a number", "images": [PNG]}],
            format=schema,
            options={"temperature": 0.2, "num_predict": 64, "stop": ["END"], "seed": 3},
            keep_alive="5m",
        )
        await async_client.close()  # type: ignore[no-untyped-call]
        assert isinstance(answer, ollama.ChatResponse)
        return answer

    answer = asyncio.run(ask())
    assert json.loads(answer.message.content or "") == {"n": 7}
    [sent] = server.views
    assert sent["response_format"]["json_schema"]["schema"]["properties"] == {
        "n": {"type": "integer"}
    }
    assert (sent["temperature"], sent["max_tokens"], sent["stop"], sent["seed"]) == (
        0.2,
        64,
        ["END"],
        3,
    )
    assert "keep_alive" not in sent
    assert "options" not in sent
    image = sent["messages"][0]["content"][1]
    assert image["image_url"]["url"].startswith("data:image/png;base64,iVBOR")


def test_what_clients_probe_first_and_what_they_may_not_do(harness: Harness) -> None:
    client, server, _, url = start(harness, lambda view: says("x"))
    assert [m.model for m in client.list().models] == [MODEL]
    assert [m.model for m in client.ps().models] == [MODEL]
    shown = client.show(MODEL)
    assert {"tools", "vision"} <= set(shown.capabilities or [])  # images are passed on
    assert httpx.get(f"{url}/api/version").json()["version"]
    # Issue 62 §7: what Ollama's own clients expect of their servers.
    root = httpx.get(f"{url}/")
    assert (root.status_code, root.text) == (200, "Ollama is running")
    headers = {"authorization": f"Bearer {TENANT_KEY}"}
    older = httpx.post(f"{url}/api/show", json={"name": MODEL}, headers=headers)
    assert older.status_code == 200, older.text  # the older field, as old clients send it
    assert client.show(f"{MODEL}:latest").capabilities  # Ollama's: m:latest is m
    asked = len(server.recorder.hits)
    loaded = client.generate(model=MODEL)  # the libraries' "load the model": no round
    assert (loaded.done, loaded.done_reason, loaded.response) == (True, "load", "")
    streamed = list(client.generate(model=MODEL, stream=True))
    assert [c.done_reason for c in streamed] == ["load"]
    assert len(server.recorder.hits) == asked
    latest = client.chat(model=f"{MODEL}:latest", messages=[{"role": "user", "content": "hi"}])
    assert latest.message.content == "x"
    unknown = httpx.post(f"{url}/api/embedz", json={}, headers=headers)
    assert unknown.status_code == 404
    assert set(unknown.json()) == {"error"}  # Ollama's shape, not OpenAI's
    with pytest.raises(ollama.ResponseError) as missing:
        client.show("no-such-model")
    assert missing.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as refused:
        client.pull(MODEL)
    assert refused.value.status_code == 403
    assert "configuration" in refused.value.error
    with pytest.raises(ollama.ResponseError) as bad:
        client.chat(model=MODEL, messages=[])
    assert bad.value.status_code == 400
    assert "messages" in bad.value.error
    denied = httpx.post(
        f"{url}/api/chat", json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]}
    )
    assert denied.status_code == 401
    assert set(denied.json()) == {"error"}


@pytest.mark.parametrize(
    "arguments",
    ['{"city": "Oslo"}', ["Oslo"], "x" * 100],
    ids=["as-a-string", "as-an-array", "a-long-string"],
)
def test_hostile_tool_calls_are_refused_clearly(harness: Harness, arguments: Any) -> None:
    _client, _, _, url = start(harness, lambda view: says("x"))
    turn = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": "f", "arguments": arguments}}],
    }
    body = {"model": MODEL, "stream": False, "messages": [{"role": "user", "content": "x"}, turn]}
    answer = httpx.post(
        f"{url}/api/chat", json=body, headers={"authorization": f"Bearer {TENANT_KEY}"}
    )
    assert answer.status_code == 400
    assert "arguments" in answer.json()["error"]


@pytest.mark.parametrize("stream", [False, True])
def test_generate_answers_a_prompt_with_no_tools(harness: Harness, stream: bool) -> None:
    def plain(view: dict[str, Any]) -> dict[str, Any]:
        return says("no tools here" if not view.get("tools") else "tools were offered")

    client, server, tools, _ = start(harness, plain)
    if stream:
        parts = list(
            client.generate(model=MODEL, prompt="measure example", system="Be brief.", stream=True)
        )
        text, last = "".join(p.response or "" for p in parts), parts[-1]
    else:
        last = client.generate(model=MODEL, prompt="measure example", system="Be brief.")
        text = last.response or ""
    assert isinstance(last, ollama.GenerateResponse)
    assert last.done
    assert text == "no tools here"
    [sent] = server.views
    assert "tools" not in sent
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "measure example"},
    ]
    assert tools.hits == []


def test_a_stream_that_fails_midway_ends_with_an_error_line(harness: Harness) -> None:
    def failing(hit: Received) -> Answer:
        chunk = {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": MODEL,
            "choices": [{"index": 0, "delta": {"content": "par"}, "finish_reason": None}],
        }
        error = {"error": {"message": "the model crashed"}}
        return Answer(
            headers=[("content-type", "text/event-stream")],
            chunks=[
                b"data: " + json.dumps(chunk).encode() + b"\n\n",
                b"data: " + json.dumps(error).encode() + b"\n\n",
            ],
        )

    upstream = harness.serve(Recorder(failing)).url
    gateway = harness.gateway(config(upstream, []))
    lines: list[dict[str, Any]] = []
    with httpx.stream(
        "POST",
        f"{gateway.url}/api/chat",
        json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]},
        headers={"authorization": f"Bearer {TENANT_KEY}"},
        timeout=WAIT_S,
    ) as answer:
        assert answer.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in answer.iter_lines() if line]
    assert lines[0]["message"]["content"] == "par"
    assert "the model crashed" in lines[-1]["error"]
    client = ollama.Client(host=gateway.url, headers={"authorization": f"Bearer {TENANT_KEY}"})
    harness.on_close(client.close)
    streamed = client.chat(model=MODEL, messages=[{"role": "user", "content": "x"}], stream=True)
    with pytest.raises(ollama.ResponseError, match="the model crashed"):
        list(streamed)


def test_a_body_past_the_limit_is_refused_in_ollamas_shape(harness: Harness) -> None:
    """A line past ``server.max_body_bytes`` (the default is 32 MiB; a small bound here,
    so the whole body is sent before the answer and no connection is cut mid-send)."""
    model = ScriptedServer("openai", lambda view: says("x"))
    data = config(harness.serve(model.recorder).url, [])
    data["server"] = {"max_body_bytes": 4096, "large_body_bytes": 1024}
    url = harness.gateway(data).url
    line = {"model": MODEL, "messages": [{"role": "user", "content": "x" * 10_000}]}
    answer = httpx.post(
        f"{url}/api/chat",
        content=json.dumps(line).encode(),
        headers={"authorization": f"Bearer {TENANT_KEY}", "content-type": "application/json"},
        timeout=WAIT_S,
    )
    assert answer.status_code == 413
    assert set(answer.json()) == {"error"}
    assert model.recorder.hits == []


def test_ollama_js_streams_and_hands_back(harness: Harness) -> None:
    runtime = node("ollama")
    _, server, tools, url = start(harness, mixed)
    done = subprocess.run(
        [runtime, str(NODE_DIR / "ollama_chat.mjs"), url, TENANT_KEY, MODEL],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout)
    assert seen["streamed"] == "the length is 7"
    assert seen["done"] is True
    assert seen["evalCount"] > 0
    assert seen["calls"] == [{"function": {"name": "local_weather", "arguments": {"city": "Oslo"}}}]
    assert seen["answer"] == "sunny (['7', 'sunny']) and 7 letters"
    assert len(tools.hits) == 2  # one a request: the second's server half was put back
    assert server.refused == []


def _strictly(kind: type[Any], value: dict[str, Any]) -> None:
    """``value`` parses as the library's ``kind`` and holds no field it does not know
    (the library's models would pass such a field over silently)."""
    kind.model_validate(value)
    fields = kind.model_fields
    known = set(fields) | {field.alias for field in fields.values() if field.alias}
    assert set(value) <= known, set(value) - known


def test_every_answer_is_of_the_librarys_own_types(harness: Harness) -> None:
    _, _, _, url = start(harness, mixed)
    headers = {"authorization": f"Bearer {TENANT_KEY}"}
    ask = {"model": MODEL, "messages": [{"role": "user", "content": "measure example"}]}
    whole = httpx.post(f"{url}/api/chat", json={**ask, "stream": False}, headers=headers).json()
    _strictly(ollama.ChatResponse, whole)
    _strictly(ollama.Message, whole["message"])
    with httpx.stream("POST", f"{url}/api/chat", json=ask, headers=headers) as streamed:
        for line in streamed.iter_lines():
            _strictly(ollama.ChatResponse, json.loads(line))
    generated = {"model": MODEL, "prompt": "hi", "stream": False}
    _strictly(
        ollama.GenerateResponse,
        httpx.post(f"{url}/api/generate", json=generated, headers=headers).json(),
    )
    _strictly(ollama.ListResponse, httpx.get(f"{url}/api/tags", headers=headers).json())
    _strictly(ollama.ProcessResponse, httpx.get(f"{url}/api/ps", headers=headers).json())
    shown = httpx.post(f"{url}/api/show", json={"model": MODEL}, headers=headers).json()
    _strictly(ollama.ShowResponse, shown)
