"""The upstream client over ``httpx.MockTransport``."""

from __future__ import annotations

import json
import logging
import threading

import httpx
import pytest

from gateway.config import UpstreamConfig
from gateway.errors import UpstreamError, UpstreamStatusError, UpstreamTimeout
from gateway.upstream.exchange import UpstreamClient, map_status_error
from gateway.upstream.openai.client import OpenAIClient
from gateway.upstream.openai.codec import RoundAssembler
from gateway.upstream.wire import HttpxWire

pytestmark = pytest.mark.anyio

UPSTREAM = UpstreamConfig(
    name="up", base_url="http://up.example/v1/", api_key="sk-up", max_retries=2
)
COMPLETION = {
    "id": "x",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
}


async def chat(*responses: httpx.Response | Exception) -> tuple[object, list[httpx.Request]]:
    seen: list[httpx.Request] = []
    queue = list(responses)

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        item = queue.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    async with httpx.MockTransport(handler) as transport:
        client = UpstreamClient(HttpxWire(transport), backoff_base_s=0)
        try:
            body = {"model": "m", "messages": []}
            return await OpenAIClient(client).chat(UPSTREAM, body, lambda whole: whole), seen
        except UpstreamError as exc:
            return exc, seen


async def test_sends_the_upstream_key_to_the_right_url() -> None:
    result, seen = await chat(httpx.Response(200, json=COMPLETION))
    assert result == COMPLETION
    (request,) = seen
    assert str(request.url) == "http://up.example/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-up"
    assert json.loads(request.content) == {"model": "m", "messages": []}


async def test_retries_connect_errors_and_retryable_statuses() -> None:
    result, seen = await chat(
        httpx.ConnectError("refused"),
        httpx.Response(503, headers={"retry-after": "0"}),
        httpx.Response(200, json=COMPLETION),
    )
    assert result == COMPLETION
    assert len(seen) == 3


async def test_gives_up_after_max_retries() -> None:
    result, seen = await chat(
        *(httpx.Response(429, headers={"retry-after-ms": "1"}) for _ in range(3))
    )
    assert isinstance(result, UpstreamStatusError)
    assert result.status == 429
    assert result.headers == {"retry-after-ms": "1"}
    assert len(seen) == 3


async def test_unreachable_is_502_naming_what_to_check_and_no_address(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, "gateway.upstream"):
        result, _ = await chat(*(httpx.ConnectError("refused 10.0.0.7") for _ in range(3)))
    assert isinstance(result, UpstreamError)
    assert (result.status, result.code) == (502, "upstream_unavailable")
    assert "10.0.0.7" not in result.message
    assert "'up'" in result.message  # the upstream's name
    assert "toolgate check --probe" in result.message
    assert "base_url" in result.message
    (line,) = [r for r in caplog.records if "unreachable" in r.getMessage()]
    assert UPSTREAM.base_url in line.getMessage()  # the operator's log has the address


async def test_read_timeouts_are_504_and_not_retried() -> None:
    result, seen = await chat(httpx.ReadTimeout("slow"))
    assert isinstance(result, UpstreamTimeout)
    assert result.status == 504
    assert len(seen) == 1


@pytest.mark.parametrize(
    ("status", "body", "client_status", "message"),
    [
        (400, {"error": {"message": "bad messages"}}, 400, "bad messages"),
        (422, {"error": "unprocessable"}, 422, "unprocessable"),
        (401, {"error": {"message": "Incorrect API key sk-up"}}, 502, "answered HTTP 401"),
        (404, {"error": {"message": "no model"}}, 502, "answered HTTP 404"),
        (500, {"error": {"message": "oops"}}, 502, "'up' failed: oops"),
        (500, {"detail": "loading"}, 502, "'up' failed (HTTP 500)."),
    ],
)
async def test_error_statuses(status: int, body: object, client_status: int, message: str) -> None:
    result, _ = await chat(httpx.Response(status, json=body))
    assert isinstance(result, UpstreamStatusError)
    assert result.status == client_status
    assert message in result.message
    assert "sk-up" not in result.message


@pytest.mark.parametrize(
    "response",
    [httpx.Response(200, text="not json"), httpx.Response(200, json={"no": "choices"})],
)
async def test_malformed_answers_are_502(response: httpx.Response) -> None:
    result, _ = await chat(response)
    assert isinstance(result, UpstreamError)
    assert result.status == 502


async def test_a_retry_after_longer_than_the_budget_is_answered_at_once() -> None:
    result, seen = await chat(httpx.Response(429, headers={"retry-after": "30"}, json={}))
    assert len(seen) == 1  # not waited out, not retried
    assert isinstance(result, UpstreamStatusError)
    assert result.status == 429
    assert result.headers["retry-after"] == "30"


async def test_the_url_cache_stays_bounded_whatever_paths_are_sent() -> None:
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={})

    async with httpx.MockTransport(answer) as transport:
        client = UpstreamClient(HttpxWire(transport), backoff_base_s=0)
        for index in range(1000):
            response = await client.send(UPSTREAM, f"/p{index}/" + "x" * 4096, b"{}")
            await response.aclose()
            assert len(client._urls) <= 64
        assert str(sent[-1].url).startswith("http://up.example/v1/p999/")


def test_a_failure_reads_the_same_answered_or_streamed() -> None:
    """llama.cpp answers a failure with HTTP 500 when not streaming, and with an error
    event in a 200 stream when streaming: the client reads the same words."""
    said = "model crashed\nTraceback (most recent call last):\n  File x.py"
    body = json.dumps({"error": {"code": 500, "message": said}}).encode()
    answered = map_status_error("up", httpx.Response(500), body)
    with pytest.raises(UpstreamError) as streamed:
        RoundAssembler("up").add({"error": {"code": 500, "message": said}})
    assert answered.message == streamed.value.message
    assert answered.message == "The upstream model server 'up' failed: model crashed"
    assert (answered.status, streamed.value.status) == (502, 502)
    long = map_status_error("up", httpx.Response(500), json.dumps({"error": "x" * 5000}).encode())
    assert len(long.message) < 400
    control = map_status_error("up", httpx.Response(502), rb'{"error": "a\u001b[31mb"}')
    assert "\x1b" not in control.message


@pytest.mark.anyio
@pytest.mark.parametrize(("size", "off_the_loop"), [(1024, False), (2 * 1024 * 1024, True)])
async def test_a_large_answer_is_parsed_off_the_event_loop(size: int, off_the_loop: bool) -> None:
    """Issue 62 §5: 50 MB of a model's tool input held the loop while it was parsed and
    read into values; a small answer is read in the client's own step."""
    threads: list[int] = []
    padded = {**COMPLETION, "pad": "x" * size}

    def read(whole: dict[str, object]) -> int:
        threads.append(threading.get_ident())
        return len(str(whole["pad"]))

    async with httpx.MockTransport(lambda request: httpx.Response(200, json=padded)) as mock:
        client = OpenAIClient(UpstreamClient(HttpxWire(mock), backoff_base_s=0))
        assert await client.chat(UPSTREAM, {"model": "m", "messages": []}, read) == size
    assert (threads[0] != threading.get_ident()) is off_the_loop
