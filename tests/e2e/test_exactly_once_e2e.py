"""Writes run exactly once (docs/design.md §16, issue 34 §7), end to end under uvicorn:

- the stock openai SDK's own retries against an upstream that fails once after the
  write: the retry gets the kept result, the tool server counts one write;
- the same across two replicas on Redis, the retry reaching the other one;
- an ``Idempotency-Key`` sent twice at once: the second waits for the first's write;
  sent again later with another body: 422;
- an approved call resumed by a retry is neither asked again nor made again;
- reads run again; a request that cannot be recognised keeps nothing and says so.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from gateway import GatewayConfig, create_app
from tests.support.fake_upstream import Fail, Reply, calls, say, tool_call, tool_results
from tests.support.servers import ServerThread

from .conftest import ACME_KEY, MODEL, Stack, StackFactory
from .test_policy_e2e import APPROVAL_TOOL, _plain, approval_rules

USER: Any = [{"role": "user", "content": "Refund order 42."}]


class FailsOnceAfterTheWrite:
    """A model that files a ticket, then fails once (502) where it would answer."""

    def __init__(self, tool: str = "create_ticket", arguments: Any = None) -> None:
        self.tool = tool
        self.arguments = arguments if arguments is not None else {"title": "refund 42"}
        self.failed = False
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        results = tool_results(body)
        if not results:
            return calls(tool_call("c1", self.tool, self.arguments))
        with self._lock:
            if not self.failed:
                self.failed = True
                return Fail(502)
        return say("done: " + next(iter(results.values())))


def writes(s: Stack, path: str = "/echo/tickets") -> int:
    return len([h for h in s.tools.hits if h.path == path])


def _sdk(s: Stack, **options: Any) -> openai.OpenAI:
    client = openai.OpenAI(base_url=s.base_url, api_key=ACME_KEY, max_retries=2, **options)
    s.clients.append(client)
    return client


@pytest.mark.parametrize("stream", [False, True])
def test_the_sdks_own_retry_gets_the_kept_write(stack: StackFactory, stream: bool) -> None:
    s = stack(FailsOnceAfterTheWrite())
    client = _sdk(s)
    if stream:
        chunks = client.chat.completions.create(model=MODEL, messages=USER, stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        answer = client.chat.completions.create(model=MODEL, messages=USER)
        text = answer.choices[0].message.content or ""
    assert text.startswith("done: ")
    assert writes(s) == 1  # the retry did not file it again
    retried = [h for h in s.upstream.headers if h.get("x-stainless-retry-count") == "1"]
    assert retried == []  # the gateway's own upstream calls carry no SDK headers
    # The model of the retry read the same result the write gave.
    first_result = tool_results(s.upstream.requests[1])["c1"]
    assert tool_results(s.upstream.requests[-1])["c1"] == first_result


def test_reads_run_again_on_a_retry(stack: StackFactory) -> None:
    s = stack(FailsOnceAfterTheWrite("string_length", {"s": "hello"}))
    client = _sdk(s)
    answer = client.chat.completions.create(model=MODEL, messages=USER)
    assert answer.choices[0].message.content == "done: 5"
    assert writes(s, "/len") == 2  # a read is not kept: it runs again


class Alternate(httpx.BaseTransport):
    """A load balancer in the client: attempt N goes to replica N mod 2."""

    def __init__(self, urls: list[str]) -> None:
        self._urls = [httpx.URL(u) for u in urls]
        self._inner = httpx.HTTPTransport()
        self._count = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        target = self._urls[self._count % len(self._urls)]
        self._count += 1
        request.url = request.url.copy_with(host=target.host, port=target.port)
        return self._inner.handle_request(request)

    def close(self) -> None:
        self._inner.close()


@pytest.fixture
def replicas(
    stack: StackFactory, redis_url: str, redis_prefix: str
) -> Iterator[tuple[Stack, ServerThread, FailsOnceAfterTheWrite]]:
    model = FailsOnceAfterTheWrite()

    def on_redis(config: dict[str, Any]) -> dict[str, Any]:
        config["store"] = {"url": redis_url, "prefix": redis_prefix, "timeout_s": 2}
        return config

    s = stack(model, config=on_redis)
    data = _plain(s.app.state.gateway.config.model_dump(exclude_none=True))
    other = ServerThread(create_app(GatewayConfig.model_validate(data))).start()
    yield s, other, model
    other.stop()


def test_a_retry_on_another_replica_gets_the_kept_write(
    replicas: tuple[Stack, ServerThread, FailsOnceAfterTheWrite],
) -> None:
    s, other, _ = replicas
    balancer = httpx.Client(transport=Alternate([s.gateway.url, other.url]))
    client = _sdk(s, http_client=balancer)
    answer = client.chat.completions.create(model=MODEL, messages=USER)
    assert (answer.choices[0].message.content or "").startswith("done: ")
    assert writes(s) == 1
    balancer.close()


def test_an_idempotency_key_sent_twice_at_once_writes_once(stack: StackFactory) -> None:
    def slow_write(body: dict[str, Any]) -> Reply:
        results = tool_results(body)
        if not results:
            return calls(tool_call("c1", "slow", {"ms": 400}))
        return say("done: " + results["c1"])

    def slow_is_a_write(config: dict[str, Any]) -> dict[str, Any]:
        config["policy"] = {"tools": [{"tools": ["slow"], "effects": "write"}]}
        return config

    s = stack(slow_write, config=slow_is_a_write)
    headers = {"authorization": f"Bearer {ACME_KEY}", "idempotency-key": "order-42-refund"}
    body = {"model": MODEL, "messages": USER}
    answers: list[httpx.Response] = []

    def send() -> None:
        answers.append(httpx.post(f"{s.base_url}/chat/completions", json=body, headers=headers))

    threads = [threading.Thread(target=send) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [a.status_code for a in answers] == [200, 200, 200]
    contents = {a.json()["choices"][0]["message"]["content"] for a in answers}
    assert len(contents) == 1  # every attempt read the one write's result
    assert writes(s, "/slow") == 1
    # The same key with another body is another request: 422, nothing made.
    other = httpx.post(
        f"{s.base_url}/chat/completions",
        json={**body, "messages": [{"role": "user", "content": "Refund order 43."}]},
        headers=headers,
    )
    assert other.status_code == 422
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert writes(s, "/slow") == 1
    # A new key is a new request: it writes.
    fresh = httpx.post(
        f"{s.base_url}/chat/completions",
        json=body,
        headers={**headers, "idempotency-key": "order-42-refund-again"},
    )
    assert fresh.status_code == 200
    assert writes(s, "/slow") == 2


def test_the_same_body_sent_again_on_purpose_writes_again(stack: StackFactory) -> None:
    """A first attempt (x-stainless-retry-count: 0) never takes a kept result: a user
    asking for the same thing twice gets it twice."""
    s = stack(lambda body: say("ok") if tool_results(body) else FailsOnceAfterTheWrite()(body))
    client = _sdk(s)
    for _ in range(2):
        client.chat.completions.create(model=MODEL, messages=USER)
    assert writes(s) == 2


def test_an_approved_call_resumed_by_a_retry_is_not_asked_or_made_again(
    stack: StackFactory,
) -> None:
    failed = threading.Event()

    def model(body: dict[str, Any]) -> Reply:
        results = tool_results(body)
        if "c1" not in results:
            return calls(tool_call("c1", "create_ticket", {"title": "refund 42"}))
        if not failed.is_set():
            failed.set()
            return Fail(502)
        return say("done: " + results["c1"])

    s = stack(model, config=approval_rules())
    client = _sdk(s)
    first = client.chat.completions.create(model=MODEL, messages=USER, tools=[APPROVAL_TOOL])
    [asked] = first.choices[0].message.tool_calls or []
    assert writes(s) == 0
    history = [*USER, first.choices[0].message.model_dump(exclude_none=True)]
    answer: Any = {"role": "tool", "tool_call_id": asked.id, "content": '{"approve": true}'}
    final = client.chat.completions.create(
        model=MODEL, messages=[*history, answer], tools=[APPROVAL_TOOL]
    )
    assert (final.choices[0].message.content or "").startswith("done: ")
    assert writes(s) == 1  # approved once, made once, though the request ran twice
    assert "approval" not in json.dumps(tool_results(s.upstream.requests[-1]))


class WritesAgainAfterTheRetry:
    """A model that files a ticket, fails once (502), then files a follow-up: the
    second write comes after the first write's (untrusted) result."""

    def __init__(self) -> None:
        self.failed = False
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        results = tool_results(body)
        if not results:
            return calls(tool_call("c1", "create_ticket", {"title": "refund 42"}))
        if "c2" in results:
            return say("follow-up: " + results["c2"])
        with self._lock:
            if not self.failed:
                self.failed = True
                return Fail(502)
        return calls(tool_call("c2", "create_ticket", {"title": "follow-up"}))


def test_a_kept_result_taints_the_retry_as_the_fresh_one_did(stack: StackFactory) -> None:
    """Issue 51 §1: a write's result kept for a retry enters the run through the policy
    point like a fresh one, so an untrusted tool's kept result taints the retried run."""

    def untrusted_tickets(config: dict[str, Any]) -> dict[str, Any]:
        config["policy"] = {"tools": [{"tools": ["create_ticket"], "output": "untrusted"}]}
        config["tenants"][0]["policy"] = {"after_untrusted": "refuse"}
        return config

    s = stack(WritesAgainAfterTheRetry(), config=untrusted_tickets)
    answer = _sdk(s).chat.completions.create(model=MODEL, messages=USER)
    text = answer.choices[0].message.content or ""
    assert writes(s) == 1  # the kept write, not made again; the follow-up refused
    assert text.startswith("follow-up: ")
    assert "untrusted" in text
