"""OpenTelemetry end to end (docs/design.md §14): the gateway under uvicorn exports GenAI
spans over OTLP/HTTP to a real receiver on loopback (protobuf decoded with
opentelemetry-proto), with the client's trace as parent; the upstream, an HTTP tool,
an OpenAPI operation and an MCP server each receive the ``traceparent`` of their own
span, driven by the real ``openai`` SDK."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, cast

import httpx
import httpx2
import openai
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import RequestParamsMeta

from gateway import GatewayConfig, create_app
from tests.support.mcp_servers import HeaderLog, tools_server
from tests.support.otlp import (
    CLIENT,
    INTERNAL,
    SERVER,
    STATUS_ERROR,
    GrpcCollector,
    OtlpReceiver,
    ReceivedSpan,
)
from tests.support.recorder import Answer, Received, Recorder
from tests.support.scripted import (
    MODEL,
    TENANT_KEY,
    UPSTREAM_KEY,
    Harness,
    Model,
    asks,
    call,
    chat,
    says,
)
from tests.support.servers import (
    TOOLGATE,
    ServerThread,
    free_port,
    until,
    wait_for,
    wait_healthy,
)

PETS = Path(__file__).parent.parent / "fixtures" / "openapi" / "pets-3.0.json"
PETS_KEY = "pets-query-key-CANARY-0024"
MCP_TOKEN = "mcp-bearer-CANARY-0024"
CONTENT = "CONTENT-CANARY-the-user-words"
RESULT = "RESULT-CANARY-the-tool-words"
FAST_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "50"}


def pets_api(hit: Received) -> Answer:
    if hit.raw_path == "/specs/pets.json":
        return Answer(body=PETS.read_bytes())
    if hit.raw_path.startswith("/v1/pets?"):
        return Answer(body=json.dumps([{"id": 7, "name": "Rex"}]).encode())
    return Answer(404, b'{"error": "no"}')


def traceparent() -> tuple[str, str, str]:
    """A client's W3C traceparent, with its trace and span ids."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def parent_of(header: str | None) -> str:
    """The span id a ``traceparent`` names."""
    assert header is not None
    version, _, span_id, flags = header.split("-")
    assert version == "00"
    assert int(flags, 16) & 1  # sampled (a trace the gateway starts is also "random": 03)
    return span_id


class Sources:
    """An HTTP tool, an OpenAPI document and an MCP server, each recording what came."""

    def __init__(self, harness: Harness) -> None:
        self.tools = Recorder(lambda hit: Answer(body=json.dumps({"length": RESULT}).encode()))
        self.pets = Recorder(pets_api)
        self.mcp = HeaderLog(tools_server().streamable_http_app())
        self.tools_url = harness.serve(self.tools).url
        self.pets_url = harness.serve(self.pets).url
        self.mcp_url = harness.serve(self.mcp).url

    def config(self, upstream: str, **otel: Any) -> dict[str, Any]:
        return {
            "upstreams": [{"name": "up", "base_url": f"{upstream}/v1", "api_key": UPSTREAM_KEY}],
            "models": [{"name": MODEL, "upstream": "up"}],
            "tools": [
                {
                    "name": "string_length",
                    "description": "Length of a string.",
                    "parameters": {"type": "object", "properties": {"s": {"type": "string"}}},
                    "http": {"url": f"{self.tools_url}/len"},
                    "result": {"pick": "length"},
                }
            ],
            "openapi": [
                {
                    "spec": f"{self.pets_url}/specs/pets.json",
                    "prefix": "pets_",
                    "auth": {"queryKey": PETS_KEY},
                    "result": {"pick": "[].name"},
                }
            ],
            "mcp": [
                {
                    "name": "demo",
                    "url": f"{self.mcp_url}/mcp",
                    "prefix": "demo_",
                    "headers": {"Authorization": f"Bearer {MCP_TOKEN}"},
                }
            ],
            "tenants": [{"id": "acme", "keys": [TENANT_KEY], "tools": ["*"]}],
            "otel": otel,
        }


def gateway(harness: Harness, data: dict[str, Any], **environ: str) -> ServerThread:
    app = create_app(GatewayConfig.model_validate(data), environ=FAST_EXPORT | environ)
    return harness.serve(app)


