"""OpenAI's Codex CLI, unchanged, with its default features: ``codex exec`` against the
gateway in front of the scripted model. In one task the model runs a server tool (a
hidden round Codex never sees), Codex's own shell tool (handed back, run by Codex,
continued with the whole input resent) and ``apply_patch``, which Codex applies to a
file in a temporary directory. For a model Codex knows, ``apply_patch`` is a
``custom`` (freeform) tool; for one it does not, Codex offers ``multi_agent_v1`` as a
``namespace`` and patches through its shell. Both send ``web_search``, which the
gateway drops. ``make test`` installs the CLI from ``tests/node/package-lock.json``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.recorder import Answer, Recorder
from tests.support.scripted import TENANT_KEY, Harness, Model, asks, call, config, says, tool

CODEX = Path(__file__).resolve().parent.parent / "node" / "node_modules" / ".bin" / "codex"
KNOWN = "gpt-5.5"  # Codex sends apply_patch as a custom tool
UNKNOWN = "toolgate-local"  # Codex sends it as nothing: the model patches through the shell
SEED = "the seed is 7421"
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello from the gateway\n*** End Patch\n"


def codex() -> str:
    if shutil.which("node") is None or not CODEX.exists():
        if os.environ.get("TOOLGATE_SKIP_NODE") == "1":
            pytest.skip("TOOLGATE_SKIP_NODE=1")
        pytest.fail(
            "Node.js and the Codex CLI are needed: install Node.js 18+, then run "
            "`npm ci --prefix tests/node` (make test does), or set TOOLGATE_SKIP_NODE=1."
        )
    return str(CODEX)


def results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def agent(body: dict[str, Any]) -> dict[str, Any]:
    """An agent's task in four rounds: a server tool, Codex's shell, a patch, an answer.
    Requests Codex makes beside the task (no tools in them) get a plain answer."""
    offered = {t["function"]["name"] for t in body.get("tools") or []}
    if "exec_command" not in offered:
        return says("ok")
    done = results(body)
    if not done:
        return asks(call("string_length", {"s": "hello"}, "call_len"))
    if len(done) == 1:
        return asks(call("exec_command", {"cmd": "cat seed.txt"}, "call_shell"))
    if len(done) == 2:
        if "apply_patch" in offered:  # the custom tool, as a function of one string
            return asks(call("apply_patch", {"input": PATCH}, "call_patch"))
        heredoc = f"apply_patch <<'EOF'\n{PATCH}EOF\n"
        return asks(call("exec_command", {"cmd": heredoc}, "call_patch"))
    return says(f"All done: length {done[0]}, {done[1].strip()[:200]}")


def run_codex(
    harness: Harness,
    model_name: str,
    workdir: Path,
    script: Any = agent,
    options: tuple[str, ...] = (),
    environ: dict[str, str] | None = None,
    prompt: str = "Add hello.txt",
) -> tuple[Model, Any, str]:
    model = Model(script)
    tools = Recorder(lambda hit: Answer(body=b'{"length": 5}'))
    url = harness.serve(tools).url
    length = tool("string_length", f"{url}/len", {"s": {"type": "string"}})
    data = config(harness.serve(model.recorder).url, [length])
    data["models"] = [{"name": KNOWN, "upstream": "up"}, {"name": UNKNOWN, "upstream": "up"}]
    gateway = harness.gateway(data)
    home = workdir.parent / "codex-home"
    home.mkdir()
    provider = (
        f'model_providers.toolgate={{name="toolgate", base_url="{gateway.url}/v1", '
        'env_key="TOOLGATE_KEY", wire_api="responses"}'
    )
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "CODEX_HOME": str(home),
        "TOOLGATE_KEY": TENANT_KEY,
        **(environ or {}),
    }
    done = subprocess.run(
        [
            codex(),
            "exec",
            "--json",
            "--skip-git-repo-check",
            "--ephemeral",
            "--ignore-user-config",
            "--dangerously-bypass-approvals-and-sandbox",
            "--color",
            "never",
            "-C",
            str(workdir),
            "-c",
            "model_provider=toolgate",
            "-c",
            provider,
            *options,
            "-m",
            model_name,
            prompt,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return model, tools, done.stdout


@pytest.mark.parametrize("model_name", [KNOWN, UNKNOWN])
def test_codex_exec_runs_a_server_round_its_shell_and_a_patch_through_the_gateway(
    harness: Harness, tmp_path: Path, model_name: str
) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "seed.txt").write_text(SEED + "\n")
    model, tools, stdout = run_codex(harness, model_name, workdir)

    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    messages = [
        e["item"]["text"]
        for e in events
        if e.get("type") == "item.completed" and e["item"].get("type") == "agent_message"
    ]
    assert messages[-1].startswith('All done: length {"length":5}'), messages
    assert SEED in messages[-1]  # Codex ran its shell tool and sent back what it printed
    assert (workdir / "hello.txt").read_text() == "hello from the gateway\n"  # and patched
    assert len(tools.hits) == 1  # the server tool ran once, in the gateway

    task = [
        r
        for r in model.requests
        if "exec_command" in {t["function"]["name"] for t in r.get("tools") or []}
    ]
    offered = {t["function"]["name"] for t in task[0]["tools"]}
    assert "web_search" not in offered  # dropped, not a 400
    if model_name == KNOWN:
        assert "apply_patch" in offered
    else:
        assert "multi_agent_v1__spawn_agent" in offered
    # Every round after the first carries the hidden server round, put back.
    last = task[-1]["messages"]
    names = [c["function"]["name"] for m in last if m.get("tool_calls") for c in m["tool_calls"]]
    assert names[:1] == ["string_length"]
    assert len(task) == 4


DESK = Path(__file__).resolve().parent.parent / "support" / "desk_mcp.py"


def desk_agent(body: dict[str, Any]) -> dict[str, Any]:
    """Searches Codex's deferred MCP tools with its own ``tool_search``, calls the
    drawer tool once Codex has loaded it, then answers with what it gave."""
    offered = [t["function"]["name"] for t in body.get("tools") or []]
    if "tool_search" not in offered:
        return says("ok")
    last = body["messages"][-1]
    drawer = [name for name in offered if name.endswith("open_drawer")]
    if last["role"] == "tool" and last.get("tool_call_id") == "call_open":
        return says(f"Found: {last['content'][:200]}")
    if drawer:
        return asks(call(drawer[0], {"which": "top"}, "call_open"))
    return asks(call("tool_search", {"query": "open desk drawer", "limit": 4}, "call_find"))


def test_codex_searches_its_deferred_mcp_tools_through_the_gateway(
    harness: Harness, tmp_path: Path
) -> None:
    """Codex defers its MCP server's tools behind its own ``tool_search``: the model's
    search goes back to Codex as a ``tool_search_call``, Codex answers with the tools
    it loaded, the gateway offers them, and Codex runs the call the model makes."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    log = tmp_path / "desk.log"
    server = (
        f'mcp_servers.desk={{command="{sys.executable}", args=["{DESK}"], '
        f'env={{DESK_LOG="{log}"}}}}'
    )
    model, _, stdout = run_codex(
        harness, KNOWN, workdir, desk_agent, ("-c", server), prompt="What is in my drawer?"
    )
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    messages = [
        e["item"]["text"]
        for e in events
        if e.get("type") == "item.completed" and e["item"].get("type") == "agent_message"
    ]
    assert "drawer is open: it holds a key" in messages[-1], messages
    assert log.read_text() == "open_drawer top\n"  # Codex ran the loaded tool, once
    task = [r for r in model.requests if "tool_search" in str(r.get("tools"))]
    first = [t["function"]["name"] for t in task[0]["tools"]]
    assert not any(name.endswith("open_drawer") for name in first)  # deferred at first
    # A request after Codex answered the search offers it (under load Codex may ask
    # again before that, so not necessarily the second).
    later = [[t["function"]["name"] for t in request["tools"]] for request in task[1:]]
    assert any(name.endswith("open_drawer") for loaded in later for name in loaded)
