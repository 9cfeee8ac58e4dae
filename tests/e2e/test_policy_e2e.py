"""Tool policy end to end (docs/design.md §13): taint across rounds and hand-backs, and
approvals bound to the exact call — through the stock SDKs, asserting what the tool
server actually received."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml
from pydantic import SecretStr

from gateway import GatewayConfig, create_app
from tests.support.fake_tools import INJECTION
from tests.support.fake_upstream import Reply, calls, say, tool_call, tool_results
from tests.support.node import NODE_DIR, node
from tests.support.servers import ServerThread, until

from .conftest import ACME_KEY, MODEL, Stack, StackFactory

APPROVER_KEY = "sk-acme-approver-key"
APPROVAL_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "toolgate_approval",
        "description": "Ask the user to approve a tool call.",
        "parameters": {"type": "object", "properties": {}},
    },
}


def policy(
    tenant: dict[str, Any] | None = None,
    rules: list[dict[str, Any]] | None = None,
    **top: Any,
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The test gateway with ``read_ticket`` (a GET whose output is someone else's
    words, injection included), the gateway's ``rules`` and the tenant's policy."""

    def change(config: dict[str, Any]) -> dict[str, Any]:
        base = config["tools"][0]["http"]["url"].rsplit("/", 1)[0]
        config["tools"].append(
            {
                "name": "read_ticket",
                "description": "Read a customer's ticket.",
                "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
                "http": {"url": f"{base}/ticket"},
            }
        )
        acme = config["tenants"][0]
        acme["tools"] = [*acme["tools"], "read_ticket"]  # a copy: the list is the module's
        config["policy"] = {
            "tools": [{"tools": ["read_ticket"], "output": "untrusted"}, *(rules or [])],
            **top,
        }
        config["tenants"][0]["policy"] = tenant or {}
        return config

    return change


def obeys_the_ticket(body: dict[str, Any]) -> Reply:
    """Reads the ticket, then does what it says: calls the write tool."""
    results = tool_results(body)
    if "r1" not in results:
        return calls(tool_call("r1", "read_ticket", {"id": "7"}))
    if "w1" not in results:
        return calls(tool_call("w1", "create_ticket", {"title": "pwned"}))
    return say(f"done: {results['w1']}")


def writes_at_once(body: dict[str, Any]) -> Reply:
    """Calls the write tool first, then answers with what it read back."""
    results = tool_results(body)
    if "w1" not in results:
        return calls(tool_call("w1", "create_ticket", {"title": "refund 42"}))
    return say(f"done: {results['w1']}")


def ticket_hits(s: Stack) -> list[str]:
    return [h.method for h in s.tools.hits if h.path == "/echo/tickets"]


def trace_calls(s: Stack, request_id: str) -> list[dict[str, Any]]:
    url = f"{s.base_url}/toolgate/traces/{request_id}"
    headers = {"authorization": f"Bearer {ACME_KEY}"}
    answer = until(lambda: httpx.get(url, headers=headers), lambda a: a.status_code == 200)
    assert answer is not None, f"no trace of {request_id}"
    found: list[dict[str, Any]] = answer.json()["tool_calls"]
    return found


# ------------------------------------------------------------------ taint


def test_an_injected_ticket_cannot_make_the_model_write(stack: StackFactory) -> None:
    s = stack(obeys_the_ticket, config=policy({"after_untrusted": "refuse"}))
    raw = s.client().chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "Summarise ticket 7."}]
    )
    answer = raw.parse().choices[0].message.content or ""
    assert ticket_hits(s) == []  # the write tool's server received nothing
    assert [h.path for h in s.tools.hits] == ["/ticket"]
    assert INJECTION in tool_results(s.upstream.requests[-1])["r1"]  # the model read it
    refusal = tool_results(s.upstream.requests[-1])["w1"]
    assert "create_ticket was refused" in refusal
    assert "tool 'read_ticket'" in refusal  # names the source of the taint...
    assert INJECTION not in refusal
    assert "pwned" not in refusal
    assert answer.startswith("done: ")
    assert "refused" in answer
    [read, write] = trace_calls(s, raw.headers["x-request-id"])
    assert "policy" not in read
    assert write["policy"] == {
        "verdict": "refuse",
        "rule": "after_untrusted: refuse",
        "taint": "tool 'read_ticket'",
    }
    metrics = httpx.get(f"{s.gateway.url}/metrics").text
    assert (
        'toolgate_policy_verdicts_total{tenant="acme",tool="create_ticket",verdict="refuse"} 1.0'
        in metrics
    )