def three_sources_model() -> Model:
    """Two hidden rounds (three tool calls), then the answer."""
    return Model(
        asks(
            call("string_length", {"s": CONTENT}, "c1"),
            call("pets_findPetsByStatus", {"status": "sold"}, "c2"),
        ),
        asks(call("demo_add", {"a": 40, "b": 2}, "c3")),
        says("Done."),
    )


def spans_of(collector: OtlpReceiver, trace_id: str, count: int) -> list[ReceivedSpan]:
    """A trace's spans, at least ``count``, once its request's span is among them: that
    span ends last, and the exporter sends spans in the order they ended, so every span
    the request made is there with it."""

    def whole(spans: list[ReceivedSpan]) -> bool:
        return len(spans) >= count and any(span.kind == SERVER for span in spans)

    found = until(lambda: collector.of_trace(trace_id), whole)
    assert found is not None, collector.of_trace(trace_id)
    return found


def strings(span: ReceivedSpan) -> str:
    """Everything a span says, as one text to search."""
    return json.dumps([span.name, span.attributes, span.events, span.resource])


def test_a_request_is_one_span_tree_under_the_clients_trace(harness: Harness) -> None:
    collector = OtlpReceiver()
    otlp = harness.serve(collector).url
    sources = Sources(harness)
    model = three_sources_model()
    upstream = harness.serve(model.recorder).url
    server = gateway(harness, sources.config(upstream, endpoint=otlp))
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=TENANT_KEY, max_retries=0)
    harness.on_close(client.close)
    header, trace_id, client_span = traceparent()

    raw = client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": CONTENT}],
        extra_headers={
            "traceparent": header,
            "tracestate": "vendor=opaque",
            "x-request-id": "client-side-id-7",
        },
    )
    assert raw.parse().choices[0].message.content == "Done."
    assert raw.headers["x-toolgate-trace-id"] == trace_id

    spans = spans_of(collector, trace_id, 7)
    assert len(spans) == 7
    (request,) = [s for s in spans if s.kind == SERVER]
    rounds = sorted((s for s in spans if s.kind == CLIENT), key=lambda s: s.start_ns)
    tools = {s.attributes["gen_ai.tool.name"]: s for s in spans if s.kind == INTERNAL}
    assert request.name == "POST /v1/chat/completions"
    assert request.parent_id == client_span
    assert [s.name for s in rounds] == [f"chat {MODEL}"] * 3
    assert set(tools) == {"string_length", "pets_findPetsByStatus", "demo_add"}
    assert {s.name for s in tools.values()} == {f"execute_tool {n}" for n in tools}
    assert all(s.parent_id == request.span_id for s in [*rounds, *tools.values()])

    # Each far side saw the traceparent of its own span, and the client's tracestate.
    posts = [h for h in model.recorder.hits if h.method == "POST"]
    assert [parent_of(h.headers.get("traceparent")) for h in posts] == [s.span_id for s in rounds]
    assert all(h.headers.get("tracestate") == "vendor=opaque" for h in posts)
    (length_hit,) = sources.tools.hits
    assert parent_of(length_hit.headers.get("traceparent")) == tools["string_length"].span_id
    (pets_hit,) = [h for h in sources.pets.hits if h.raw_path.startswith("/v1/pets?")]
    assert parent_of(pets_hit.headers.get("traceparent")) == (
        tools["pets_findPetsByStatus"].span_id
    )
    (mcp_call,) = sources.mcp.calls()
    meta = mcp_call["params"]["_meta"]
    assert parent_of(meta["traceparent"]) == tools["demo_add"].span_id

    # Attributes as the GenAI and HTTP conventions name them.
    assert request.attributes["http.route"] == "/v1/chat/completions"
    assert request.attributes["http.response.status_code"] == 200
    assert request.attributes["toolgate.tenant"] == "acme"
    assert request.attributes["toolgate.request_id"] == raw.headers["x-request-id"]
    assert request.attributes["http.request.header.x-request-id"] == ["client-side-id-7"]
    assert request.attributes["toolgate.iterations"] == 3
    assert request.attributes["toolgate.tool_calls"] == 3
    assert request.attributes["gen_ai.usage.input_tokens"] == 3 * 3
    assert request.resource["service.name"] == "toolgate"
    first, _, last = rounds
    for number, span in enumerate(rounds, 1):
        assert span.attributes["gen_ai.operation.name"] == "chat"
        assert span.attributes["gen_ai.provider.name"] == "up"
        assert span.attributes["gen_ai.request.model"] == MODEL
        assert span.attributes["gen_ai.response.model"] == MODEL
        assert span.attributes["gen_ai.response.id"].startswith("chatcmpl-")
        assert span.attributes["gen_ai.usage.input_tokens"] == 3
        assert span.attributes["gen_ai.usage.output_tokens"] == 2
        assert span.attributes["server.address"] == "127.0.0.1"
        assert span.attributes["toolgate.round"] == number
    assert first.attributes["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert last.attributes["gen_ai.response.finish_reasons"] == ["stop"]
    assert first.end_ns <= tools["string_length"].start_ns
    assert tools["demo_add"].end_ns <= last.start_ns
    for span in tools.values():
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
        assert span.attributes["gen_ai.tool.type"] == "extension"
        assert span.attributes["toolgate.tool.outcome"] == "ok"
    assert tools["string_length"].attributes["gen_ai.tool.call.id"] == "c1"
    assert tools["string_length"].attributes["toolgate.tool.source"] == "http"
    assert tools["string_length"].attributes["http.response.status_code"] == 200
    assert tools["pets_findPetsByStatus"].attributes["toolgate.tool.source"] == (
        f"openapi:{sources.pets_url}/specs/pets.json"
    )
    assert tools["demo_add"].attributes["toolgate.tool.source"] == "mcp:demo"
    assert "http.response.status_code" not in tools["demo_add"].attributes

    # No secret, and no content: it was not asked for.
    everything = "\n".join(strings(s) for s in spans)
    for secret in (UPSTREAM_KEY, TENANT_KEY, PETS_KEY, MCP_TOKEN, CONTENT, RESULT):
        assert secret not in everything
    assert "gen_ai.input.messages" not in everything
    assert "gen_ai.tool.call.arguments" not in everything


def length_then_answer(body: dict[str, Any]) -> dict[str, Any]:
    """Every request: one call of string_length, then the answer."""
    if body["messages"][-1]["role"] == "tool":
        return says("Done.")
    return asks(call("string_length", {"s": CONTENT}, "c1"))


def one_tool_stack(
    harness: Harness, collector: OtlpReceiver | None, model: Model | None = None, **otel: Any
) -> tuple[ServerThread, Model, Sources]:
    sources = Sources(harness)
    model = model or Model(length_then_answer)
    upstream = harness.serve(model.recorder).url
    if collector is not None:
        otel.setdefault("endpoint", harness.serve(collector).url)
    return gateway(harness, sources.config(upstream, **otel)), model, sources


def sdk(harness: Harness, server: ServerThread) -> openai.OpenAI:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=TENANT_KEY, max_retries=0)
    harness.on_close(client.close)
    return client


