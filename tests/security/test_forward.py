"""The forward route: only a fixed list of OpenAI routes reaches the upstream with its
key, at a fixed path under its base URL, whatever a client writes in the path."""

from __future__ import annotations

import json
import socket

import openai
import pytest

from tests.support.recorder import Answer, Received, Recorder
from tests.support.scripted import (
    MODEL,
    TENANT_KEY,
    UPSTREAM_KEY,
    Harness,
    assert_envelope,
    config,
)

EMBEDDING = {
    "object": "list",
    "data": [{"object": "embedding", "index": 0, "embedding": [0.5]}],
    "model": MODEL,
    "usage": {"prompt_tokens": 1, "total_tokens": 1},
}


def _upstream(hit: Received) -> Answer:
    if hit.raw_path == "/v1/embeddings":
        return Answer(body=json.dumps(EMBEDDING).encode())
    return Answer(404, b'{"error":{"message":"Not Found","type":"invalid_request_error"}}')


@pytest.mark.parametrize(
    "path",
    [
        "/v1/%2E%2E/admin/keys",
        "/v1/%2e%2e/admin/keys",
        "/v1/..%2F..%2Fadmin%2Fkeys",
        "/v1/embeddings/..%2F..%2Fadmin",
        "/v1/embeddings%2F..%2F..%2Fadmin",
        "/v1/admin/keys",
        "/v1/files",
        "/v1/fine_tuning/jobs",
        "/v1//embeddings",
        "/admin/keys",
    ],
)
def test_a_path_outside_the_forwarded_routes_is_a_404_and_reaches_nothing(
    harness: Harness, path: str
) -> None:
    upstream = Recorder(_upstream)
    gateway = harness.gateway(config(harness.serve(upstream).url, []))
    answer = harness.client(gateway).post(path, json={"model": MODEL, "input": "x"})
    assert answer.status_code in (404, 405), answer.text
    assert_envelope(answer, answer.status_code)
    assert upstream.hits == []


@pytest.mark.parametrize(
    "request_line",
    [
        b"POST /v1/../admin/keys HTTP/1.1",
        b"POST /v1/embeddings/../../admin/keys HTTP/1.1",
        b"POST /v1/./../admin/keys HTTP/1.1",
        b"POST http://127.0.0.1/v1/../admin/keys HTTP/1.1",
    ],
)
def test_a_raw_request_line_with_dot_segments_reaches_nothing(
    harness: Harness, request_line: bytes
) -> None:
    """Sent on a socket, so no client library normalises the path first."""
    upstream = Recorder(_upstream)
    gateway = harness.gateway(config(harness.serve(upstream).url, []))
    body = json.dumps({"model": MODEL, "input": "x"}).encode()
    head = (
        request_line + b"\r\nHost: gw\r\nAuthorization: Bearer " + TENANT_KEY.encode() + b"\r\n"
        b"Content-Type: application/json\r\nConnection: close\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n"
    )
    with socket.create_connection((gateway.host, gateway.port), timeout=5) as connection:
        connection.sendall(head + body)
        reply = b""
        while chunk := connection.recv(65536):
            reply += chunk
    status = int(reply.split(b" ", 2)[1])
    assert status in (400, 404, 405), reply[:200]
    assert upstream.hits == []


def test_an_allowed_route_goes_to_its_fixed_path_with_the_upstream_key(harness: Harness) -> None:
    upstream = Recorder(_upstream)
    gateway = harness.gateway(config(harness.serve(upstream).url, []))
    with openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=TENANT_KEY, max_retries=0) as client:
        answer = client.embeddings.create(model=MODEL, input="x")
    assert answer.data[0].embedding == [0.5]
    [hit] = upstream.hits
    assert (hit.method, hit.raw_path) == ("POST", "/v1/embeddings")
    assert hit.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert TENANT_KEY not in hit.text


def test_a_forwarded_route_the_upstream_lacks_is_a_404_that_sdks_do_not_retry(
    harness: Harness,
) -> None:
    upstream = Recorder(_upstream)
    gateway = harness.gateway(config(harness.serve(upstream).url, []))
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=TENANT_KEY, max_retries=2)
    with client, pytest.raises(openai.NotFoundError) as raised:
        client.completions.create(model=MODEL, prompt="x")
    assert raised.value.status_code == 404
    assert [hit.raw_path for hit in upstream.hits] == ["/v1/completions"]  # asked once


@pytest.mark.parametrize("body", [b"", b"[]", b'{"input": "x"}', b'{"model": 5}', b"\xff"])
def test_a_forward_without_a_json_body_naming_a_model_reaches_nothing(
    harness: Harness, body: bytes
) -> None:
    upstream = Recorder(_upstream)
    gateway = harness.gateway(config(harness.serve(upstream).url, []))
    answer = harness.client(gateway).post(
        "/v1/embeddings", content=body, headers={"content-type": "application/json"}
    )
    assert_envelope(answer, 404)
    assert upstream.hits == []


def test_a_forward_for_another_tenants_model_or_no_key_reaches_nothing(harness: Harness) -> None:
    upstream = Recorder(_upstream)
    gateway = harness.gateway(config(harness.serve(upstream).url, []))
    anonymous = harness.client(gateway, key="sk-nobody")
    assert_envelope(anonymous.post("/v1/embeddings", json={"model": MODEL, "input": "x"}), 401)
    unknown = harness.client(gateway).post("/v1/embeddings", json={"model": "nope", "input": "x"})
    assert_envelope(unknown, 404)
    assert upstream.hits == []
