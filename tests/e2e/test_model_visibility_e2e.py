"""No tenant learns that a model it may not use exists (issue 62 §7): on every surface,
another tenant's model is answered exactly as a model that does not exist is — the same
status, the same words — as OpenAI answers both. Before, chat answered 403 for one and
404 for the other, and so did Ollama's ``/api/show`` and ``/api/chat``."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.support.scripted import MODEL, OTHER_KEY, Harness, Model, config, says

UNKNOWN = "no-such-model"
ASKS: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    ("POST", "/v1/responses", {"input": "hi"}),
    ("POST", "/v1/messages", {"max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}),
    ("POST", "/v1/messages/count_tokens", {"messages": [{"role": "user", "content": "hi"}]}),
    ("POST", "/api/chat", {"messages": [{"role": "user", "content": "hi"}], "stream": False}),
    ("POST", "/api/generate", {"prompt": "hi", "stream": False}),
    ("POST", "/api/show", {}),
    ("POST", "/v1/embeddings", {"input": "hi"}),
]


def said(answer: httpx.Response, model: str) -> str:
    """The answer's words, the model's name and the request's id taken out."""
    text = answer.text.replace(model, "<model>")
    return re.sub(r"req_[0-9a-f]+", "<id>", text)


@pytest.mark.parametrize(("method", "path", "body"), ASKS, ids=[a[1] for a in ASKS])
def test_another_tenants_model_is_answered_as_an_unknown_one(
    harness: Harness, method: str, path: str, body: dict[str, Any]
) -> None:
    upstream = harness.serve(Model(says("hello")).recorder).url
    data = config(upstream, [])
    data["models"].append({"name": "beta-m", "upstream": "up"})
    data["tenants"][1]["models"] = ["beta-*"]  # the other tenant may not use MODEL
    gateway = harness.gateway(data)
    headers = {
        "authorization": f"Bearer {OTHER_KEY}",
        "x-api-key": OTHER_KEY,
        "anthropic-version": "2023-06-01",
    }

    def ask(model: str) -> httpx.Response:
        return httpx.request(
            method, f"{gateway.url}{path}", json={"model": model, **body}, headers=headers
        )

    theirs, unknown = ask(MODEL), ask(UNKNOWN)
    assert theirs.status_code == unknown.status_code == 404
    assert said(theirs, MODEL) == said(unknown, UNKNOWN)


def test_a_model_read_by_its_id_is_the_same(harness: Harness) -> None:
    upstream = harness.serve(Model(says("hello")).recorder).url
    data = config(upstream, [])
    data["models"].append({"name": "beta-m", "upstream": "up"})
    data["tenants"][1]["models"] = ["beta-*"]
    gateway = harness.gateway(data)
    headers = {"authorization": f"Bearer {OTHER_KEY}"}
    theirs = httpx.get(f"{gateway.url}/v1/models/{MODEL}", headers=headers)
    unknown = httpx.get(f"{gateway.url}/v1/models/{UNKNOWN}", headers=headers)
    assert theirs.status_code == unknown.status_code == 404
    assert said(theirs, MODEL) == said(unknown, UNKNOWN)