def test_streamed_and_responses_requests_are_traced_alike(harness: Harness) -> None:
    collector = OtlpReceiver()
    server, _model, _ = one_tool_stack(harness, collector)
    client = sdk(harness, server)

    header, trace_id, client_span = traceparent()
    with client.chat.completions.with_streaming_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "go"}],
        stream=True,
        extra_headers={"traceparent": header},
    ) as response:
        assert response.headers["x-toolgate-trace-id"] == trace_id
        text = "".join(
            chunk.choices[0].delta.content or "" for chunk in response.parse() if chunk.choices
        )
    assert text == "Done."
    spans = spans_of(collector, trace_id, 4)
    (request,) = [s for s in spans if s.kind == SERVER]
    assert request.parent_id == client_span
    assert request.attributes["http.response.status_code"] == 200
    assert sorted(s.name for s in spans if s.parent_id == request.span_id) == [
        f"chat {MODEL}",
        f"chat {MODEL}",
        "execute_tool string_length",
    ]
    # The request's span ends when its stream does, after every span under it.
    assert request.end_ns >= max(s.end_ns for s in spans)

    header, trace_id, client_span = traceparent()
    answer = client.responses.with_raw_response.create(
        model=MODEL, input="go", extra_headers={"traceparent": header}
    )
    assert answer.parse().output_text == "Done."
    spans = spans_of(collector, trace_id, 4)
    (request,) = [s for s in spans if s.kind == SERVER]
    assert request.name == "POST /v1/responses"
    assert request.parent_id == client_span
    assert len([s for s in spans if s.parent_id == request.span_id]) == 3

    header, trace_id, client_span = traceparent()
    with client.responses.stream(
        model=MODEL, input="go", extra_headers={"traceparent": header}
    ) as stream:
        assert stream.get_final_response().output_text == "Done."
    spans = spans_of(collector, trace_id, 4)
    (request,) = [s for s in spans if s.kind == SERVER]
    assert request.name == "POST /v1/responses"
    assert request.parent_id == client_span
    assert sorted(s.name for s in spans if s.parent_id == request.span_id) == [
        f"chat {MODEL}",
        f"chat {MODEL}",
        "execute_tool string_length",
    ]


