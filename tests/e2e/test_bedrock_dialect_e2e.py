"""A Bedrock Converse model behind the gateway (``dialect: bedrock``, docs/bedrock.md),
driven by the stock ``openai`` SDK and the ``anthropic`` SDK: every request the scripted
runtime gets is SigV4-signed by botocore from the standard credential chain (verified
with botocore's signer) or carries a Bedrock API key, and validates against botocore's
service model; streams are AWS event streams. Server tool rounds streamed and not,
reasoning carried back, a failed call flagged, the client's tools handed back, usage
with the cache's tokens, throttling retried, and hostile frames refused."""

from __future__ import annotations

import json
import struct
from datetime import UTC, datetime, timedelta
from typing import Any

import anthropic
import openai
import pytest

from tests.support.bedrock_upstream import (
    REGION,
    USAGE,
    Runtime,
    answer_of,
    error,
    event,
    exception,
    frame,
    reasoning,
    stream_of,
    text,
    tool_use,
)
from tests.support.recorder import Answer, Received, Recorder
from tests.support.scripted import MODEL, TENANT_KEY, Harness, config, tool
from tests.support.servers import WAIT_S, ServerThread

KEYS = {"AKIDGATEWAY": ("gateway-secret", "session-token-1")}
CHAT: Any = [{"role": "user", "content": "measure example"}]


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The standard chain finds these keys in the environment, and nothing else."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDGATEWAY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "gateway-secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "session-token-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def _tools(hit: Received) -> Answer:
    if hit.raw_path.startswith("/broken"):
        return Answer(500, b'{"error": "down"}')
    return Answer(body=json.dumps({"length": 7}).encode())


def start(
    harness: Harness, runtime: Recorder, **upstream: Any
) -> tuple[openai.OpenAI, Recorder, ServerThread]:
    served = harness.serve(runtime)
    tools = Recorder(_tools)
    tools_url = harness.serve(tools).url
    data = config(
        served.url,
        [
            tool(
                "string_length",
                f"{tools_url}/len",
                {"s": {"type": "string"}},
                http={"url": f"{tools_url}/len", "query": {"s": "{s}"}},
                result={"pick": "length"},
            ),
            tool("broken_tool", f"{tools_url}/broken", {}),
        ],
    )
    data["upstreams"][0] = {
        "name": "bedrock",
        "dialect": "bedrock",
        "base_url": served.url,
        "region": REGION,
        "max_retries": 2,
        **upstream,
    }
    data["models"][0] = {
        "name": MODEL,
        "upstream": "bedrock",
        "upstream_model": "anthropic.claude-test-v1:0",
    }
    gateway = harness.gateway(data)
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=TENANT_KEY, timeout=WAIT_S)
    harness.on_close(client.close)
    return client, tools, gateway


def length_then_answer(body: dict[str, Any]) -> list[dict[str, Any]]:
    last = body["messages"][-1]["content"]
    results = [b["toolResult"] for b in last if "toolResult" in b]
    if results:
        return [text(f"the length is {results[0]['content'][0]['text']}")]
    return [reasoning("Measure it."), tool_use("string_length", {"s": "example"})]


@pytest.mark.parametrize("stream", [False, True])
def test_a_server_tool_round_on_a_converse_model(harness: Harness, stream: bool) -> None:
    runtime = Runtime(length_then_answer, keys=KEYS)
    client, tools, _ = start(harness, runtime.recorder)
    if stream:
        chunks = list(
            client.chat.completions.create(
                model=MODEL, messages=CHAT, stream=True, stream_options={"include_usage": True}
            )
        )
        answer = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        usage = chunks[-1].usage
    else:
        done = client.chat.completions.create(model=MODEL, messages=CHAT)
        answer, usage = done.choices[0].message.content or "", done.usage
    assert answer == "the length is 7"
    assert runtime.refused == []
    assert len(tools.hits) == 1
    paths = [h.raw_path for h in runtime.recorder.hits]
    operation = "converse-stream" if stream else "converse"
    assert paths == [f"/model/anthropic.claude-test-v1%3A0/{operation}"] * 2
    first, second = runtime.requests
    assert first["inferenceConfig"] == {"maxTokens": 4096}
    spec = first["toolConfig"]["tools"][0]["toolSpec"]
    assert spec["name"] == "string_length"
    assert spec["inputSchema"]["json"]["properties"] == {"s": {"type": "string"}}
    assert second["messages"][1]["content"][0] == {
        "reasoningContent": {"reasoningText": {"text": "Measure it.", "signature": "sig-1"}}
    }
    assert second["messages"][2]["content"] == [
        {"toolResult": {"toolUseId": "tooluse_1", "content": [{"text": "7"}]}}
    ]
    prompt = USAGE["inputTokens"] + USAGE["cacheReadInputTokens"] + USAGE["cacheWriteInputTokens"]
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (2 * prompt, 2 * USAGE["outputTokens"])