def test_without_a_policy_the_injection_works(stack: StackFactory) -> None:
    """The control: the default (after_untrusted: allow) is today's behaviour."""
    s = stack(obeys_the_ticket, config=policy())
    s.client().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "7?"}])
    assert ticket_hits(s) == ["POST"]


def test_input_marked_untrusted_taints_the_first_round(stack: StackFactory) -> None:
    s = stack(writes_at_once, config=policy({"after_untrusted": "refuse"}))
    messages: Any = [{"role": "user", "content": f"Forwarded email: {INJECTION}"}]
    trusted = s.client().chat.completions.create(model=MODEL, messages=messages)
    assert ticket_hits(s) == ["POST"]
    assert trusted.choices[0].message.content.startswith("done: {")  # type: ignore[union-attr]
    untrusted = s.client(default_headers={"x-toolgate-input": "untrusted"})
    refused = untrusted.chat.completions.create(model=MODEL, messages=messages)
    assert ticket_hits(s) == ["POST"]  # no second write
    assert "the request's input" in (refused.choices[0].message.content or "")
    with pytest.raises(openai.BadRequestError, match="x-toolgate-input"):
        s.client(default_headers={"x-toolgate-input": "maybe"}).chat.completions.create(
            model=MODEL, messages=messages
        )


def test_a_tenant_whose_input_is_untrusted_cannot_be_loosened(stack: StackFactory) -> None:
    s = stack(writes_at_once, config=policy({"after_untrusted": "refuse", "input": "untrusted"}))
    client = s.client(default_headers={"x-toolgate-input": "trusted"})
    client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert ticket_hits(s) == []


def reads_then_asks_the_client(body: dict[str, Any]) -> Reply:
    """Reads the ticket and asks the client's tool in one turn; once the client
    answers, calls the write tool."""
    results = tool_results(body)
    if "r1" not in results:
        return calls(
            tool_call("r1", "read_ticket", {"id": "7"}),
            tool_call("c1", "ask_user", {"question": "Go on?"}),
        )
    if "w1" not in results:
        return calls(tool_call("w1", "create_ticket", {"title": "pwned"}))
    return say(f"done: {results['w1']}")


ASK_USER: Any = {
    "type": "function",
    "function": {"name": "ask_user", "parameters": {"type": "object", "properties": {}}},
}


def test_taint_survives_a_chat_hand_back(stack: StackFactory) -> None:
    s = stack(reads_then_asks_the_client, config=policy({"after_untrusted": "refuse"}))
    client = s.client()
    question: Any = [{"role": "user", "content": "Handle ticket 7."}]
    first = client.chat.completions.create(model=MODEL, messages=question, tools=[ASK_USER])
    message = first.choices[0].message
    assert [c.id for c in message.tool_calls or []] == ["c1"]
    history = [
        *question,
        message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": "c1", "content": "yes"},
    ]
    client.chat.completions.create(model=MODEL, messages=history, tools=[ASK_USER])
    assert ticket_hits(s) == []  # a new request, the taint came back with the turn
    assert "tool 'read_ticket'" in tool_results(s.upstream.requests[-1])["w1"]


def test_taint_survives_a_previous_response_id_chain(stack: StackFactory) -> None:
    s = stack(reads_then_asks_the_client, config=policy({"after_untrusted": "refuse"}))
    client = s.client()
    first = client.responses.create(
        model=MODEL, input="Handle ticket 7.", tools=[_responses_tool()]
    )
    [handed] = [item for item in first.output if item.type == "function_call"]
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": handed.call_id, "output": "yes"}],
        tools=[_responses_tool()],
    )
    assert ticket_hits(s) == []
    assert "refused" in second.output_text


def _responses_tool() -> Any:
    return {"type": "function", "name": "ask_user", "parameters": {"type": "object"}}


# ------------------------------------------------------------------ approvals