def test_content_is_recorded_only_when_asked_and_then_redacted(harness: Harness) -> None:
    collector = OtlpReceiver()
    sources = Sources(harness)
    model = Model(asks(call("lookup", {"q": CONTENT}, "c1")), says("Done."))
    upstream = harness.serve(model.recorder).url
    data = sources.config(upstream, endpoint=harness.serve(collector).url, capture_content=True)
    data["tools"].append(
        {
            "name": "lookup",
            "description": "Looks up for a user.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            "http": {"url": f"{sources.tools_url}/lookup", "query": {"q": "{q}", "u": "{user}"}},
            "bind": {"user": "{header.x-user}"},
        }
    )
    server = gateway(harness, data)
    header, trace_id, _ = traceparent()
    words = f"{CONTENT} and the upstream key {UPSTREAM_KEY}"
    sdk(harness, server).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": words}],
        extra_headers={"traceparent": header, "x-user": "user-CANARY-bound"},
    )
    spans = spans_of(collector, trace_id, 4)
    first, last = sorted((s for s in spans if s.kind == CLIENT), key=lambda s: s.start_ns)
    (tool,) = [s for s in spans if s.kind == INTERNAL]
    asked = json.loads(first.attributes["gen_ai.input.messages"])
    assert asked[0]["role"] == "user"
    assert CONTENT in asked[0]["parts"][0]["content"]
    said = json.loads(first.attributes["gen_ai.output.messages"])
    assert said[0]["parts"][0]["type"] == "tool_call"
    assert said[0]["parts"][0]["name"] == "lookup"
    fed = json.loads(last.attributes["gen_ai.input.messages"])
    assert fed[-1]["parts"][0]["type"] == "tool_call_response"
    assert RESULT in fed[-1]["parts"][0]["response"]
    assert json.loads(last.attributes["gen_ai.output.messages"])[0]["parts"] == [
        {"type": "text", "content": "Done."}
    ]
    arguments = json.loads(tool.attributes["gen_ai.tool.call.arguments"])
    assert arguments == {"q": CONTENT, "user": "[redacted]"}
    assert RESULT in tool.attributes["gen_ai.tool.call.result"]
    everything = "\n".join(strings(s) for s in spans)
    assert UPSTREAM_KEY not in everything  # configured secrets never leave
    assert "user-CANARY-bound" not in everything  # nor what a header bound
    assert sources.tools.hits[0].raw_path.endswith("u=user-CANARY-bound")


def test_trace_context_can_be_withheld_from_each_far_side(harness: Harness) -> None:
    collector = OtlpReceiver()
    sources = Sources(harness)
    model = three_sources_model()
    upstream = harness.serve(model.recorder).url
    data = sources.config(upstream, endpoint=harness.serve(collector).url)
    data["upstreams"][0]["trace_context"] = False
    data["tools"][0]["http"]["trace_context"] = False
    data["openapi"][0]["trace_context"] = False
    data["mcp"][0]["trace_context"] = False
    server = gateway(harness, data)
    header, trace_id, _ = traceparent()

    sdk(harness, server).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "go"}],
        extra_headers={"traceparent": header},
    )
    assert len(spans_of(collector, trace_id, 7)) == 7  # traced all the same
    hits = [*model.recorder.hits, *sources.tools.hits, *sources.pets.hits]
    assert not [h for h in hits if "traceparent" in h.headers]
    assert all("traceparent" not in h for h in sources.mcp.seen)
    (mcp_call,) = sources.mcp.calls()
    assert "traceparent" not in mcp_call["params"].get("_meta", {})


