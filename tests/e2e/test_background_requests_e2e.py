"""A chat front-end's background requests get no server tools (issue 34 §6): Open
WebUI's title, tags and follow-up prompts (a user message beginning ``### Task:``),
a header a front-end sets, and any request with ``tool_choice: "none"`` — through the
openai SDK under uvicorn, asserting what the upstream was sent."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import GatewayConfig
from gateway.policy.background import last_user_text

from .conftest import ACME_KEY, MODEL, StackFactory
from .test_budget_e2e import one_tool_then_answer

TITLE = (
    "### Task:\nGenerate a concise, 3-5 word title with an emoji summarizing the chat "
    "history.\n### Chat History:\n<chat_history>\nUSER: how long is hello?\n</chat_history>"
)


def background(config: dict[str, Any]) -> dict[str, Any]:
    config["tenants"][0]["background"] = [
        {"message": r"^### Task:"},
        {"header": "x-title-request", "value": "t*"},
    ]
    return config


def _tools_sent(s: Any) -> list[str]:
    return [t["function"]["name"] for t in s.upstream.requests[-1].get("tools", [])]


def test_a_title_request_gets_no_server_tools(stack: StackFactory) -> None:
    s = stack(one_tool_then_answer, config=background)
    client = s.client(ACME_KEY)
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": TITLE}]
    )
    assert _tools_sent(s) == []
    assert raw.headers["x-toolgate-background"] == "no server tools"
    response = client.responses.create(
        model=MODEL, input=[{"role": "user", "content": [{"type": "input_text", "text": TITLE}]}]
    )
    assert response.output_text == "the answer"
    assert _tools_sent(s) == []
    client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "a title please"}],
        extra_headers={"x-title-request": "true"},
    )
    assert _tools_sent(s) == []
    # The user's own turn still has the tenant's tools.
    answer = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "how long is hello?"}]
    )
    assert answer.choices[0].message.content == "the answer"
    assert "string_length" in [
        t["function"]["name"] for t in s.upstream.requests[-2].get("tools", [])
    ]


def test_tool_choice_none_gets_no_server_tools_for_any_tenant(stack: StackFactory) -> None:
    s = stack(one_tool_then_answer)
    client_tool: Any = {
        "type": "function",
        "function": {"name": "mine", "parameters": {"type": "object", "properties": {}}},
    }
    client = s.client(ACME_KEY)
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "how long is hello?"}],
        tools=[client_tool],
        tool_choice="none",
    )
    assert _tools_sent(s) == ["mine"]  # the client's own, as sent
    assert s.upstream.requests[-1]["tool_choice"] == "none"
    assert raw.headers["x-toolgate-background"] == "no server tools"


@pytest.mark.parametrize(
    ("entries", "text"),
    [
        ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], "a"),
        ([{"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "image"}]}], "x"),
        ([{"role": "user", "content": [{"type": "input_text", "text": "y"}]}], "y"),
        ([{"role": "user", "content": 5}], ""),
        (["junk", {"role": "system", "content": "s"}], ""),
    ],
)
def test_the_last_user_text_of_either_surface(entries: list[Any], text: str) -> None:
    assert last_user_text(entries) == text


def test_a_rule_names_one_thing_and_runs_in_re2() -> None:
    base: dict[str, Any] = {
        "upstreams": [{"name": "u", "base_url": "http://u.test/v1"}],
        "models": [{"name": "m", "upstream": "u"}],
    }
    for rule, says in (
        ({}, "either a message pattern or a header"),
        ({"message": "a", "header": "h"}, "either a message pattern or a header"),
        ({"message": "(a)\\1"}, "not a pattern RE2 can run"),
    ):
        tenant = {"id": "t", "keys": ["sk-tttttttttttt"], "background": [rule]}
        with pytest.raises(ValueError, match=says):
            GatewayConfig.model_validate({**base, "tenants": [tenant]})
