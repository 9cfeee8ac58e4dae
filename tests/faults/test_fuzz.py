"""Property-based fuzzing of the gateway in-process (``ASGITransport`` in front,
``MockTransport`` behind): request bodies, request headers and what the upstream
answers are generated, and whatever they are, the gateway answers with no 5xx but the
upstream ones (502, 503, 504), every error in the OpenAI envelope, every event of a
stream a JSON object or ``[DONE]``.

The example count is bounded in ``make test``; ``TOOLGATE_FUZZ_EXAMPLES=5000`` runs
longer (see tests/conftest.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from hypothesis import event as note_event
from hypothesis import given
from hypothesis import strategies as st

from gateway import GatewayConfig, create_app

KEY, OPEN_KEY = "sk-fuzz-tools-0001", "sk-fuzz-plain-0002"
CONFIG: dict[str, Any] = {
    "upstreams": [{"name": "up", "base_url": "http://upstream.test/v1", "max_retries": 0}],
    "models": [{"name": "m", "upstream": "up"}],
    "tools": [
        {
            "name": "double",
            "description": "Doubles n.",
            "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}},
            "http": {"url": "http://tools.test/double/{n}"},
        }
    ],
    "tenants": [
        {"id": "tools", "keys": [KEY], "tools": ["*"]},
        {"id": "plain", "keys": [OPEN_KEY], "tools": []},
    ],
}
UPSTREAM_STATUSES = {502, 503, 504}

Upstream = Callable[[httpx.Request], httpx.Response]


def _json(body: Any) -> bytes:
    return json.dumps(body).encode()


def _answer(status: int, body: bytes, content_type: str = "application/json") -> httpx.Response:
    """An unread response, as a real transport gives (``content=`` would be read already)."""
    return httpx.Response(
        status, stream=httpx.ByteStream(body), headers={"content-type": content_type}
    )


def _completion(message: Any) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def chunk(**fields: Any) -> dict[str, Any]:
    """A stream chunk: "ok" and the stop, unless ``fields`` say otherwise."""
    said = {"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}
    head = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    return head | {"choices": [said]} | fields


def _plain(request: httpx.Request) -> httpx.Response:
    """A model that answers every request, streamed when asked."""
    try:
        stream = json.loads(request.content).get("stream") is True
    except (ValueError, AttributeError):
        stream = False
    if stream:
        body = f"data: {json.dumps(chunk())}\n\ndata: [DONE]\n\n".encode()
        return _answer(200, body, "text/event-stream")
    return _answer(200, _json(_completion({"role": "assistant", "content": "ok"})))


class InProcess:
    """One gateway app on its own event loop, its upstream swappable per example."""

    def __init__(self) -> None:
        self.upstream: Upstream = _plain
        self._runner = asyncio.Runner()
        app = create_app(
            GatewayConfig.model_validate(CONFIG),
            upstream_transport=httpx.MockTransport(lambda r: self.upstream(r)),
            tool_transport=httpx.MockTransport(lambda r: _answer(200, b'{"v": 2}')),
        )
        self._lifespan = app.router.lifespan_context(app)
        self._runner.run(self._lifespan.__aenter__())
        self._client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gw", timeout=10
        )

    def post(self, content: bytes, headers: list[tuple[str, str]]) -> httpx.Response:
        """Header values go as latin-1 bytes, as they may come off the wire."""
        raw = [(k.encode(), v.encode("latin-1")) for k, v in headers]
        return self._runner.run(
            self._client.post("/v1/chat/completions", content=content, headers=raw)
        )

    def get(self, path: str) -> httpx.Response:
        return self._runner.run(self._client.get(path))

    def close(self) -> None:
        self._runner.run(self._client.aclose())
        self._runner.run(self._lifespan.__aexit__(None, None, None))
        self._runner.close()


@pytest.fixture(scope="module")
def gateway() -> Iterator[InProcess]:
    made = InProcess()
    yield made
    made.close()


def assert_well_formed(response: httpx.Response, relayed: bool = False) -> None:
    """``relayed``: a pass-through stream, whose events are the upstream's bytes as
    they came (the client's SDK judges them), so only the status and errors are ours."""
    status = response.status_code
    note_event(f"HTTP {status}")  # the spread shows with --hypothesis-show-statistics
    assert status < 500 or status in UPSTREAM_STATUSES, response.text
    if status >= 400:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}, error
        assert isinstance(error["message"], str)
        assert "Traceback" not in error["message"]
        return
    if relayed:
        return
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                event = json.loads(line[6:])
                assert isinstance(event, dict), line
                if "error" in event:
                    assert set(event["error"]) == {"message", "type", "param", "code"}
        return
    assert isinstance(response.json(), dict)