def test_tracing_is_off_unless_configured(harness: Harness) -> None:
    sources = Sources(harness)
    model = three_sources_model()
    upstream = harness.serve(model.recorder).url
    app = create_app(GatewayConfig.model_validate(sources.config(upstream)), environ={})
    server = harness.serve(app)
    header, _, _ = traceparent()

    raw = sdk(harness, server).chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "go"}],
        extra_headers={"traceparent": header},
    )
    assert "x-toolgate-trace-id" not in raw.headers
    assert app.state.gateway.telemetry is None
    hits = [*model.recorder.hits, *sources.tools.hits, *sources.pets.hits]
    assert not [h for h in hits if "traceparent" in h.headers]  # not even the client's
    (mcp_call,) = sources.mcp.calls()
    assert "traceparent" not in mcp_call["params"].get("_meta", {})


def test_the_environment_turns_tracing_on(harness: Harness) -> None:
    collector = OtlpReceiver()
    otlp = harness.serve(collector).url
    unused = "http://127.0.0.1:9"  # the test asks no model anything
    app = create_app(
        GatewayConfig.model_validate(Sources(harness).config(unused)),
        environ={
            **FAST_EXPORT,
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp,
            "OTEL_EXPORTER_OTLP_HEADERS": "x-collector-key=collector-CANARY-9",
            "OTEL_SERVICE_NAME": "gateway-eu",
            "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test",
        },
    )
    with ServerThread(app) as traced:
        response = httpx.get(
            f"{traced.url}/v1/models", headers={"authorization": f"Bearer {TENANT_KEY}"}
        )
        trace_id = response.headers["x-toolgate-trace-id"]
        (span,) = spans_of(collector, trace_id, 1)
    assert span.name == "GET /v1/models"
    assert span.resource["service.name"] == "gateway-eu"
    assert span.resource["deployment.environment"] == "test"
    assert collector.headers[0]["x-collector-key"] == "collector-CANARY-9"


def test_an_invalid_traceparent_starts_a_trace_of_its_own(harness: Harness) -> None:
    collector = OtlpReceiver()
    server, model, _ = one_tool_stack(harness, collector)
    for hostile in ("00-zz-yy-01", "00-" + "0" * 32 + "-" + "1" * 16 + "-01", "x" * 5000):
        raw = sdk(harness, server).chat.completions.with_raw_response.create(
            model=MODEL,
            messages=[{"role": "user", "content": "go"}],
            extra_headers={"traceparent": hostile},
        )
        trace_id = raw.headers["x-toolgate-trace-id"]
        assert trace_id != "0" * 32
        (request,) = [s for s in spans_of(collector, trace_id, 4) if s.kind == SERVER]
        assert request.parent_id == ""
        assert parent_of(model.recorder.hits[-1].headers["traceparent"]) != "1" * 16


def test_a_client_that_does_not_sample_is_followed(harness: Harness) -> None:
    collector = OtlpReceiver()
    server, _model, sources = one_tool_stack(harness, collector)
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    raw = sdk(harness, server).chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "go"}],
        extra_headers={"traceparent": f"00-{trace_id}-{span_id}-00"},
    )
    assert raw.headers["x-toolgate-trace-id"] == trace_id
    sent = sources.tools.hits[0].headers["traceparent"]
    assert sent.startswith(f"00-{trace_id}-")
    assert sent.endswith("-00")
    time.sleep(0.3)
    assert collector.of_trace(trace_id) == []