def approval_rules(**approvals: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return policy(
        {"approvals": {"ttl_s": 60, **approvals}} if approvals else {},
        rules=[{"tools": ["create_ticket"], "approval": "always"}],
    )


def two_replicas(
    stack: StackFactory, script: Callable[[dict[str, Any]], Reply], redis_url: str, prefix: str
) -> tuple[Stack, ServerThread]:
    """A stack on Redis, and a second gateway on the same configuration and Redis."""

    def on_redis(config: dict[str, Any]) -> dict[str, Any]:
        config = approval_rules()(config)
        config["store"] = {"url": redis_url, "prefix": prefix, "timeout_s": 2}
        return config

    s = stack(script, config=on_redis)
    data = _plain(s.app.state.gateway.config.model_dump(exclude_none=True))
    return s, ServerThread(create_app(GatewayConfig.model_validate(data))).start()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("approve", [True, False])
def test_a_responses_approval_round_trip_across_replicas(
    stack: StackFactory, redis_url: str, redis_prefix: str, stream: bool, approve: bool
) -> None:
    s, replica = two_replicas(stack, writes_at_once, redis_url, redis_prefix)
    try:
        _round_trip(s, replica.url, stream, approve)
    finally:
        replica.stop()


def _round_trip(s: Stack, other_url: str, stream: bool, approve: bool) -> None:
    first = _respond(s.client(), stream, input="Refund order 42.")
    [asked] = first.output
    assert asked.type == "mcp_approval_request"  # the SDK's own type parses it
    assert (asked.name, json.loads(asked.arguments)) == ("create_ticket", {"title": "refund 42"})
    assert asked.server_label == "toolgate"
    assert ticket_hits(s) == []  # nothing runs before the answer
    other = openai.OpenAI(base_url=f"{other_url}/v1", api_key=ACME_KEY, max_retries=0)
    answer: Any = {
        "type": "mcp_approval_response",
        "approval_request_id": asked.id,
        "approve": approve,
        "reason": "looks right" if approve else "not this customer",
    }
    final = _respond(other, stream, previous_response_id=first.id, input=[answer])
    if approve:
        assert ticket_hits(s) == ["POST"]
        assert final.output_text.startswith('done: {"method":"POST"')
    else:
        assert ticket_hits(s) == []
        assert "denied" in final.output_text
        assert "not this customer" in final.output_text
    # The model saw the call and its result, never the approval items.
    seen = s.upstream.requests[-1]["messages"]
    assert [m["role"] for m in seen] == ["user", "assistant", "tool"]
    assert seen[1]["tool_calls"][0]["function"]["name"] == "create_ticket"
    # An approval counts once: answering it again runs nothing more.
    again = other.responses.create(model=MODEL, previous_response_id=first.id, input=[answer])
    assert ticket_hits(s) == (["POST"] if approve else [])
    assert "no valid answer" in tool_results(s.upstream.requests[-1])["w1"]
    assert again.status == "completed"
    other.close()


def _respond(client: openai.OpenAI, stream: bool, **fields: Any) -> Any:
    if not stream:
        return client.responses.create(model=MODEL, **fields)
    with client.responses.stream(model=MODEL, **fields) as events:
        kinds = [event.type for event in events]
        final = events.get_final_response()
    assert kinds[-1] == "response.completed"
    return final


def test_the_full_input_replayed_continues_an_approval(stack: StackFactory) -> None:
    """Without previous_response_id: the client sends its whole input back, the
    approval request it was given included."""
    s = stack(writes_at_once, config=approval_rules())
    client = s.client()
    question: Any = [{"role": "user", "content": "Refund order 42."}]
    first = client.responses.create(model=MODEL, input=question, store=False)
    [asked] = first.output
    echo: Any = asked.model_dump()
    answer: Any = {
        "type": "mcp_approval_response",
        "approval_request_id": asked.id,
        "approve": True,
    }
    final = client.responses.create(model=MODEL, input=[*question, echo, answer], store=False)
    assert ticket_hits(s) == ["POST"]
    assert final.output_text.startswith("done: ")


def test_an_edited_approval_request_approves_nothing(stack: StackFactory) -> None:
    s = stack(writes_at_once, config=approval_rules())
    client = s.client()
    question: Any = [{"role": "user", "content": "Refund order 42."}]
    [asked] = client.responses.create(model=MODEL, input=question, store=False).output
    echo: Any = {**asked.model_dump(), "arguments": json.dumps({"title": "refund 4200"})}
    answer: Any = {
        "type": "mcp_approval_response",
        "approval_request_id": asked.id,
        "approve": True,
    }
    client.responses.create(model=MODEL, input=[*question, echo, answer], store=False)
    assert ticket_hits(s) == []
    assert "approves other arguments" in tool_results(s.upstream.requests[-1])["w1"]


def chat_first_leg(client: openai.OpenAI, stream: bool = False) -> tuple[list[Any], Any]:
    question: Any = [{"role": "user", "content": "Refund order 42."}]
    if stream:
        chunks = list(
            client.chat.completions.create(
                model=MODEL, messages=question, tools=[APPROVAL_TOOL], stream=True
            )
        )
        deltas = [c.choices[0] for c in chunks if c.choices]
        [delta_call] = [c for d in deltas for c in d.delta.tool_calls or []]
        assert [d.finish_reason for d in deltas if d.finish_reason] == ["tool_calls"]
        call = {
            "id": delta_call.id,
            "type": "function",
            "function": {
                "name": delta_call.function.name,  # type: ignore[union-attr]
                "arguments": delta_call.function.arguments,  # type: ignore[union-attr]
            },
        }
    else:
        completion = client.chat.completions.create(
            model=MODEL, messages=question, tools=[APPROVAL_TOOL]
        )
        assert completion.choices[0].finish_reason == "tool_calls"
        [tool_call_] = completion.choices[0].message.tool_calls or []
        call = tool_call_.model_dump()
    return [*question, {"role": "assistant", "content": None, "tool_calls": [call]}], call


@pytest.mark.parametrize("stream", [False, True])
def test_chat_approves_through_the_toolgate_approval_tool(
    stack: StackFactory, stream: bool
) -> None:
    s = stack(writes_at_once, config=approval_rules())
    client = s.client()
    history, call = chat_first_leg(client, stream)
    assert call["function"]["name"] == "toolgate_approval"
    asked = json.loads(call["function"]["arguments"])
    assert asked == {
        "tool": "create_ticket",
        "arguments": {"title": "refund 42"},
        "approval_id": call["id"],
    }
    assert "toolgate_approval" not in json.dumps(s.upstream.requests[0].get("tools"))
    assert ticket_hits(s) == []
    answer: Any = {"role": "tool", "tool_call_id": call["id"], "content": '{"approve": true}'}
    final = client.chat.completions.create(
        model=MODEL, messages=[*history, answer], tools=[APPROVAL_TOOL]
    )
    assert ticket_hits(s) == ["POST"]
    assert (final.choices[0].message.content or "").startswith("done: ")
    seen = s.upstream.requests[-1]["messages"]
    assert [m["role"] for m in seen] == ["user", "assistant", "tool"]
    assert [c["function"]["name"] for c in seen[1]["tool_calls"]] == ["create_ticket"]


def test_chat_denial_reaches_the_model_with_its_reason(stack: StackFactory) -> None:
    s = stack(writes_at_once, config=approval_rules())
    client = s.client()
    history, call = chat_first_leg(client)
    answer: Any = {
        "role": "tool",
        "tool_call_id": call["id"],
        "content": json.dumps({"approve": False, "reason": "wrong order"}),
    }
    final = client.chat.completions.create(
        model=MODEL, messages=[*history, answer], tools=[APPROVAL_TOOL]
    )
    assert ticket_hits(s) == []
    text = final.choices[0].message.content or ""
    assert "denied by the client" in text
    assert "wrong order" in text


def _answered(history: list[Any], call: dict[str, Any], **edits: Any) -> list[Any]:
    if edits:
        arguments = {**json.loads(call["function"]["arguments"]), **edits}
        call = {**call, "function": {**call["function"], "arguments": json.dumps(arguments)}}
        history = [*history[:-1], {**history[-1], "tool_calls": [call]}]
    return [*history, {"role": "tool", "tool_call_id": call["id"], "content": '{"approve":true}'}]


def test_every_binding_violation_is_refused(stack: StackFactory) -> None:
    s = stack(writes_at_once, config=approval_rules())
    client = s.client(default_headers={"x-toolgate-user": "alice"})

    def go(messages: list[Any], as_user: str = "alice") -> str:
        user = s.client(default_headers={"x-toolgate-user": as_user})
        user.chat.completions.create(model=MODEL, messages=messages, tools=[APPROVAL_TOOL])
        return tool_results(s.upstream.requests[-1]).get("w1", "")

    # Other arguments than the ones asked for.
    history, call = chat_first_leg(client)
    assert "approves other arguments" in go(_answered(history, call, arguments={"title": "x"}))
    # Another tool than the one asked for.
    history, call = chat_first_leg(client)
    assert "another tool" in go(_answered(history, call, tool="add"))
    # Another user of the same tenant: the held turn is not theirs (nothing is put
    # back), and the approval is not used up by them.
    history, call = chat_first_leg(client)
    go(_answered(history, call), as_user="mallory")
    assert ticket_hits(s) == []
    # Reused: the first use runs the call, the second finds nothing.
    assert go(_answered(history, call)).startswith('{"method":"POST"')
    assert ticket_hits(s) == ["POST"]
    assert "no valid answer" in go(_answered(history, call))
    assert ticket_hits(s) == ["POST"]


def test_a_late_approval_is_refused(stack: StackFactory) -> None:
    s = stack(writes_at_once, config=approval_rules(ttl_s=0.3))
    client = s.client()
    history, call = chat_first_leg(client)
    time.sleep(0.5)
    client.chat.completions.create(
        model=MODEL, messages=_answered(history, call), tools=[APPROVAL_TOOL]
    )
    assert ticket_hits(s) == []
    assert "no valid answer" in tool_results(s.upstream.requests[-1])["w1"]


def _plain(value: Any) -> Any:
    """A dumped configuration as YAML can carry it: secrets as their text."""
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def test_an_approval_asked_before_a_policy_change_is_refused(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = stack(writes_at_once, config=approval_rules())
    data = _plain(s.app.state.gateway.config.model_dump(exclude_none=True))
    data["server"]["admin_key"] = "sk-admin-reload"
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(data))
    app = create_app(GatewayConfig.model_validate(data), config_path=path)
    served = ServerThread(app).start()
    try:
        client = openai.OpenAI(base_url=f"{served.url}/v1", api_key=ACME_KEY, max_retries=0)
        history, call = chat_first_leg(client)
        data["tenants"][0]["policy"]["after_untrusted"] = "approve"  # the tenant tightens
        path.write_text(yaml.safe_dump(data))
        reloaded = httpx.post(
            f"{served.url}/admin/reload", headers={"authorization": "Bearer sk-admin-reload"}
        )
        assert reloaded.status_code == 200, reloaded.text
        client.chat.completions.create(
            model=MODEL, messages=_answered(history, call), tools=[APPROVAL_TOOL]
        )
        assert ticket_hits(s) == []
        assert "policy changed" in tool_results(s.upstream.requests[-1])["w1"]
        client.close()
    finally:
        served.stop()


def test_a_write_after_an_untrusted_read_asks_for_approval(stack: StackFactory) -> None:
    s = stack(obeys_the_ticket, config=policy({"after_untrusted": "approve"}))
    client = s.client()
    question: Any = [{"role": "user", "content": "Summarise ticket 7."}]
    first = client.chat.completions.create(model=MODEL, messages=question, tools=[APPROVAL_TOOL])
    [asked] = first.choices[0].message.tool_calls or []
    assert json.loads(asked.function.arguments)["tool"] == "create_ticket"  # type: ignore[union-attr]
    assert ticket_hits(s) == []
    history = [*question, first.choices[0].message.model_dump(exclude_none=True)]
    answer: Any = {"role": "tool", "tool_call_id": asked.id, "content": '{"approve": false}'}
    final = client.chat.completions.create(
        model=MODEL, messages=[*history, answer], tools=[APPROVAL_TOOL]
    )
    assert ticket_hits(s) == []
    assert "denied by the client" in (final.choices[0].message.content or "")
    # The read's result was kept with the held turn and put back for the model.
    seen = s.upstream.requests[-1]["messages"]
    assert [m["role"] for m in seen] == ["user", "assistant", "tool", "assistant", "tool"]
    assert INJECTION in seen[2]["content"]


def test_without_an_approver_the_call_is_refused(stack: StackFactory) -> None:
    s = stack(writes_at_once, config=approval_rules())
    answer = s.client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Refund order 42."}]
    )
    assert ticket_hits(s) == []
    assert "no one can approve it" in (answer.choices[0].message.content or "")