def test_a_failed_call_goes_back_with_status_error(harness: Harness) -> None:
    def broken_then_answer(body: dict[str, Any]) -> list[dict[str, Any]]:
        return [text("it failed")] if len(body["messages"]) > 1 else [tool_use("broken_tool", {})]

    runtime = Runtime(broken_then_answer, keys=KEYS)
    client, _, _ = start(harness, runtime.recorder)
    done = client.chat.completions.create(model=MODEL, messages=CHAT)
    assert done.choices[0].message.content == "it failed"
    [result] = runtime.requests[1]["messages"][-1]["content"]
    assert result["toolResult"]["status"] == "error"
    assert runtime.refused == []


def test_a_bedrock_api_key_is_sent_as_a_bearer_token(harness: Harness) -> None:
    runtime = Runtime([text("keyed")], api_key="bedrock-api-key-1")
    client, _, _ = start(harness, runtime.recorder, api_key="bedrock-api-key-1")
    done = client.chat.completions.create(model=MODEL, messages=CHAT)
    assert done.choices[0].message.content == "keyed"
    [hit] = runtime.recorder.hits
    assert hit.headers["authorization"] == "Bearer bedrock-api-key-1"
    assert "x-amz-security-token" not in hit.headers


def test_a_claude_client_reaches_a_converse_model_with_its_own_tools(harness: Harness) -> None:
    def mixed(body: dict[str, Any]) -> list[dict[str, Any]]:
        last = body["messages"][-1]["content"]
        if any(b.get("toolResult", {}).get("toolUseId") == "w" for b in last):
            return [text("sunny, 7 letters")]
        return [tool_use("string_length", {"s": "example"}, "s"), tool_use("weather", {}, "w")]

    runtime = Runtime(mixed, keys=KEYS)
    _, _, gateway = start(harness, runtime.recorder)
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=TENANT_KEY, timeout=WAIT_S)
    harness.on_close(claude.close)
    weather: Any = {"name": "weather", "input_schema": {"type": "object", "properties": {}}}
    history: list[Any] = [{"role": "user", "content": "weather and length"}]
    first = claude.messages.create(model=MODEL, max_tokens=300, messages=history, tools=[weather])
    [handed] = first.content
    assert handed.type == "tool_use"
    assert handed.id == "w"
    history.append({"role": "assistant", "content": [handed.model_dump()]})
    history.append(
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "w", "content": "sunny"}],
        }
    )
    done = claude.messages.create(model=MODEL, max_tokens=300, messages=history, tools=[weather])
    assert done.content[0].type == "text"
    assert done.content[0].text == "sunny, 7 letters"
    assert runtime.requests[0]["inferenceConfig"]["maxTokens"] == 300
    assert runtime.refused == []


def test_throttling_is_retried(harness: Harness) -> None:
    answers = [error(429, "ThrottlingException", "Too many requests"), None]

    def throttled_once(hit: Received) -> Answer:
        given = answers.pop(0) if answers else None
        if given is not None:
            return given
        return Answer(body=json.dumps(answer_of([text("after a wait")])).encode())

    client, _, _ = start(harness, Recorder(throttled_once))
    done = client.chat.completions.create(model=MODEL, messages=CHAT)
    assert done.choices[0].message.content == "after a wait"


def test_a_validation_error_keeps_its_status_and_words(harness: Harness) -> None:
    def invalid(hit: Received) -> Answer:
        return error(400, "ValidationException", "The model does not support tools.")

    client, _, _ = start(harness, Recorder(invalid))
    with pytest.raises(openai.BadRequestError, match="does not support tools"):
        client.chat.completions.create(model=MODEL, messages=CHAT)


def _streamed(frames: list[bytes]) -> Recorder:
    def respond(hit: Received) -> Answer:
        return Answer(
            headers=[("content-type", "application/vnd.amazon.eventstream")], chunks=frames
        )

    return Recorder(respond)


def _good_start() -> list[bytes]:
    return stream_of(answer_of([text("partial answer")]))[:2]


def _bad_crc() -> bytes:
    broken = bytearray(event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "x"}}))
    broken[-1] ^= 0xFF
    return bytes(broken)