def test_policy_verdicts_caps_and_reused_calls_are_on_the_spans(harness: Harness) -> None:
    collector = OtlpReceiver()
    model = Model(
        asks(
            call("string_length", {"s": "a"}, "c1"),
            call("string_length", {"s": "a"}, "c2"),
            call("pets_deletePet", {"petId": 7}, "c3"),
        )
    )
    sources = Sources(harness)
    upstream = harness.serve(model.recorder).url
    data = sources.config(upstream, endpoint=harness.serve(collector).url)
    data["policy"] = {"tools": [{"tools": ["pets_delete*"], "approval": "always"}]}
    data["tenants"][0]["limits"] = {"max_iterations": 2}
    server = gateway(harness, data)
    header, trace_id, _ = traceparent()

    raw = sdk(harness, server).chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "go"}],
        extra_headers={"traceparent": header},
    )
    assert raw.headers["x-toolgate-tool-calls"] == "1"
    assert raw.headers["x-toolgate-tool-calls-reused"] == "1"
    spans = spans_of(collector, trace_id, 6)
    (request,) = [s for s in spans if s.kind == SERVER]
    tools = {s.attributes["gen_ai.tool.call.id"]: s for s in spans if s.kind == INTERNAL}
    assert tools["c2"].attributes["toolgate.tool.reused"] is True
    assert "toolgate.tool.reused" not in tools["c1"].attributes
    refused = tools["c3"]
    assert refused.attributes["toolgate.tool.outcome"] == "denied"
    assert refused.attributes["error.type"] == "denied"
    assert refused.status == STATUS_ERROR
    (event,) = refused.events
    assert event[0] == "toolgate.policy"
    assert event[1]["toolgate.policy.verdict"] == "refuse"
    assert ("toolgate.cap", {"toolgate.cap.kind": "iterations"}) in request.events
    assert request.attributes["toolgate.stopped"] == "max_iterations"
    assert request.attributes["toolgate.tool_calls.reused"] == 1

    trace = harness.client(server).get(f"/v1/toolgate/traces/{raw.headers['x-request-id']}")
    assert trace.json()["trace_id"] == trace_id  # the stored trace names the OTel one
    calls = {c["id"]: c for c in trace.json()["tool_calls"]}
    assert calls["c2"]["reused"] is True
    assert calls["c2"]["reused_from"] == "c1"
    assert calls["c2"]["arguments"] == {"s": "a"}  # not null: the same call's arguments
    assert trace.json()["tool_calls_reused"] == 1


def test_a_guardrails_verdict_is_an_event_of_the_requests_span(harness: Harness) -> None:
    collector = OtlpReceiver()
    model = Model(says("Write to bob@example.com."))
    sources = Sources(harness)
    data = sources.config(harness.serve(model.recorder).url, endpoint=harness.serve(collector).url)
    rule = {"name": "pii", "screens": "final_answer", "detect": ["personal_data"]}
    data["policy"] = {"guardrails": {"rules": [{**rule, "action": "flag"}]}}
    server = gateway(harness, data)
    header, trace_id, _ = traceparent()
    sdk(harness, server).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "go"}],
        extra_headers={"traceparent": header},
    )
    (request,) = [s for s in spans_of(collector, trace_id, 2) if s.kind == SERVER]
    (event,) = [e for e in request.events if e[0] == "toolgate.guardrail"]
    assert event[1]["toolgate.guardrail.guardrail"] == "pii"
    assert event[1]["toolgate.guardrail.action"] == "flag"
    assert event[1]["toolgate.guardrail.screens"] == "final_answer"
    assert "bob@" not in str(event[1])  # what was found, never the text


def metric(server: ServerThread, reason: str) -> float:
    text = httpx.get(f"{server.url}/metrics").text
    line = f'toolgate_otel_dropped_spans_total{{reason="{reason}"}} '
    found = [row for row in text.splitlines() if row.startswith(line)]
    return float(found[0].removeprefix(line)) if found else 0.0


def test_a_collector_that_is_down_costs_the_requests_nothing(harness: Harness) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    server, _model, _ = one_tool_stack(harness, None, endpoint=closed, timeout_s=3)
    client = sdk(harness, server)
    started = time.perf_counter()
    for _ in range(5):
        assert (
            client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "go"}]
            )
            .choices[0]
            .message.content
            == "Done."
        )
    # Requests that waited for the exporter would take its 3 s each, 15 s in all.
    assert time.perf_counter() - started < 12
    assert wait_for(lambda: metric(server, "export_failed") >= 4, 15)


