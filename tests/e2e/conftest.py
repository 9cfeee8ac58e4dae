"""End-to-end fixtures: a fake upstream, fake tools and the gateway, all under uvicorn
on free loopback ports, driven by the real ``openai`` SDK."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai
import pytest

from gateway import GatewayConfig, create_app
from gateway.app import GatewayApp
from tests.support.fake_tools import FakeTools
from tests.support.fake_upstream import FakeUpstream, Script, say
from tests.support.servers import START_S, ServerThread, free_port

ACME_KEY = "sk-acme-test-key"
BETA_KEY = "sk-beta-test-key"
MODEL = "gpt-test"


def _tool(
    name: str, url: str, properties: dict[str, Any], required: list[str], **extra: Any
) -> dict[str, Any]:
    http = {"url": url, **extra.pop("http", {})}
    return {
        "name": name,
        "description": f"The {name} tool.",
        "parameters": {"type": "object", "properties": properties, "required": required},
        "http": http,
        **extra,
    }


def tool_definitions(tools_url: str) -> list[dict[str, Any]]:
    number = {"type": "number"}
    return [
        _tool(
            "string_length",
            f"{tools_url}/len",
            {"s": {"type": "string"}},
            ["s"],
            http={"query": {"s": "{s}"}},
            result={"pick": "length"},
        ),
        _tool(
            "add",
            f"{tools_url}/add",
            {"a": number, "b": number},
            ["a", "b"],
            http={"method": "POST"},
            result={"pick": "sum"},
        ),
        _tool("sqrt", f"{tools_url}/sqrt", {"x": number}, ["x"], result={"pick": "sqrt"}),
        _tool("slow", f"{tools_url}/slow", {"ms": {"type": "integer"}}, ["ms"]),
        _tool(
            "slow_timeout",
            f"{tools_url}/slow",
            {"ms": {"type": "integer"}},
            ["ms"],
            http={"timeout_s": 0.3},
        ),
        _tool("fail", f"{tools_url}/fail", {}, []),
        _tool(
            "lookup",
            f"{tools_url}/echo/{{tenant}}/customers/{{customer}}",
            {"customer": {"type": "string"}, "tenant": {"type": "string"}},
            ["customer", "tenant"],
            bind={"tenant": "{tenant.id}", "user": "{header.x-toolgate-user}"},
            http={"headers": {"x-acting-user": "{user}"}},
        ),
        _tool(
            "create_ticket",
            f"{tools_url}/echo/tickets",
            {"title": {"type": "string"}},
            ["title"],
            http={"method": "POST"},
        ),
        _tool("secret_admin", f"{tools_url}/echo/admin", {}, []),
        _tool("hang", f"{tools_url}/hang", {}, [], http={"timeout_s": 60}),
        _tool(
            "cached_len",
            f"{tools_url}/len",
            {"s": {"type": "string"}},
            ["s"],
            http={"query": {"s": "{s}"}},
            result={"pick": "length"},
            cache_ttl_s=60,
        ),
    ]


ACME_TOOLS = [
    "string_length",
    "add",
    "sqrt",
    "slow*",
    "fail",
    "lookup",
    "create_ticket",
    "hang",
    "cached_len",
]


def gateway_config(
    upstream_url: str, tools_url: str, limits: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "server": {"stream_keepalive_s": 0.05},
        "upstreams": [
            {
                "name": "fake",
                "base_url": f"{upstream_url}/v1",
                "api_key": "sk-upstream",
                "max_retries": 0,
            }
        ],
        "models": [
            {"name": MODEL, "upstream": "fake"},
            {"name": "renamed", "upstream": "fake", "upstream_model": "upstream-name"},
            {"name": "other-model", "upstream": "fake"},
        ],
        "tools": tool_definitions(tools_url),
        "tenants": [
            {
                "id": "acme",
                "keys": [ACME_KEY],
                "models": [MODEL, "renamed"],
                "tools": ACME_TOOLS,
                "limits": limits or {},
            },
            {
                "id": "beta",
                "keys": [BETA_KEY],
                "models": ["*"],
                "tools": ["string_length", "cached_len"],
            },
        ],
    }


@dataclass
class Stack:
    upstream: FakeUpstream
    tools: FakeTools
    gateway: ServerThread
    app: GatewayApp
    clients: list[openai.OpenAI] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"{self.gateway.url}/v1"

    def client(self, key: str = ACME_KEY, **options: Any) -> openai.OpenAI:
        client = openai.OpenAI(base_url=self.base_url, api_key=key, max_retries=0, **options)
        self.clients.append(client)
        return client


StackFactory = Callable[..., Stack]


@pytest.fixture
def stack() -> Iterator[StackFactory]:
    """Start a stack: ``stack(script, limits={...}, config=lambda c: c, ...)``."""
    servers: list[ServerThread] = []
    stacks: list[Stack] = []

    def start(
        script: Script = lambda body: say("hello"),
        limits: dict[str, Any] | None = None,
        config: Callable[[dict[str, Any]], dict[str, Any]] = lambda c: c,
        delay_s: float = 0.0,
        word_delay_s: float = 0.0,
        send_usage: bool = True,
        usage: dict[str, Any] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> Stack:
        upstream = FakeUpstream(
            script, delay_s=delay_s, word_delay_s=word_delay_s, send_usage=send_usage, usage=usage
        )
        tools = FakeTools()
        upstream_server = ServerThread(upstream.app()).start()
        servers.append(upstream_server)
        tools_server = ServerThread(tools.app()).start()
        servers.append(tools_server)
        data = config(gateway_config(upstream_server.url, tools_server.url, limits))
        app = create_app(GatewayConfig.model_validate(data), clock=clock or time.time)
        gateway = ServerThread(app).start()
        servers.append(gateway)
        started = Stack(upstream, tools, gateway, app)
        stacks.append(started)
        return started

    yield start
    for started in stacks:
        for client in started.clients:
            client.close()
    for server in reversed(servers):
        server.stop()


@pytest.fixture
def private_redis(redis_url: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A Redis of this test's own, which it may stop and start."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed: apt-get install redis-server")
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + START_S
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}", timeout=0.2)
        except httpx.RemoteProtocolError:
            break  # it listens (and speaks RESP, not HTTP)
        except httpx.TransportError:
            assert time.monotonic() < deadline, "the private redis-server did not start"
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0", process
    process.send_signal(signal.SIGCONT)
    process.terminate()
    process.wait(timeout=10)