@pytest.mark.parametrize(
    "tail",
    [
        [_bad_crc()],
        [event("messageStart", {"role": "assistant"})[:20]],  # truncated
        [struct.pack(">II", 10 * 1024 * 1024, 0) + b"\x00" * 8],  # a frame too large
        [frame({":event-type": "x" * 200, ":message-type": "event"}, b"{}")],  # unknown event
        [
            frame(
                {":exception-type": "throttlingException", ":message-type": "exception"},
                b'{"message": "slow"}',
            )
        ],
    ],
    ids=["bad-crc", "truncated", "huge", "unknown-event-then-end", "exception"],
)
def test_a_broken_stream_ends_with_an_error(harness: Harness, tail: list[bytes]) -> None:
    client, _, _ = start(harness, _streamed([*_good_start(), *tail]), max_retries=0)
    seen: list[str] = []

    def read() -> None:
        for chunk in client.chat.completions.create(model=MODEL, messages=CHAT, stream=True):
            seen.extend(c.delta.content or "" for c in chunk.choices)

    with pytest.raises(openai.APIError, match="upstream model server") as failed:
        read()
    assert "Traceback" not in str(failed.value)
    assert "".join(seen) in ("", "partial")  # before or after the first byte went out


def test_temporary_credentials_from_the_chain_are_refreshed_before_they_expire(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The container provider of the chain (as ECS and EKS pod identity serve it) hands
    out keys that expire in twelve minutes: botocore refreshes them before each request,
    off the loop, and each request is signed with the keys then current."""
    handed: list[str] = []

    def credentials(hit: Received) -> Answer:
        key = f"AKIDTEMP{len(handed)}"
        handed.append(key)
        expires = datetime.now(UTC) + timedelta(minutes=12)
        given = {
            "AccessKeyId": key,
            "SecretAccessKey": f"secret-{key}",
            "Token": f"token-{key}",
            "Expiration": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        return Answer(body=json.dumps(given).encode())

    issuer = harness.serve(Recorder(credentials))
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", f"{issuer.url}/creds")
    keys = {f"AKIDTEMP{i}": (f"secret-AKIDTEMP{i}", f"token-AKIDTEMP{i}") for i in range(8)}
    runtime = Runtime([text("signed")], keys=keys)
    client, _, _ = start(harness, runtime.recorder)
    for _ in range(2):
        done = client.chat.completions.create(model=MODEL, messages=CHAT)
        assert done.choices[0].message.content == "signed"
    assert runtime.refused == []
    used = [
        h.headers["authorization"].split("Credential=")[1].split("/")[0]
        for h in runtime.recorder.hits
    ]
    assert len(handed) >= 2  # fetched, then fetched again as it neared its expiry
    assert used[0] != used[-1]
    assert set(used) <= set(handed)


@pytest.mark.parametrize("stream", [False, True])
def test_an_aws_error_quoting_the_requests_credentials_reaches_no_client(
    harness: Harness, stream: bool
) -> None:
    """Issue 62 §4: a ``ValidationException`` (an error answer, or an exception event in
    a stream) that quotes the request's ``Authorization``, its session token and the
    secret key reaches the client with none of them: the keys the gateway signs with
    join the secrets every sink redacts, and a signature it quotes is cut at the
    dialect's edge."""
    quoted: list[str] = []

    def quoting(hit: Received) -> Answer:
        authorization = hit.headers["authorization"]
        token = hit.headers["x-amz-security-token"]
        signature = authorization.split("Signature=")[1]
        quoted.extend([authorization, token, signature, "gateway-secret", "AKIDGATEWAY"])
        words = (
            f"The request signature we calculated does not match. Authorization: "
            f"{authorization}; X-Amz-Security-Token: {token}; with secret gateway-secret; "
            f"Signature={signature}"
        )
        if hit.raw_path.endswith("/converse-stream"):
            kind = "application/vnd.amazon.eventstream"
            return Answer(
                headers=[("content-type", kind)], chunks=[exception("validationException", words)]
            )
        return error(400, "ValidationException", words)

    _, _, gateway = start(harness, Recorder(quoting))
    body = {"model": MODEL, "messages": CHAT, "stream": stream}
    answer = harness.client(gateway).post("/v1/chat/completions", json=body)
    said = answer.text
    assert quoted  # the runtime was asked, and quoted what it was sent
    assert "signature we calculated" in said  # the AWS words reach the client…
    for secret in quoted:  # …without a credential among them
        assert secret not in said, secret
    trace = harness.client(gateway).get(f"/v1/toolgate/traces/{answer.headers['x-request-id']}")
    for secret in quoted:
        assert secret not in trace.text, secret