# -- strategies -------------------------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=20),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _maybe(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Usually the well-formed thing, sometimes (one in eight) anything at all."""
    return st.integers(0, 7).flatmap(lambda pick: value if pick else json_values)


tool_call = st.fixed_dictionaries(
    {
        "id": _maybe(st.text(max_size=8)),
        "type": _maybe(st.just("function")),
        "function": _maybe(
            st.fixed_dictionaries(
                {
                    "name": _maybe(st.sampled_from(["double", "mine", ""])),
                    "arguments": _maybe(st.sampled_from(['{"n": 2}', "{", "[]", ""])),
                }
            )
        ),
    }
)
message = st.fixed_dictionaries(
    {"role": _maybe(st.sampled_from(["system", "user", "assistant", "tool", "developer"]))},
    optional={
        "content": _maybe(
            st.one_of(
                st.text(max_size=30),
                st.lists(
                    st.fixed_dictionaries(
                        {"type": _maybe(st.just("text")), "text": _maybe(st.text(max_size=10))}
                    ),
                    max_size=2,
                ),
            )
        ),
        "tool_calls": _maybe(st.lists(tool_call, max_size=2)),
        "tool_call_id": _maybe(st.text(max_size=8)),
        "name": _maybe(st.text(max_size=8)),
    },
)
client_tool = st.one_of(
    st.fixed_dictionaries(
        {
            "type": _maybe(st.sampled_from(["function", "custom"])),
            "function": _maybe(
                st.fixed_dictionaries(
                    {"name": _maybe(st.sampled_from(["mine", "double", ""]))},
                    optional={"parameters": json_values},
                )
            ),
        }
    ),
    st.fixed_dictionaries({"type": st.just("custom"), "custom": json_values}),
)
bodies = st.fixed_dictionaries(
    {
        "model": _maybe(st.sampled_from(["m", "m", "m", "nope"])),
        "messages": _maybe(st.lists(message, min_size=1, max_size=4)),
    },
    optional={
        "tools": _maybe(st.lists(client_tool, max_size=2)),
        "tool_choice": _maybe(
            st.sampled_from(
                ["auto", "none", "required", {"type": "function", "function": {"name": "mine"}}]
            )
        ),
        "stream": _maybe(st.booleans()),
        "stream_options": _maybe(st.fixed_dictionaries({"include_usage": st.booleans()})),
        "n": _maybe(st.integers(-1, 3)),
        "parallel_tool_calls": json_values,
        "functions": json_values,
        "function_call": json_values,
        "response_format": json_values,
        "max_tokens": json_values,
        "user": json_values,
    },
)
header_text = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"),
    max_size=40,
).map(str.strip)
headers = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "x-toolgate-tools",
                "x-toolgate-user",
                "content-type",
                "x-request-id",
                "accept",
                "openai-organization",
            ]
        ),
        header_text,
    ),
    max_size=4,
)


@given(body=bodies, key=st.sampled_from([KEY, OPEN_KEY]))
def test_any_request_body_gets_a_well_formed_answer(
    gateway: InProcess, body: dict[str, Any], key: str
) -> None:
    gateway.upstream = _plain
    response = gateway.post(_json(body), [("authorization", f"Bearer {key}")])
    assert_well_formed(response)


