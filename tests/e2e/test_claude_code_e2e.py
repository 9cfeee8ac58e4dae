"""Claude's own clients, unchanged, against the gateway's Messages surface (docs/claude.md)
with a chat-completions model behind it: Anthropic's TypeScript SDK, streamed and not,
and Claude Code (``claude -p``), which in one task gets a server tool's result from a
hidden round it never sees, then runs its own ``Write`` tool, handed back, and the turn
goes on. ``make test`` installs both from ``tests/node/package-lock.json``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.support.node import NODE_DIR, node
from tests.support.recorder import Answer, Recorder
from tests.support.scripted import MODEL, TENANT_KEY, Harness, Model, asks, call, config, says, tool

CLAUDE = NODE_DIR / "node_modules" / ".bin" / "claude"
TASK = "measure-the-word example and write its length to out.txt"


def gateway_with(harness: Harness, model: Model) -> tuple[str, Recorder]:
    tools = Recorder(lambda hit: Answer(body=b'{"length": 7}'))
    url = harness.serve(tools).url
    length = tool(
        "string_length",
        f"{url}/len",
        {"s": {"type": "string"}},
        http={"url": f"{url}/len", "query": {"s": "{s}"}},
        result={"pick": "length"},
    )
    gateway = harness.gateway(config(harness.serve(model.recorder).url, [length]))
    return gateway.url, tools


def sdk_script(body: dict[str, Any]) -> dict[str, Any]:
    last = body["messages"][-1]
    offered = {t["function"]["name"] for t in body.get("tools") or []}
    if last["role"] == "tool" and last["tool_call_id"] == "call_w":
        return says(f"It is {last['content']} in Oslo.")
    if last["role"] == "tool":
        return says(f"the length is {last['content']}")
    if "local_weather" in offered:
        return asks(call("local_weather", {"city": "Oslo"}, "call_w"))
    return asks(call("string_length", {"s": "example"}, "call_len"))


def test_anthropics_typescript_sdk_streams_and_hands_back(harness: Harness) -> None:
    runtime = node("@anthropic-ai/sdk")
    model = Model(sdk_script)
    url, tools = gateway_with(harness, model)
    done = subprocess.run(
        [runtime, str(NODE_DIR / "claude_messages.mjs"), url, TENANT_KEY, MODEL],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout)
    assert seen["streamed"] == "the length is 7"
    assert seen["streamedStop"] == "end_turn"
    assert seen["usage"]["input_tokens"] == 6
    assert seen["usage"]["output_tokens"] == 4
    assert seen["call"] == {"id": "call_w", "name": "local_weather", "input": {"city": "Oslo"}}
    assert seen["askedStop"] == "tool_use"
    assert seen["answer"] == "It is sunny in Oslo."
    assert len(tools.hits) == 1


def agent(body: dict[str, Any]) -> dict[str, Any]:
    """Claude Code's task in three rounds: a server tool, its own Write, an answer.
    Requests it makes beside the task (a title, a check) get a plain answer."""
    if TASK not in json.dumps(body["messages"]):
        return says("ok")
    last = body["messages"][-1]
    if last["role"] != "tool":
        return asks(call("string_length", {"s": "example"}, "call_len"))
    if last["tool_call_id"] == "call_len":
        written = {"file_path": "out.txt", "content": f"length {last['content']}\n"}
        return asks(call("Write", written, "call_write"))
    return says("Wrote out.txt.")


def test_claude_code_runs_a_server_round_and_its_own_write_through_the_gateway(
    harness: Harness, tmp_path: Path
) -> None:
    node("@anthropic-ai/claude-code")
    model = Model(agent)
    url, tools = gateway_with(harness, model)
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": TENANT_KEY,
        "ANTHROPIC_MODEL": MODEL,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": MODEL,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    done = subprocess.run(
        [str(CLAUDE), "-p", TASK, "--output-format", "json", "--allowedTools", "Write"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["is_error"] is False
    assert result["result"] == "Wrote out.txt."
    # Claude Code wrote it, with what the hidden round read.
    assert (work / "out.txt").read_text() == "length 7\n"
    assert len(tools.hits) == 1
    task = [r for r in model.requests if TASK in json.dumps(r["messages"])]
    offered = {t["function"]["name"] for t in task[0]["tools"]}
    assert {"string_length", "Write", "Bash"} <= offered
    # Claude Code never saw the server's call: its Write answer came back with it put back.
    last = task[-1]["messages"]
    assert [m.get("tool_call_id") for m in last if m["role"] == "tool"] == [
        "call_len",
        "call_write",
    ]
