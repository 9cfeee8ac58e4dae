"""A line logged while a request is served says which request (issue 52 §10): its id,
its tenant once admitted, its user as a digest; tasks it starts say so too; a line
outside any request says nothing of one, and a request's own fields win."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from dataclasses import dataclass

import pytest

from gateway.ops.log_context import serving, user_digest
from gateway.ops.logs import JsonFormatter
from tool_registry import FIELDS


@dataclass
class Served:
    request_id: str
    tenant: str = "-"
    user: str | None = None


def _lines(run: object) -> list[dict[str, object]]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("test.log_context")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        asyncio.run(run(log))  # type: ignore[operator]
    finally:
        log.removeHandler(handler)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_lines_carry_the_request_they_were_written_in() -> None:
    async def run(log: logging.Logger) -> None:
        log.warning("before any request")

        async def request(served: Served) -> None:
            serving(served)
            log.warning("admitting")
            served.tenant, served.user = "acme", "alice@example.com"
            log.warning("grant not read")
            await asyncio.create_task(asyncio.sleep(0))  # a task it started
            await asyncio.gather(_from_a_task(log))
            log.info("access", extra={FIELDS: {"request_id": "its-own"}})

        await asyncio.gather(request(Served("req_1")), request(Served("req_2", "beta")))
        log.warning("after")

    lines = _lines(run)
    said = [(ln["message"], ln.get("request_id"), ln.get("tenant"), ln.get("user")) for ln in lines]
    alice = user_digest("alice@example.com")
    assert said[0] == ("before any request", None, None, None)
    assert said[-1] == ("after", None, None, None)
    mine = [s for s in said if s[1] == "req_1"]
    assert mine == [
        ("admitting", "req_1", None, None),
        ("grant not read", "req_1", "acme", alice),
        ("from a task", "req_1", "acme", alice),
    ]
    assert ("access", "its-own", "acme", alice) in said
    assert "alice@example.com" not in json.dumps(lines)


async def _from_a_task(log: logging.Logger) -> None:
    log.warning("from a task")


@pytest.mark.parametrize("user", ["alice", "bob"])
def test_a_users_digest_is_stable_and_short(user: str) -> None:
    assert user_digest(user) == user_digest(user)
    assert len(user_digest(user)) == 18
    assert user not in user_digest(user)