@given(raw=st.one_of(st.binary(max_size=200), json_values.map(_json)))
def test_any_bytes_as_a_body_get_a_well_formed_answer(gateway: InProcess, raw: bytes) -> None:
    gateway.upstream = _plain
    assert_well_formed(gateway.post(raw, [("authorization", f"Bearer {KEY}")]))


@given(extra=headers, authorization=st.one_of(header_text, st.just(f"Bearer {KEY}")))
def test_any_request_headers_get_a_well_formed_answer(
    gateway: InProcess, extra: list[tuple[str, str]], authorization: str
) -> None:
    gateway.upstream = _plain
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    response = gateway.post(_json(body), [("authorization", authorization), *extra])
    assert_well_formed(response)


chunk_objects = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {
            "choices": _maybe(
                st.lists(
                    st.fixed_dictionaries(
                        {
                            "index": _maybe(st.just(0)),
                            "delta": _maybe(
                                st.fixed_dictionaries(
                                    {},
                                    optional={
                                        "role": _maybe(st.just("assistant")),
                                        "content": _maybe(st.text(max_size=10)),
                                        "tool_calls": _maybe(
                                            st.lists(
                                                st.fixed_dictionaries(
                                                    {"index": _maybe(st.integers(0, 2))},
                                                    optional={
                                                        "id": _maybe(st.text(max_size=5)),
                                                        "function": _maybe(
                                                            st.fixed_dictionaries(
                                                                {},
                                                                optional={
                                                                    "name": _maybe(
                                                                        st.just("double")
                                                                    ),
                                                                    "arguments": _maybe(
                                                                        st.just('{"n": 2}')
                                                                    ),
                                                                },
                                                            )
                                                        ),
                                                    },
                                                ),
                                                max_size=2,
                                            )
                                        ),
                                    },
                                )
                            ),
                            "finish_reason": _maybe(
                                st.sampled_from([None, "stop", "tool_calls", "length"])
                            ),
                        }
                    ),
                    max_size=2,
                )
            )
        },
        optional={"usage": _maybe(st.fixed_dictionaries({"total_tokens": st.integers(0, 9)}))},
    ),
)
stream_lines = st.lists(
    st.one_of(
        chunk_objects.map(lambda c: b"data: " + _json(c) + b"\n\n"),
        st.sampled_from([b"data: [DONE]\n\n", b": comment\n\n", b"data: {\n\n", b"\n"]),
        st.binary(max_size=20),
    ),
    max_size=6,
)


@given(
    lines=stream_lines,
    key=st.sampled_from([KEY, OPEN_KEY]),
    status=st.sampled_from([200, 400, 429, 500]),
)
def test_any_upstream_stream_gets_a_well_formed_answer(
    gateway: InProcess, lines: list[bytes], key: str, status: int
) -> None:
    content = b"".join(lines)
    gateway.upstream = lambda request: _answer(status, content, "text/event-stream")
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    response = gateway.post(_json(body), [("authorization", f"Bearer {key}")])
    assert_well_formed(response, relayed=key == OPEN_KEY)


@given(
    answer=st.one_of(
        json_values,
        st.builds(_completion, json_values),
        st.builds(
            _completion,
            st.fixed_dictionaries(
                {
                    "role": _maybe(st.just("assistant")),
                    "content": _maybe(st.none()),
                    "tool_calls": _maybe(st.lists(tool_call, max_size=2)),
                }
            ),
        ),
    ),
    status=st.sampled_from([200, 400, 404, 422, 429, 500]),
)
def test_any_upstream_answer_gets_a_well_formed_answer(
    gateway: InProcess, answer: Any, status: int
) -> None:
    calls = 0

    def upstream(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls > 1:  # after a tool round: a plain answer
            return _plain(request)
        return _answer(status, _json(answer))

    gateway.upstream = upstream
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert_well_formed(gateway.post(_json(body), [("authorization", f"Bearer {KEY}")]))
