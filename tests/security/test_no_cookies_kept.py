"""The gateway keeps no cookies: a ``Set-Cookie`` from a tool or a model server is never
sent back on a later call — a tool's session cookie set during one tenant's call would
otherwise ride along on the next tenant's. The servers are reached by a host name
(``localhost``), as production reaches them: aiohttp's cookie jar ignores the cookies
of a bare IP address, so a test on ``127.0.0.1`` could not fail."""

from __future__ import annotations

import json

from tests.support.recorder import Answer, Received, Recorder
from tests.support.scripted import (
    OTHER_KEY,
    Harness,
    Model,
    chat,
    config,
    tool,
    tool_then_answer,
)

COOKIE = ("set-cookie", "sid=acme-session-1; Path=/; Max-Age=3600")


def _with_cookie(answer: Answer) -> Answer:
    answer.headers.append(COOKIE)
    return answer


def _by_name(url: str) -> str:
    return url.replace("127.0.0.1", "localhost")


def test_no_cookie_set_by_a_tool_or_a_model_server_is_sent_again(harness: Harness) -> None:
    tools = Recorder(lambda hit: _with_cookie(Answer()))
    tools_url = _by_name(harness.serve(tools).url)
    model = Model(tool_then_answer("lookup"))
    inner = model.recorder.respond

    def respond(hit: Received) -> Answer:
        return _with_cookie(inner(hit))

    model.recorder.respond = respond
    upstream = _by_name(harness.serve(model.recorder).url)
    lookup = tool("lookup", f"{tools_url}/lookup", {"q": {"type": "string"}})
    data = config(upstream, [lookup])
    data["tenants"][1]["tools"] = ["*"]
    gateway = harness.gateway(data)
    for key in (None, OTHER_KEY, None):
        client = harness.client(gateway) if key is None else harness.client(gateway, key=key)
        answer = client.post("/v1/chat/completions", json=chat(json.dumps({"q": "x"})))
        assert answer.status_code == 200, answer.text
    posts: list[Received] = [h for h in model.recorder.hits if h.method == "POST"]
    assert len(tools.hits) == 3
    assert len(posts) == 6
    for hit in [*tools.hits, *posts]:
        assert hit.all_values("cookie") == [], hit.header_list
