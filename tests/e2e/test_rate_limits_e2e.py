"""Rate limits through the real SDK: the memory store in one process, Redis shared by
two gateway processes, and Redis going away and coming back."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from tests.support.fake_upstream import FakeUpstream, calls, say, tool_call, tool_results
from tests.support.schema import assert_valid_error
from tests.support.servers import (
    ServeProcess,
    ServerThread,
    free_port,
    requests_ended,
    until,
)

from .conftest import ACME_KEY, MODEL, StackFactory

USER: Any = [{"role": "user", "content": "hi"}]


def limited(limits: dict[str, Any], store: dict[str, Any] | None = None) -> Any:
    def change(config: dict[str, Any]) -> dict[str, Any]:
        config["tenants"][0]["limits"] = limits
        if store is not None:
            config["store"] = store
        return config

    return change


def test_requests_per_minute(stack: StackFactory) -> None:
    s = stack(config=limited({"requests_per_minute": 3}))
    client = s.client(default_headers={"x-toolgate-tools": ""})
    remaining = []
    for _ in range(3):
        raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=USER)
        assert raw.headers["x-ratelimit-limit-requests"] == "3"
        remaining.append(raw.headers["x-ratelimit-remaining-requests"])
        assert raw.headers["x-ratelimit-reset-requests"].endswith("s")
    assert remaining == ["2", "1", "0"]
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model=MODEL, messages=USER)
    response = caught.value.response
    assert_valid_error(response.json())
    assert response.json()["error"]["type"] == "requests"
    assert 19 <= int(response.headers["retry-after"]) <= 20  # 3 per minute: one per 20 s
    assert 19000 <= int(response.headers["retry-after-ms"]) <= 20000
    assert response.headers["x-ratelimit-remaining-requests"] == "0"
    assert len(s.upstream.requests) == 3


def test_tokens_per_minute_are_charged_after_the_request(stack: StackFactory) -> None:
    s = stack(config=limited({"tokens_per_minute": 20}))  # each round uses 15
    client = s.client(default_headers={"x-toolgate-tools": ""})
    first = client.chat.completions.with_raw_response.create(model=MODEL, messages=USER)
    assert first.headers["x-ratelimit-limit-tokens"] == "20"
    assert first.headers["x-ratelimit-remaining-tokens"] == "20"
    requests_ended(s.gateway.url)  # the charge is part of the request's end
    second = client.chat.completions.with_raw_response.create(model=MODEL, messages=USER)
    assert second.headers["x-ratelimit-remaining-tokens"] == "5"
    requests_ended(s.gateway.url)
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model=MODEL, messages=USER)
    assert caught.value.response.json()["error"]["type"] == "tokens"
    assert len(s.upstream.requests) == 2


def test_a_metered_stream_charges_its_usage_without_showing_it(stack: StackFactory) -> None:
    s = stack(lambda body: say("streamed words"), config=limited({"tokens_per_minute": 20}))
    client = s.client(default_headers={"x-toolgate-tools": ""})
    for attempt in range(2):
        stream = client.chat.completions.create(model=MODEL, messages=USER, stream=True)
        chunks = list(stream)
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
            "streamed words"
        )
        assert all(c.usage is None for c in chunks), attempt
        assert s.upstream.requests[-1]["stream_options"] == {"include_usage": True}
        requests_ended(s.gateway.url)  # a stream's charge follows its last chunk
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model=MODEL, messages=USER, stream=True)


def test_tool_loops_charge_every_round(stack: StackFactory) -> None:
    def script(body: dict[str, Any]) -> Any:
        if tool_results(body):
            return say("done")
        return calls(tool_call("c1", "string_length", {"s": "abc"}))

    s = stack(script, config=limited({"tokens_per_minute": 40}))
    raw = s.client().chat.completions.with_raw_response.create(model=MODEL, messages=USER)
    assert raw.parse().usage.total_tokens == 30  # type: ignore[union-attr]
    requests_ended(s.gateway.url)
    again = s.client().chat.completions.with_raw_response.create(model=MODEL, messages=USER)
    assert again.headers["x-ratelimit-remaining-tokens"] == "10"


# --- Redis ---------------------------------------------------------------------------


def gateway_file(tmp_path: Path, upstream_url: str, store: dict[str, Any], port: int) -> Path:
    config = {
        "server": {"port": port},
        "store": store,
        "upstreams": [{"name": "up", "base_url": f"{upstream_url}/v1", "max_retries": 0}],
        "models": [{"name": MODEL, "upstream": "up"}],
        "tenants": [{"id": "acme", "keys": [ACME_KEY], "limits": {"requests_per_minute": 10}}],
    }
    path = tmp_path / f"gateway-{port}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def two_replicas(tmp_path: Path, redis_url: str, redis_prefix: str) -> Iterator[list[str]]:
    upstream = FakeUpstream(lambda body: say("ok"), delay_s=0.05)
    # timeout_s: a loaded machine can pass the 0.1 s default on a first connect.
    prefix = f"{redis_prefix}{uuid.uuid4().hex[:8]}:"
    store = {"url": redis_url, "prefix": prefix, "timeout_s": 2.0}
    with contextlib.ExitStack() as started, ServerThread(upstream.app()) as server:
        urls = []
        for replica in range(2):
            config = gateway_file(tmp_path, server.url, store, free_port())
            log = tmp_path / f"replica-{replica}.log"
            served = started.enter_context(ServeProcess(config, log, "--log-level", "warning"))
            urls.append(served.url)
        yield urls


def test_a_burst_on_two_replicas_admits_exactly_the_limit(two_replicas: list[str]) -> None:
    async def burst() -> list[int]:
        async with httpx.AsyncClient(timeout=30) as client:
            requests = [
                client.post(
                    f"{two_replicas[i % 2]}/v1/chat/completions",
                    json={"model": MODEL, "messages": USER},
                    headers={"authorization": f"Bearer {ACME_KEY}"},
                )
                for i in range(30)
            ]
            return [r.status_code for r in await asyncio.gather(*requests)]

    statuses = asyncio.run(burst())
    assert statuses.count(200) == 10
    assert statuses.count(429) == 20


@pytest.mark.parametrize(("on_error", "status"), [("allow", 200), ("deny", 503)])
def test_redis_going_away_and_coming_back(
    stack: StackFactory,
    private_redis: tuple[str, subprocess.Popen[bytes]],
    on_error: str,
    status: int,
) -> None:
    url, redis_process = private_redis
    store = {"url": url, "on_error": on_error, "timeout_s": 0.1}
    s = stack(config=limited({"requests_per_minute": 1000}, store))
    client = httpx.Client(base_url=s.base_url, timeout=10)
    headers = {"authorization": f"Bearer {ACME_KEY}", "x-toolgate-tools": ""}
    body = {"model": MODEL, "messages": USER}
    try:
        assert client.post("/chat/completions", json=body, headers=headers).status_code == 200
        redis_process.send_signal(signal.SIGSTOP)  # hung: accepts, never answers
        for _ in range(3):
            # The store stays hung while these are asked: each is answered only because
            # the gateway stopped waiting for it (else the client's timeout fails it).
            response = client.post("/chat/completions", json=body, headers=headers)
            assert response.status_code == status
            assert "x-ratelimit-limit-requests" not in response.headers
            if status == 503:
                assert_valid_error(response.json())
                assert response.headers["retry-after"] == "1"
        assert client.get(f"{s.gateway.url}/readyz").status_code == 503
        redis_process.send_signal(signal.SIGCONT)
        back = until(
            lambda: client.post("/chat/completions", json=body, headers=headers),
            lambda response: "x-ratelimit-limit-requests" in response.headers,
        )
        assert back is not None, "the gateway did not come back to the store"
        assert back.status_code == 200
        assert client.get(f"{s.gateway.url}/readyz").json() == {"status": "ready", "store": "ok"}
    finally:
        client.close()
