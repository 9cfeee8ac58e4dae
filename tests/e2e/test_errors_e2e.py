"""Errors as the OpenAI SDK sees them: the right status, the right exception class, and
an envelope that validates against OpenAI's schema."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.support.fake_upstream import Fail
from tests.support.schema import assert_valid, assert_valid_error

from .conftest import ACME_KEY, BETA_KEY, MODEL, StackFactory

USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("key", "model", "exception", "status", "code"),
    [
        ("sk-wrong", MODEL, openai.AuthenticationError, 401, "invalid_api_key"),
        (ACME_KEY, "no-such-model", openai.NotFoundError, 404, "model_not_found"),
        # Another tenant's model is as unknown as none (issue 62 §7: OpenAI's answer)
        (ACME_KEY, "other-model", openai.NotFoundError, 404, "model_not_found"),
    ],
)
def test_auth_and_model_errors(
    stack: StackFactory,
    key: str,
    model: str,
    exception: type[openai.APIStatusError],
    status: int,
    code: str,
) -> None:
    s = stack()
    with pytest.raises(exception) as caught:
        s.client(key).chat.completions.create(model=model, messages=USER)
    assert caught.value.status_code == status
    assert caught.value.code == code
    assert_valid_error(caught.value.response.json())
    assert caught.value.response.headers["x-request-id"].startswith("req_")
    assert s.upstream.requests == []


def test_a_missing_key_is_401(stack: StackFactory) -> None:
    s = stack()
    response = httpx.post(f"{s.base_url}/chat/completions", json={"model": MODEL, "messages": USER})
    assert response.status_code == 401
    assert_valid_error(response.json())


@pytest.mark.parametrize(
    ("content", "param"),
    [
        (b"{not json", None),
        (b"[1, 2]", None),
        (b'{"messages": [{"role": "user", "content": "x"}]}', "model"),
        (b'{"model": "gpt-test", "messages": []}', "messages"),
        (b'{"model": "gpt-test", "messages": [{"content": "x"}]}', "messages[0].role"),
        (b'{"model": "gpt-test", "messages": [{"role": "user"}], "tools": {}}', "tools"),
        (
            b'{"model": "gpt-test", "messages": [{"role": "user"}], "toolgate": {"x": 1}}',
            "toolgate",
        ),
    ],
)
def test_malformed_requests_are_400_naming_the_field(
    stack: StackFactory, content: bytes, param: str | None
) -> None:
    s = stack()
    response = httpx.post(
        f"{s.base_url}/chat/completions",
        content=content,
        headers={"authorization": f"Bearer {ACME_KEY}", "content-type": "application/json"},
    )
    assert response.status_code == 400
    assert_valid_error(response.json())
    assert response.json()["error"]["param"] == param
    assert s.upstream.requests == []


def test_a_body_over_the_limit_is_413(stack: StackFactory) -> None:
    def small(config: dict[str, Any]) -> dict[str, Any]:
        return {**config, "server": {**config["server"], "max_body_bytes": 1000}}

    s = stack(config=small)
    with pytest.raises(openai.APIStatusError) as caught:
        s.client().chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x" * 2000}]
        )
    assert caught.value.status_code == 413
    assert_valid_error(caught.value.response.json())


@pytest.mark.parametrize(
    ("fail", "exception", "status"),
    [
        (Fail(400, {"error": {"message": "context too long"}}), openai.BadRequestError, 400),
        (Fail(500), openai.InternalServerError, 502),
        (Fail(401), openai.InternalServerError, 502),
        (Fail(429, headers={"retry-after": "7"}), openai.RateLimitError, 429),
    ],
)
def test_upstream_errors_map_to_sdk_exceptions(
    stack: StackFactory, fail: Fail, exception: type[openai.APIStatusError], status: int
) -> None:
    s = stack(lambda body: fail)
    with pytest.raises(exception) as caught:
        s.client().chat.completions.create(model=MODEL, messages=USER)
    assert caught.value.status_code == status
    body = caught.value.response.json()
    assert_valid_error(body)
    if status == 400:
        assert body["error"]["message"] == "context too long"
    if status == 429:
        assert caught.value.response.headers["retry-after"] == "7"
    assert "sk-upstream" not in caught.value.response.text


def test_an_unreachable_upstream_is_502(stack: StackFactory) -> None:
    def dead(config: dict[str, Any]) -> dict[str, Any]:
        config["upstreams"][0]["base_url"] = "http://127.0.0.1:9/v1"
        return config

    s = stack(config=dead)
    with pytest.raises(openai.InternalServerError) as caught:
        s.client().chat.completions.create(model=MODEL, messages=USER)
    assert caught.value.status_code == 502
    assert caught.value.code == "upstream_unavailable"
    assert_valid_error(caught.value.response.json())


def test_models_lists_only_the_tenants_models(stack: StackFactory) -> None:
    s = stack()
    listing = s.client().models.with_raw_response.list()
    body = listing.http_response.json()
    assert_valid(body, "ListModelsResponse")
    assert [m["id"] for m in body["data"]] == [MODEL, "renamed"]
    beta = [m.id for m in s.client(BETA_KEY).models.list()]
    assert beta == [MODEL, "renamed", "other-model"]
    assert s.client().models.retrieve("renamed").id == "renamed"
    with pytest.raises(openai.NotFoundError):  # as unknown as a model that is not
        s.client().models.retrieve("other-model")


def test_other_routes_are_forwarded_to_the_models_upstream(
    stack: StackFactory, caplog: pytest.LogCaptureFixture
) -> None:
    s = stack()
    result = s.client().embeddings.create(model="renamed", input="hello")
    assert result.data[0].embedding == [0.5, 0.25]
    assert result.model == "renamed"
    # Usage with no completion part is an embedding's: believed whole, as the SDK needs it.
    assert result.usage.model_dump() == {"prompt_tokens": 2, "total_tokens": 2}
    assert "cannot be true" not in caplog.text
    (sent,) = s.upstream.requests
    assert sent["model"] == "upstream-name"
    assert s.upstream.headers[0]["authorization"] == "Bearer sk-upstream"


def test_unknown_routes_are_404_in_the_envelope(stack: StackFactory) -> None:
    s = stack()
    response = httpx.get(f"{s.gateway.url}/v2/nothing")
    assert response.status_code == 404
    assert_valid_error(response.json())
    assert httpx.get(f"{s.gateway.url}/healthz").json() == {"status": "ok"}


def test_a_number_in_another_script_is_no_number_and_no_500(stack: StackFactory) -> None:
    """``"²".isdigit()`` is true and ``int("²")`` fails: a header or a query string
    that says "²" (latin-1 byte 0xB2 on the wire) is not taken for a number."""
    s = stack()
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    auth = (b"authorization", f"Bearer {ACME_KEY}".encode())
    retried = httpx.post(
        f"{s.base_url}/chat/completions",
        json=body,
        headers=[auth, (b"x-stainless-retry-count", b"\xb2")],
    )
    assert retried.status_code == 200, retried.text  # not a retry: a request as any
    listed = httpx.get(f"{s.base_url}/toolgate/recordings", params={"limit": "²"}, headers=[auth])
    assert listed.status_code == 400, listed.text
    assert_valid_error(listed.json())