def test_a_full_export_queue_drops_and_counts(harness: Harness) -> None:
    collector = OtlpReceiver()
    collector.fail = True  # answers 503: the exporter retries, the queue fills
    server, _, _ = one_tool_stack(harness, collector, max_queue_size=2, timeout_s=5)
    client = sdk(harness, server)
    for _ in range(3):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "go"}])
    assert wait_for(lambda: metric(server, "queue_full") >= 1, 5)


@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_failure_marks_its_round(harness: Harness, stream: bool) -> None:
    collector = OtlpReceiver()
    broken = Recorder(lambda hit: Answer(500, b'{"error": {"message": "model crashed"}}'))
    sources = Sources(harness)
    data = sources.config(harness.serve(broken).url, endpoint=harness.serve(collector).url)
    data["upstreams"][0]["max_retries"] = 0
    server = gateway(harness, data)
    header, trace_id, _ = traceparent()
    with pytest.raises(openai.APIStatusError) as failed:
        sdk(harness, server).chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "go"}],
            stream=stream,
            extra_headers={"traceparent": header},
        )
    assert failed.value.status_code == 502
    spans = spans_of(collector, trace_id, 2)
    (request,) = [s for s in spans if s.kind == SERVER]
    (round_span,) = [s for s in spans if s.kind == CLIENT]
    assert round_span.status == STATUS_ERROR
    assert round_span.attributes["error.type"] == "upstream_error"
    assert request.status == STATUS_ERROR
    assert request.attributes["http.response.status_code"] == 502


def test_a_request_passed_through_names_its_own_span_upstream(harness: Harness) -> None:
    collector = OtlpReceiver()
    model = Model(says("Plain."))
    sources = Sources(harness)
    data = sources.config(harness.serve(model.recorder).url, endpoint=harness.serve(collector).url)
    data["tenants"][0]["tools"] = []  # no server tools: the request is passed through
    server = gateway(harness, data)
    header, trace_id, client_span = traceparent()
    for stream in (False, True):
        sdk(harness, server).chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "go"}],
            stream=stream,
            extra_headers={"traceparent": header},
        )
    spans = spans_of(collector, trace_id, 2)
    assert [s.kind for s in spans] == [SERVER, SERVER]
    assert all(s.parent_id == client_span for s in spans)
    sent = [parent_of(h.headers.get("traceparent")) for h in model.recorder.hits]
    assert sorted(sent) == sorted(s.span_id for s in spans)
    whole, streamed = sorted(spans, key=lambda s: s.start_ns)
    assert whole.attributes["gen_ai.usage.input_tokens"] == 3  # read from the answer
    assert "gen_ai.usage.input_tokens" not in streamed.attributes  # its bytes pass unread


def test_the_latency_histogram_links_a_traced_request_to_its_trace(harness: Harness) -> None:
    collector = OtlpReceiver()
    server, _, _ = one_tool_stack(harness, collector)
    header, trace_id, _ = traceparent()
    sdk(harness, server).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "go"}],
        extra_headers={"traceparent": header},
    )
    accept = "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3"
    scraped = httpx.get(f"{server.url}/metrics", headers={"accept": accept})
    assert scraped.headers["content-type"].startswith("application/openmetrics-text")
    lines = [
        line
        for line in scraped.text.splitlines()
        if line.startswith("toolgate_request_duration_seconds_bucket") and " # " in line
    ]
    assert lines, "no exemplar"
    assert any(f'trace_id="{trace_id}"' in line for line in lines)
    plain = httpx.get(f"{server.url}/metrics")  # the text format, as before
    assert plain.headers["content-type"].startswith("text/plain")
    assert "trace_id" not in plain.text


