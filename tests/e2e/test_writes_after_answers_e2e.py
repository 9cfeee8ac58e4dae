"""A request's trace and runs row are kept after its answer is sent (issue 53 §2): the
answer does not wait for the store; the run is listed (and its trace read) once the
answer has arrived, on the replica that answered; and stopping the gateway loses none
of the writes still waiting. The store's writes are held shut by a gate here, so each
of these is seen, not inferred from timings."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import httpx
import pytest
import redis

from gateway.store.traces import TraceStore
from tests.e2e.test_console_e2e import console_config
from tests.e2e.test_inventory_e2e import ADMIN_KEY
from tests.support.recorder import Answer, Recorder
from tests.support.scripted import TENANT_KEY, Harness, Model, chat, tool_then_answer
from tests.support.servers import WAIT_S


def _gated(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Every trace write waits for the gate (off the event loop: the gateway serves on)."""
    gate = threading.Event()
    real = TraceStore.save

    async def save(self: TraceStore, *args: Any, **kwargs: Any) -> None:
        await asyncio.to_thread(gate.wait, WAIT_S)
        await real(self, *args, **kwargs)

    monkeypatch.setattr(TraceStore, "save", save)
    return gate


def _serve(harness: Harness) -> str:
    tickets = harness.serve(Recorder(lambda hit: Answer(body=b'{"title": "ok"}'))).url
    model = Model(tool_then_answer("read_ticket"))
    data = console_config(harness.serve(model.recorder).url, tools_url=tickets)
    return harness.gateway(data).url


def _ask(base: str) -> httpx.Response:
    answer = httpx.post(
        f"{base}/v1/chat/completions",
        json=chat('{"id": "T-1"}'),
        headers={"authorization": f"Bearer {TENANT_KEY}"},
        timeout=WAIT_S,
    )
    assert answer.status_code == 200, answer.text
    return answer


def test_the_answer_comes_first_and_the_run_is_listed_once_it_has(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = _gated(monkeypatch)
    base = _serve(harness)
    answered = _ask(base)  # answered while its trace cannot be written
    assert not gate.is_set()
    request_id = answered.headers["x-request-id"]
    listed: list[httpx.Response] = []

    def read() -> None:  # the operator's read waits for this replica's writes
        listed.append(
            httpx.get(
                f"{base}/v1/toolgate/runs/acme/{request_id}",
                headers={"authorization": f"Bearer {ADMIN_KEY}"},
                timeout=WAIT_S,
            )
        )

    reader = threading.Thread(target=read)
    reader.start()
    reader.join(timeout=0.3)
    assert reader.is_alive()  # still waiting for the trace: it would be missing else
    gate.set()
    reader.join(timeout=WAIT_S)
    [run] = listed
    assert run.status_code == 200, run.text
    assert run.json()["trace"]["tool_calls"][0]["name"] == "read_ticket"
    runs = httpx.get(
        f"{base}/v1/toolgate/runs", headers={"authorization": f"Bearer {ADMIN_KEY}"}
    ).json()["data"]
    assert [r["request_id"] for r in runs] == [request_id]


def test_stopping_the_gateway_loses_no_write_still_waiting(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, redis_url: str, redis_prefix: str
) -> None:
    gate = _gated(monkeypatch)
    prefix = f"{redis_prefix}stop-{uuid.uuid4().hex[:8]}:"  # this test's keys alone
    harness.store = {"url": redis_url, "prefix": prefix, "timeout_s": 2.0}
    tickets = harness.serve(Recorder(lambda hit: Answer(body=b'{"title": "ok"}'))).url
    model = Model(tool_then_answer("read_ticket"))
    data = console_config(harness.serve(model.recorder).url, tools_url=tickets)
    data["store"] = harness.store
    from gateway.app import create_app
    from gateway.config import GatewayConfig
    from tests.support.servers import ServerThread

    gateway = ServerThread(create_app(GatewayConfig.model_validate(data))).start()
    ids = [_ask(gateway.url).headers["x-request-id"] for _ in range(5)]
    client = redis.Redis.from_url(redis_url)
    try:

        def kept() -> int:
            return len(client.keys(f"{prefix}t:acme:trace:*"))

        assert kept() == 0  # every answer sent, no trace written yet
        stopping = threading.Thread(target=gateway.stop)
        stopping.start()
        stopping.join(timeout=0.3)
        assert stopping.is_alive()  # the gateway waits for its writes before it ends
        gate.set()
        stopping.join(timeout=WAIT_S)
        assert not stopping.is_alive()
        assert kept() == 5
        for request_id in ids:
            assert client.exists(f"{prefix}t:acme:trace:{request_id}")
    finally:
        gate.set()
        client.close()
