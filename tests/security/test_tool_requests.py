"""A model's arguments never take a tool call beyond the request its operator configured:
path arguments arrive byte for byte as encoded, credentials never follow a redirect to
another origin, and nothing odd in an argument, a header or a tool's answer is a 500.
Each test asserts what the tool (a recording server) and the canary actually received."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pytest

from tests.support.recorder import Answer, RawServer, Received, Recorder
from tests.support.scripted import (
    QUERY_SECRET,
    SECRETS,
    TOOL_SECRET,
    Harness,
    Model,
    assert_envelope,
    chat,
    config,
    tool,
    tool_then_answer,
)

ATTACKS = [
    "..",
    ".",
    "../..",
    "%2E%2E",
    "%2e%2e",
    "..%2F..",
    "a/../../b",
    "..;",
    ".%2E",
    "\u2025",  # two-dot leader
    "\uff0e\uff0e",  # fullwidth full stops
    "\\..\\",
    "?x=1#y",
    "@127.0.0.2",
    "%00",
    " ",
    "/",
    "//127.0.0.2/x",
]


def _expected_segment(value: str) -> str:
    return "%2E" * len(value) if value in (".", "..") else quote(value, safe="")


def test_path_arguments_arrive_byte_for_byte_as_encoded(harness: Harness) -> None:
    tools = Recorder()
    tools_url = harness.serve(tools).url
    model = Model(tool_then_answer("echo"))
    upstream = harness.serve(model.recorder).url
    echo = tool("echo", f"{tools_url}/echo/a/{{p}}/b", {"p": {"type": "string"}})
    gateway = harness.gateway(config(upstream, [echo]))
    client = harness.client(gateway)
    for value in ATTACKS:
        tools.clear()
        answer = client.post("/v1/chat/completions", json=chat(json.dumps({"p": value})))
        assert answer.status_code == 200, (value, answer.text)
        assert [hit.raw_path for hit in tools.hits] == [f"/echo/a/{_expected_segment(value)}/b"]


def test_two_dot_segments_cannot_drop_a_bound_tenant(harness: Harness) -> None:
    tools = Recorder()
    tools_url = harness.serve(tools).url
    model = Model(tool_then_answer("crm"))
    upstream = harness.serve(model.recorder).url
    crm = tool(
        "crm",
        f"{tools_url}/crm/{{tenant}}/customers/{{customer}}/{{part}}",
        {"customer": {"type": "string"}, "part": {"type": "string"}, "tenant": {"type": "string"}},
        bind={"tenant": "{tenant.id}"},
    )
    gateway = harness.gateway(config(upstream, [crm]))
    client = harness.client(gateway)
    arguments = {"customer": "..", "part": "..", "tenant": "beta"}
    assert client.post("/v1/chat/completions", json=chat(json.dumps(arguments))).status_code == 200
    assert [hit.raw_path for hit in tools.hits] == ["/crm/acme/customers/%2E%2E/%2E%2E"]


def _redirecting(target: str, status: int = 302) -> Recorder:
    """A tool that sends every first request to ``target`` and answers the rest."""

    def respond(hit: Received) -> Answer:
        if hit.raw_path.startswith("/start"):
            return Answer(status, b"", [("location", target)])
        if hit.raw_path.startswith("/hop"):
            return Answer(307, b"", [("location", target.replace("/hop", "/landed"))])
        return Answer(body=b'{"landed": true}')

    return Recorder(respond)


def _secret_tool(url: str, method: str = "GET") -> dict[str, Any]:
    return tool(
        "fetch",
        f"{url}/start?key={QUERY_SECRET}",
        {"q": {"type": "string"}, "user": {"type": "string"}},
        bind={"user": "{header.x-toolgate-user}"},
        http={
            "url": f"{url}/start?key={QUERY_SECRET}",
            "method": method,
            "follow_redirects": True,
            "headers": {
                "X-Api-Key": TOOL_SECRET,
                "Authorization": f"Bearer {TOOL_SECRET}",
                "X-User": "{user}",
            },
        },
    )


CONFIGURED = ("x-api-key", "authorization", "x-user", "cookie")


@pytest.mark.parametrize("method", ["GET", "POST"])
@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_no_configured_or_bound_header_follows_a_redirect_to_another_host(
    harness: Harness, method: str, status: int
) -> None:
    canary = Recorder()
    canary_url = harness.serve(canary, host="127.0.0.2").url
    tools = _redirecting(f"{canary_url}/landed", status)
    tools_url = harness.serve(tools).url
    model = Model(tool_then_answer("fetch"))
    gateway = harness.gateway(
        config(harness.serve(model.recorder).url, [_secret_tool(tools_url, method)])
    )
    client = harness.client(gateway, headers={"x-toolgate-user": "alice-bound-value"})
    answer = client.post("/v1/chat/completions", json=chat('{"q": "x"}'))
    assert answer.status_code == 200, answer.text
    assert [h.raw_path.split("?")[0] for h in tools.hits] == ["/start"]
    assert tools.hits[0].headers["x-api-key"] == TOOL_SECRET  # the tool itself got them
    assert len(canary.hits) == 1
    landed = canary.hits[0]
    assert not set(landed.headers) & set(CONFIGURED)
    for secret in (*SECRETS, "alice-bound-value"):
        assert secret not in canary.all_text()
    assert model.tool_results() == ['{"ok":true}']  # the canary's answer


def test_a_same_origin_hop_keeps_the_headers_and_a_later_cross_origin_hop_drops_them(
    harness: Harness,
) -> None:
    canary = Recorder()
    other_port = Recorder()  # same host, another port: another origin too
    other_url = harness.serve(other_port).url
    canary_url = harness.serve(canary, host="127.0.0.2").url
    for target, far in ((canary_url, canary), (other_url, other_port)):

        def hops(hit: Received, target: str = target) -> Answer:
            if hit.raw_path.startswith("/start"):
                return Answer(302, b"", [("location", "/hop")])
            return Answer(307, b"", [("location", f"{target}/landed")])

        tools = Recorder(hops)
        tools_url = harness.serve(tools).url
        model = Model(tool_then_answer("fetch"))
        gateway = harness.gateway(
            config(harness.serve(model.recorder).url, [_secret_tool(tools_url)])
        )
        client = harness.client(gateway, headers={"x-toolgate-user": "alice-bound-value"})
        assert client.post("/v1/chat/completions", json=chat("{}")).status_code == 200
        assert [h.raw_path.split("?")[0] for h in tools.hits] == ["/start", "/hop"]
        assert tools.hits[1].headers["x-api-key"] == TOOL_SECRET
        assert tools.hits[1].headers["x-user"] == "alice-bound-value"
        assert len(far.hits) == 1
        assert not set(far.hits[0].headers) & set(CONFIGURED)
        assert TOOL_SECRET not in far.all_text()


@pytest.mark.parametrize(
    "location",
    [
        "http://[::1",
        "http://a\tb/",
        "ftp://127.0.0.2/x",
        "//[",
        "http://0xa9fea9fe/",
        "http://2852039166/",
        "http://0251.0376.0251.0376/",
        "http://[::169.254.169.254]/",
        "http://[::ffff:169.254.169.254]/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://[2002:a9fe:a9fe::]/",
        "http://169.254.169.254/latest/meta-data/",
        "javascript:alert(1)",
    ],
)
def test_a_redirect_that_is_refused_or_unparseable_is_an_error_result(
    harness: Harness, location: str
) -> None:
    tools = Recorder(lambda hit: Answer(302, b"", [("location", location)]))
    tools_url = harness.serve(tools).url
    model = Model(tool_then_answer("fetch"))
    gateway = harness.gateway(config(harness.serve(model.recorder).url, [_secret_tool(tools_url)]))
    client = harness.client(gateway, headers={"x-toolgate-user": "alice"})
    answer = client.post("/v1/chat/completions", json=chat("{}"))
    assert answer.status_code == 200, answer.text
    result = json.loads(model.tool_results()[0])
    assert result["error"]
    assert len(tools.hits) == 1


@pytest.mark.parametrize(
    "value",
    ["é", "\u2028", "\x7f", "\x0b", "a\r\nX-Injected: 1", "a\nb", "\x00", "日本"],
)
def test_header_values_an_http_header_cannot_carry_are_invalid_arguments(
    harness: Harness, value: str
) -> None:
    tools = Recorder()
    tools_url = harness.serve(tools).url
    model = Model(tool_then_answer("named"))
    named = tool(
        "named",
        f"{tools_url}/n",
        {"name": {"type": "string"}},
        http={"url": f"{tools_url}/n", "headers": {"X-Name": "{name}"}},
    )
    gateway = harness.gateway(config(harness.serve(model.recorder).url, [named]))
    answer = harness.client(gateway).post(
        "/v1/chat/completions", json=chat(json.dumps({"name": value}))
    )
    assert answer.status_code == 200, answer.text
    assert tools.hits == []
    assert "cannot carry" in json.loads(model.tool_results()[0])["error"]


# (Control characters in a request header never reach the gateway: uvicorn refuses the
# request with its own plain-text 400, see docs/security.md.)
@pytest.mark.parametrize("user", [b"J\xf6rg", b"caf\xc3\xa9", b"\xff\xfe"])
def test_a_bound_client_header_that_cannot_be_sent_is_an_error_result(
    harness: Harness, user: bytes
) -> None:
    tools = Recorder()
    tools_url = harness.serve(tools).url
    model = Model(tool_then_answer("fetch"))
    gateway = harness.gateway(config(harness.serve(model.recorder).url, [_secret_tool(tools_url)]))
    client = harness.client(gateway)
    answer = client.post(
        "/v1/chat/completions", json=chat("{}"), headers=[(b"x-toolgate-user", user)]
    )
    assert answer.status_code == 200, answer.text
    assert tools.hits == []
    result = model.tool_results()[0]
    assert "cannot carry" in result
    assert user.decode("latin-1") not in result


@pytest.mark.parametrize(
    ("where", "size"), [("path", 70_000), ("query", 70_000), ("query", 900_000)]
)
def test_a_url_over_the_length_limit_is_an_error_result(
    harness: Harness, where: str, size: int
) -> None:
    tools = Recorder()
    tools_url = harness.serve(tools).url
    model = Model(tool_then_answer("long"))
    url = f"{tools_url}/p/{{v}}" if where == "path" else f"{tools_url}/q"
    long = tool("long", url, {"v": {"type": "string"}})
    gateway = harness.gateway(
        config(harness.serve(model.recorder).url, [long], server={"max_body_bytes": 2_000_000})
    )
    answer = harness.client(gateway).post(
        "/v1/chat/completions", json=chat(json.dumps({"v": "x" * size}))
    )
    assert answer.status_code == 200, answer.text
    assert tools.hits == []
    assert "over the limit" in json.loads(model.tool_results()[0])["error"]


@pytest.mark.parametrize(
    "location", [b"\x00", b"http://\x01x/", b"\xff\xfe", b"http://", b"http:///elsewhere"]
)
def test_a_location_no_client_could_follow_elsewhere_stays_on_the_origin(
    harness: Harness, location: bytes
) -> None:
    """Control bytes end in an error result; an empty host is the same origin (httpx's rule)."""
    reply = b"HTTP/1.1 302 Found\r\nLocation: " + location + b"\r\nContent-Length: 0\r\n\r\n"
    with RawServer(reply) as raw:
        model = Model(tool_then_answer("fetch"))
        gateway = harness.gateway(
            config(harness.serve(model.recorder).url, [_secret_tool(raw.url)])
        )
        client = harness.client(gateway, headers={"x-toolgate-user": "alice"})
        answer = client.post("/v1/chat/completions", json=chat("{}"))
        assert answer.status_code == 200, answer.text
        assert 1 <= raw.connections <= 11  # the start, and at most max_redirects hops back to it
        assert json.loads(model.tool_results()[0])["error"]


@pytest.mark.parametrize(
    "reply",
    [
        b"SSH-2.0-OpenSSH_9.6\r\n",
        b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n{}",
        b"HTTP/1.1 abc\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
        b"",
    ],
)
def test_a_tool_that_does_not_speak_http_is_an_error_result(harness: Harness, reply: bytes) -> None:
    with RawServer(reply) as raw:
        model = Model(tool_then_answer("raw"))
        gateway = harness.gateway(
            config(harness.serve(model.recorder).url, [tool("raw", f"{raw.url}/x")])
        )
        answer = harness.client(gateway).post("/v1/chat/completions", json=chat("{}"))
        assert answer.status_code == 200, answer.text
        assert raw.connections >= 1
        assert json.loads(model.tool_results()[0])["error"]


@pytest.mark.parametrize(
    "url",
    [
        "http://0251.0376.0251.0376/",
        "http://2852039166/x",
        "http://0xa9fea9fe/",
        "http://127.1/",
        "http://[::1/",
        "http://exa mple.com/",
        "http://example.com/\u2028",
    ],
)
def test_a_tool_url_that_does_not_parse_cleanly_is_refused_at_load(
    harness: Harness, url: str
) -> None:
    from gateway import GatewayConfig

    with pytest.raises(ValueError, match=r"tools\.0\.http\.url"):
        GatewayConfig.model_validate(config("http://127.0.0.1:9", [tool("t", url)]))


def test_the_client_sees_no_detail_of_a_refused_destination(harness: Harness) -> None:
    model = Model(tool_then_answer("meta"))
    meta = tool("meta", "http://[::169.254.169.254]/latest/meta-data/")
    gateway = harness.gateway(config(harness.serve(model.recorder).url, [meta]))
    answer = harness.client(gateway).post("/v1/chat/completions", json=chat("{}"))
    assert answer.status_code == 200
    assert "egress guard refused" in model.tool_results()[0]
    assert "169.254" not in model.tool_results()[0]


def test_an_unknown_route_is_a_404_envelope(harness: Harness) -> None:
    """An unknown route is the OpenAI error envelope, not a plain-text page."""
    model = Model()
    gateway = harness.gateway(config(harness.serve(model.recorder).url, []))
    assert_envelope(harness.client(gateway).post("/v1/nope", json={}), 404)
