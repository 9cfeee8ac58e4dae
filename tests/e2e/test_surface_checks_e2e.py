"""Each surface checks what it is sent as every other does, and answers as its own
clients expect (issue 62 §7): the same media checks on ``/v1/messages`` as on
``/api/chat`` (an image that is not base64, or an executable labelled ``image/png``, is
refused on both, never forwarded), and Anthropic's ``request-id`` on every answer."""

from __future__ import annotations

import base64
from typing import Any

import anthropic
import httpx
import pytest

from tests.support.scripted import MODEL, TENANT_KEY, Harness, Model, config, says

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 32).decode()
ELF = base64.b64encode(b"\x7fELF\x02\x01\x01" + b"\x00" * 32).decode()
NOT_BASE64 = "this is not base64 at all!"


def gateway_url(harness: Harness, model: Model) -> str:
    return harness.gateway(config(harness.serve(model.recorder).url, [])).url


def on_messages(url: str, data: str, media: str = "image/png") -> httpx.Response:
    image = {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    body = {
        "model": MODEL,
        "max_tokens": 16,
        "messages": [{"role": "user", "content": [image, {"type": "text", "text": "what?"}]}],
    }
    return httpx.post(f"{url}/v1/messages", json=body, headers={"x-api-key": TENANT_KEY})


def on_ollama(url: str, data: str) -> httpx.Response:
    body: dict[str, Any] = {
        "model": MODEL,
        "stream": False,
        "messages": [{"role": "user", "content": "what?", "images": [data]}],
    }
    headers = {"authorization": f"Bearer {TENANT_KEY}"}
    return httpx.post(f"{url}/api/chat", json=body, headers=headers)


@pytest.mark.parametrize(("data", "verdict"), [(PNG, 200), (ELF, 400), (NOT_BASE64, 400)])
def test_an_image_gets_one_verdict_on_every_surface(
    harness: Harness, data: str, verdict: int
) -> None:
    model = Model(says("a picture"))
    url = gateway_url(harness, model)
    answers = [on_messages(url, data), on_ollama(url, data)]
    assert [a.status_code for a in answers] == [verdict, verdict], [a.text for a in answers]
    sent = [str(r["messages"]) for r in model.requests]
    assert len(sent) == (2 if verdict == 200 else 0)  # refused: nothing forwarded
    if verdict == 400:
        assert "source.data' is not" in answers[0].json()["error"]["message"]


def test_an_image_labelled_as_another_kind_is_refused(harness: Harness) -> None:
    model = Model(says("a picture"))
    answer = on_messages(gateway_url(harness, model), PNG, media="image/jpeg")
    assert answer.status_code == 400
    assert "labelled 'image/jpeg'" in answer.json()["error"]["message"]
    assert model.requests == []


def test_every_messages_answer_carries_its_request_id(harness: Harness) -> None:
    url = gateway_url(harness, Model(says("hi")))
    client = anthropic.Anthropic(base_url=url, api_key=TENANT_KEY, max_retries=0)
    try:
        message = client.messages.create(
            model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
        counted = client.messages.with_raw_response.count_tokens(
            model=MODEL, messages=[{"role": "user", "content": "hi"}]
        )
    finally:
        client.close()
    assert message._request_id is not None
    assert message._request_id.startswith("req_")
    assert counted.headers["request-id"].startswith("req_")


def test_anthropics_client_lists_models_in_its_own_shape(harness: Harness) -> None:
    """``GET /v1/models`` with ``anthropic-version``: Anthropic's Models API, not OpenAI's
    list (the SDK's ``models.list()`` read no model before)."""
    url = gateway_url(harness, Model(says("hi")))
    client = anthropic.Anthropic(base_url=url, api_key=TENANT_KEY, max_retries=0)
    try:
        listed = [model.id for model in client.models.list()]
        one = client.models.retrieve(MODEL)
    finally:
        client.close()
    assert listed == [MODEL]
    assert (one.id, one.type) == (MODEL, "model")
    openai_shape = httpx.get(
        f"{url}/v1/models", headers={"authorization": f"Bearer {TENANT_KEY}"}
    ).json()
    assert openai_shape["object"] == "list"  # OpenAI's clients keep theirs


def test_an_image_a_client_tool_returned_reaches_a_chat_model_in_a_user_turn(
    harness: Harness,
) -> None:
    """Claude Code's ``Read`` of a screenshot: a ``tool_result`` holding an image. Chat
    completions' tool messages hold text only (OpenAI refuses an image there), so the
    image goes to a user turn right after the tool results."""
    model = Model(says("I see a screen."))
    url = gateway_url(harness, model)
    read: Any = {"name": "Read", "input_schema": {"type": "object", "properties": {}}}
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    history: Any = [
        {"role": "user", "content": "What is on my screen?"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [image]}],
        },
    ]
    client = anthropic.Anthropic(base_url=url, api_key=TENANT_KEY, max_retries=0)
    try:
        answer = client.messages.create(model=MODEL, max_tokens=64, messages=history, tools=[read])
    finally:
        client.close()
    assert answer.content[0].type == "text"
    [sent] = model.requests
    roles = [m["role"] for m in sent["messages"]]
    assert roles[-3:] == ["assistant", "tool", "user"]
    tool, user = sent["messages"][-2:]
    assert all(p["type"] == "text" for p in tool["content"])  # the contract: text only
    assert [p["type"] for p in user["content"]] == ["text", "image_url"]
    assert user["content"][1]["image_url"]["url"] == f"data:image/png;base64,{PNG}"
