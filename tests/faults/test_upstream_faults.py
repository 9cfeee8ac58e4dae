"""An upstream that answers wrongly: chunks of the wrong shape, a line that never ends,
a body that is not JSON, a long Retry-After. Each is an OpenAI-shaped error for the
client (502, or the error event of a stream already begun), never a 500 or a hang."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.support.recorder import Answer, Received, Recorder
from tests.support.scripted import (
    MODEL,
    OTHER_KEY,
    TENANT_KEY,
    Harness,
    assert_envelope,
    chat,
    config,
    sse,
    tool,
)

STREAM = [("content-type", "text/event-stream")]
BASE = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": MODEL}


def _chunk(**choice: Any) -> dict[str, Any]:
    return {**BASE, "choices": [{"index": 0, "finish_reason": None, **choice}]}


BAD_CHUNKS: list[Any] = [
    {**BASE, "choices": 5},
    {**BASE, "choices": [5]},
    {**BASE, "choices": [{"index": "0", "delta": {}}]},
    _chunk(delta=7),
    _chunk(delta={"content": 5}),
    _chunk(delta={"tool_calls": 7}),
    _chunk(delta={"tool_calls": [7]}),
    _chunk(delta={"tool_calls": [{"index": 0, "function": "get_weather"}]}),
    _chunk(delta={"tool_calls": [{"index": "x", "function": {"name": "a"}}]}),
    _chunk(delta={"tool_calls": [{"index": 0, "id": 5, "function": {"name": "a"}}]}),
    _chunk(delta={"tool_calls": [{"index": 0, "function": {"arguments": ["a"]}}]}),
    _chunk(delta={}, finish_reason=5),
    {**BASE, "choices": [], "usage": {"prompt_tokens": "many"}},
    [1, 2],
    "text",
    None,
]

BAD_BODIES: list[bytes] = [
    b"<html>bad gateway</html>",
    b'{"choices": 5}',
    b'{"choices": [{"message": 5}]}',
    b'{"choices": [{"message": {"tool_calls": 7}}]}',
    b'{"choices": [{"message": {"tool_calls": [{"id": "a", "function": "x"}]}}]}',
    b"[]",
    b"",
]


def _error_of(response: httpx.Response) -> dict[str, Any]:
    """The error the client got: a 502 envelope, or the last event of a begun stream."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        assert response.status_code == 200
        events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
        error = json.loads(events[-1])["error"]
        assert set(error) == {"message", "type", "param", "code"}
        return dict(error)
    return assert_envelope(response, 502)


def _gateway(harness: Harness, upstream: Recorder) -> str:
    tools_url = harness.serve(Recorder()).url
    data = config(harness.serve(upstream).url, [tool("lookup", f"{tools_url}/x")])
    return harness.gateway(data).url


@pytest.mark.parametrize("chunk", BAD_CHUNKS, ids=lambda c: json.dumps(c)[:60])
@pytest.mark.parametrize("key", [TENANT_KEY, OTHER_KEY], ids=["tool-loop", "pass-through"])
def test_a_stream_chunk_of_the_wrong_shape_is_an_upstream_error(
    harness: Harness, chunk: Any, key: str
) -> None:
    upstream = Recorder(
        lambda hit: Answer(headers=STREAM, chunks=sse(_chunk(delta={"role": "assistant"}), chunk))
    )
    gateway = _gateway(harness, upstream)
    headers = {"authorization": f"Bearer {key}"}
    response = httpx.post(
        f"{gateway}/v1/chat/completions", json=chat(stream=True), headers=headers, timeout=10
    )
    if key == OTHER_KEY:
        # Passed through as the upstream sent it: the client's own SDK judges the chunk.
        assert response.status_code == 200
        assert json.dumps(chunk) in response.text or chunk is None
        return
    error = _error_of(response)
    assert error["code"] == "upstream_error"


@pytest.mark.parametrize("body", BAD_BODIES)
def test_a_completion_body_of_the_wrong_shape_is_a_502(harness: Harness, body: bytes) -> None:
    gateway = _gateway(harness, Recorder(lambda hit: Answer(body=body)))
    headers = {"authorization": f"Bearer {TENANT_KEY}"}
    response = httpx.post(f"{gateway}/v1/chat/completions", json=chat(), headers=headers)
    assert assert_envelope(response, 502)["code"] == "upstream_error"


@pytest.mark.parametrize("key", [TENANT_KEY, OTHER_KEY], ids=["tool-loop", "pass-through"])
def test_a_line_that_never_ends_is_cut_off(harness: Harness, key: str) -> None:
    """9 MiB with no line end: where the gateway parses the stream (the tool loop) it is
    over the 8 MiB line cap and the stream ends in an error; a pass-through stream is
    relayed byte for byte, unparsed, for the client's SDK to judge."""
    endless = [b'data: {"x": "'] + [b"a" * 65536] * 144
    upstream = Recorder(lambda hit: Answer(headers=STREAM, chunks=endless))
    gateway = _gateway(harness, upstream)
    headers = {"authorization": f"Bearer {key}"}
    response = httpx.post(
        f"{gateway}/v1/chat/completions", json=chat(stream=True), headers=headers, timeout=30
    )
    if key == OTHER_KEY:
        assert response.status_code == 200
        assert len(response.content) == sum(map(len, endless))
    else:
        assert _error_of(response)["code"] == "upstream_error"
    assert httpx.get(f"{gateway}/healthz").status_code == 200


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("key", [TENANT_KEY, OTHER_KEY], ids=["tool-loop", "pass-through"])
def test_a_long_retry_after_is_answered_at_once_with_its_wait(
    harness: Harness, key: str, stream: bool
) -> None:
    def limited(hit: Received) -> Answer:
        body = b'{"error": {"message": "slow down", "type": "rate_limit_error"}}'
        return Answer(429, body, [("content-type", "application/json"), ("retry-after", "30")])

    upstream = Recorder(limited)
    gateway = _gateway(harness, upstream)
    headers = {"authorization": f"Bearer {key}"}
    response = httpx.post(
        f"{gateway}/v1/chat/completions", json=chat(stream=stream), headers=headers, timeout=10
    )
    assert assert_envelope(response, 429)["type"] == "rate_limit_error"
    assert response.headers["retry-after"] == "30"
    assert len(upstream.hits) == 1  # not retried: the wait is over the retry budget
