"""The scripted Anthropic server is one the ``anthropic`` SDK itself talks to: its answers,
whole and streamed, parse into the SDK's types, and it refuses what the SDK's request
types do not allow (so the gateway's tests, which assert it refused nothing, can fail)."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import pytest

from tests.support.anthropic_upstream import Messages, request_errors, text, thinking, tool_use
from tests.support.scripted import Harness
from tests.support.servers import WAIT_S


@pytest.fixture
def sdk(harness: Harness) -> Iterator[tuple[anthropic.Anthropic, Messages]]:
    model = Messages([thinking("hm"), text("hello"), tool_use("f", {"a": [1, 2]})], key="k-1")
    server = harness.serve(model.recorder)
    client = anthropic.Anthropic(base_url=server.url, api_key="k-1", timeout=WAIT_S, max_retries=0)
    yield client, model
    client.close()


def test_the_sdk_parses_a_whole_answer(sdk: tuple[anthropic.Anthropic, Messages]) -> None:
    client, model = sdk
    answer = client.messages.create(
        model="claude-test", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
    )
    kinds = [block.type for block in answer.content]
    assert kinds == ["thinking", "text", "tool_use"]
    assert answer.stop_reason == "tool_use"
    assert answer.usage.cache_read_input_tokens == 3
    assert model.refused == []


def test_the_sdk_parses_a_streamed_answer(sdk: tuple[anthropic.Anthropic, Messages]) -> None:
    client, model = sdk
    with client.messages.stream(
        model="claude-test", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(pieces) == "hello"
    [thought, said, called] = final.content
    assert thought.type == "thinking"
    assert thought.signature == "sig-1"
    assert said.type == "text"
    assert said.text == "hello"
    assert called.type == "tool_use"
    assert called.input == {"a": [1, 2]}
    assert final.usage.output_tokens == 7
    assert model.refused == []


def test_the_fake_refuses_what_the_sdk_types_do_not_allow(
    sdk: tuple[anthropic.Anthropic, Messages],
) -> None:
    client, model = sdk
    assert request_errors({"model": "m", "messages": []})  # no max_tokens
    extra = {"model": "m", "max_tokens": 5, "messages": [], "seed": 1}
    assert any("seed" in error for error in request_errors(extra))
    loose = [{"role": "user", "content": [{"type": "text", "text": "x", "bogus": 1}]}]
    assert request_errors({"model": "m", "max_tokens": 5, "messages": loose})
    # A tool's own JSON Schema may hold any keyword.
    schema = {"type": "object", "properties": {}, "additionalProperties": False, "$defs": {}}
    tools = [{"name": "t", "input_schema": schema}]
    assert request_errors({"model": "m", "max_tokens": 5, "messages": [], "tools": tools}) == []
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(
            model="m",
            max_tokens=5,
            messages=[{"role": "user", "content": "x"}],
            extra_body={"seed": 1},
        )
    assert model.refused
    refused = httpx.post(
        str(client.base_url).rstrip("/") + "/v1/messages",
        json={},
        headers={"x-api-key": "wrong"},
        timeout=WAIT_S,
    )
    assert refused.status_code == 401