# ------------------------------------------------------------------ an operator


def operator_rules(**approvals: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    change = policy(
        {"approvals": {"operator": True, "admin_keys": [APPROVER_KEY], **approvals}},
        rules=[{"tools": ["create_ticket"], "approval": "always"}],
    )

    def with_webhook(config: dict[str, Any]) -> dict[str, Any]:
        config = change(config)
        base = config["tools"][0]["http"]["url"].rsplit("/", 1)[0]
        config["tenants"][0]["policy"]["approvals"]["webhook"] = f"{base}/echo/hook"
        return config

    return with_webhook


def _pending(s: Stack, key: str = APPROVER_KEY) -> list[dict[str, Any]]:
    answer = httpx.get(
        f"{s.base_url}/toolgate/approvals", headers={"authorization": f"Bearer {key}"}
    )
    assert answer.status_code == 200, answer.text
    data: list[dict[str, Any]] = answer.json()["data"]
    return data


def _decide(s: Stack, approval_id: str, body: dict[str, Any], key: str = APPROVER_KEY) -> Any:
    return httpx.post(
        f"{s.base_url}/toolgate/approvals/{approval_id}",
        headers={"authorization": f"Bearer {key}"},
        json=body,
    )


@pytest.mark.parametrize("approve", [True, False])
def test_an_operator_approves_while_the_stream_waits(stack: StackFactory, approve: bool) -> None:
    s = stack(writes_at_once, config=operator_rules())
    url = f"{s.base_url}/chat/completions"
    body = {
        "model": MODEL,
        "stream": True,
        "messages": [{"role": "user", "content": "Refund order 42."}],
    }
    lines: list[str] = []
    with httpx.stream(
        "POST", url, json=body, headers={"authorization": f"Bearer {ACME_KEY}"}, timeout=30
    ) as response:
        [pending] = until(lambda: _pending(s)) or []
        [hook] = until(lambda: [h for h in s.tools.hits if h.path == "/echo/hook"]) or []
        # the operator was told, with what waits
        told = json.loads(hook.body)
        assert told["type"] == "approval.pending"
        assert told["approval"]["id"] == pending["id"]
        assert told["approval"]["tool"] == "create_ticket"
        assert pending["tool"] == "create_ticket"
        assert json.loads(pending["arguments"]) == {"title": "refund 42"}
        assert pending["reason"] == "approval: always"
        assert ticket_hits(s) == []
        stream = response.iter_lines()
        for line in stream:  # the stream is kept alive meanwhile
            lines.append(line)
            if line.startswith(":"):
                break
        decided = _decide(s, pending["id"], {"approve": approve, "reason": "ok by ops"})
        assert decided.status_code == 200, decided.text
        again = _decide(s, pending["id"], {"approve": not approve})
        assert again.status_code in (404, 409)  # the first decision stands
        lines += stream
    assert any(line.startswith(":") for line in lines)  # keep-alive comments
    text = "".join(
        json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in lines
        if line.startswith("data: {") and json.loads(line[6:])["choices"]
    )
    assert ticket_hits(s) == (["POST"] if approve else [])
    assert text.startswith("done: ")
    assert ("denied by the operator" in text) is (not approve)
    assert _pending(s) == []


def test_an_operator_who_does_not_answer_refuses(stack: StackFactory) -> None:
    s = stack(writes_at_once, config=operator_rules(timeout_s=0.3))
    raw = s.client().chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "Refund order 42."}]
    )
    answer = raw.parse()
    assert ticket_hits(s) == []
    assert "did not come in time" in (answer.choices[0].message.content or "")
    # Issue 62 §8: a call refused after its approval timed out was not executed, and
    # the header counting executions agrees with the trace.
    assert raw.headers["x-toolgate-tool-calls"] == "0"
    [call] = trace_calls(s, raw.headers["x-request-id"])
    assert call["outcome"] == "denied"