def test_every_worker_process_exports_its_spans(harness: Harness, tmp_path: Path) -> None:
    """``toolgate serve --workers 2``: each worker builds its own tracer provider after
    it starts, and the operator's ``OTEL_*`` variables reach them all."""
    collector = OtlpReceiver()
    otlp = harness.serve(collector).url
    model = Model(says("Plain."))
    upstream = harness.serve(model.recorder).url
    config = tmp_path / "gateway.yaml"
    config.write_text(
        json.dumps(
            {
                "upstreams": [{"name": "up", "base_url": f"{upstream}/v1"}],
                "models": [{"name": MODEL, "upstream": "up"}],
            }
        )
    )
    port = free_port()
    environ = {**os.environ, **FAST_EXPORT, "OTEL_EXPORTER_OTLP_ENDPOINT": otlp}
    command = [TOOLGATE, "serve", "--config", str(config), "--port", str(port), "--workers", "2"]
    url = f"http://127.0.0.1:{port}"
    trace_ids = set()
    with subprocess.Popen(command, env=environ, stderr=subprocess.PIPE) as process:
        try:
            wait_healthy(url, process)
            with httpx.Client(timeout=10) as client:
                for _ in range(8):
                    answer = client.post(f"{url}/v1/chat/completions", json=chat("hi"))
                    trace_ids.add(answer.headers["x-toolgate-trace-id"])
            assert wait_for(lambda: trace_ids <= {s.trace_id for s in collector.spans}, 10)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=20)
    assert len(trace_ids) == 8
    assert {s.name for s in collector.spans} == {"POST /v1/chat/completions"}
    assert all(s.resource["service.instance.id"] for s in collector.spans)


def test_check_says_where_spans_go_and_refuses_a_bad_variable(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "config" / "gateway.yaml"
    environ = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector.internal:4318"}
    command = [TOOLGATE, "check", "--config", str(example), "--offline"]
    result = subprocess.run(command, env=environ, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert (
        "tracing: OTLP http/protobuf to http://collector.internal:4318/v1/traces "
        "(sampler parentbased_always_on)" in result.stdout
    )
    environ["OTEL_EXPORTER_OTLP_PROTOCOL"] = "http/json"
    result = subprocess.run(command, env=environ, capture_output=True, text=True)
    assert result.returncode == 2
    assert "OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' is not supported" in result.stderr
    assert "Traceback" not in result.stderr


def test_spans_go_over_grpc_with_the_extra(harness: Harness) -> None:
    collector = GrpcCollector()
    harness.on_close(collector.stop)
    server, model, _ = one_tool_stack(
        harness,
        None,
        endpoint=f"http://127.0.0.1:{collector.port}",
        protocol="grpc",
        headers={"x-collector-key": "grpc-CANARY-24"},
    )
    header, trace_id, client_span = traceparent()
    sdk(harness, server).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "go"}],
        extra_headers={"traceparent": header},
    )
    assert wait_for(lambda: len(collector.of_trace(trace_id)) >= 4, 10)
    spans = collector.of_trace(trace_id)
    (request,) = [s for s in spans if s.kind == SERVER]
    assert request.parent_id == client_span
    assert sorted(s.name for s in spans if s.parent_id == request.span_id) == [
        f"chat {MODEL}",
        f"chat {MODEL}",
        "execute_tool string_length",
    ]
    assert collector.metadata[0]["x-collector-key"] == "grpc-CANARY-24"
    assert len(model.requests) == 2


def test_a_call_through_the_gateways_mcp_server_is_traced(harness: Harness) -> None:
    """An MCP client's ``tools/call`` on ``POST /mcp``: its ``_meta.traceparent`` is the
    parent, the tool receives its own span's."""
    collector = OtlpReceiver()
    server, _, sources = one_tool_stack(harness, collector)
    header, trace_id, client_span = traceparent()

    async def call() -> None:
        http = httpx2.AsyncClient(headers={"authorization": f"Bearer {TENANT_KEY}"})
        client = Client(streamable_http_client(f"{server.url}/mcp", http_client=http))
        async with http, client:
            result = await client.call_tool(
                "string_length", {"s": "abc"}, meta=cast(RequestParamsMeta, {"traceparent": header})
            )
            assert not result.is_error

    asyncio.run(call())
    spans = spans_of(collector, trace_id, 2)
    (request,) = [s for s in spans if s.kind == SERVER]
    (tool,) = [s for s in spans if s.kind == INTERNAL]
    assert request.name == "tools/call string_length"
    assert request.parent_id == client_span
    assert request.attributes["mcp.method.name"] == "tools/call"
    assert request.attributes["toolgate.tool.outcome"] == "ok"
    assert tool.parent_id == request.span_id
    (hit,) = sources.tools.hits
    assert parent_of(hit.headers.get("traceparent")) == tool.span_id