def test_the_approval_routes_answer_to_their_keys_only(stack: StackFactory) -> None:
    s = stack(writes_at_once, config=operator_rules())
    for key in (ACME_KEY, "sk-nobody"):
        listed = httpx.get(
            f"{s.base_url}/toolgate/approvals", headers={"authorization": f"Bearer {key}"}
        )
        assert listed.status_code == 401
        assert listed.json()["error"]["type"] == "invalid_request_error"
    assert _decide(s, "mcpr_unknown", {"approve": True}).status_code == 404
    huge = _decide(s, "mcpr_unknown", {"approve": True, "reason": "x" * 20_000})
    assert huge.status_code == 413
    bad = _decide(s, "mcpr_unknown", {"approve": "yes"})
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "approve"


def test_the_node_sdk_approves_through_the_toolgate_approval_tool(stack: StackFactory) -> None:
    runtime = node()
    s = stack(writes_at_once, config=approval_rules())
    script = str(NODE_DIR / "chat_approval.mjs")
    done = subprocess.run(
        [runtime, script, s.base_url, ACME_KEY, MODEL], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["finish"] == "tool_calls"
    assert seen["call"]["function"]["name"] == "toolgate_approval"
    asked = json.loads(seen["call"]["function"]["arguments"])
    assert (asked["tool"], asked["arguments"]) == ("create_ticket", {"title": "refund 42"})
    assert ticket_hits(s) == ["POST"]
    assert seen["answer"].startswith('done: {"method":"POST"')
