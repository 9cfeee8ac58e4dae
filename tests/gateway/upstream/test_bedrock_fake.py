"""The scripted Bedrock runtime is one AWS's own client talks to: boto3 signs its requests
(and the fake verifies those signatures with botocore's signer), its answers and its
event streams parse with botocore's parsers, and it refuses a wrong signature and a body
outside the service model (so the gateway's tests, which assert it refused nothing, can
fail)."""

from __future__ import annotations

from typing import Any

import boto3  # type: ignore[import-untyped]
import botocore.exceptions
import pytest

from tests.support.bedrock_upstream import REGION, Runtime, body_errors, reasoning, text, tool_use
from tests.support.scripted import Harness

KEYS = {"AKIDTEST": ("secret-1", None)}


def _client(url: str, secret: str = "secret-1") -> Any:
    return boto3.client(
        "bedrock-runtime",
        endpoint_url=url,
        region_name=REGION,
        aws_access_key_id="AKIDTEST",
        aws_secret_access_key=secret,
        config=botocore.config.Config(retries={"max_attempts": 1}),
    )


@pytest.fixture
def served(harness: Harness) -> tuple[str, Runtime]:
    runtime = Runtime([reasoning("hm"), text("hello"), tool_use("f", {"a": [1]})], keys=KEYS)
    return harness.serve(runtime.recorder).url, runtime


def test_boto3_reads_a_whole_answer(served: tuple[str, Runtime]) -> None:
    url, runtime = served
    answer = _client(url).converse(
        modelId="anthropic.claude-test-v1:0",
        messages=[{"role": "user", "content": [{"text": "hi"}]}],
    )
    content = answer["output"]["message"]["content"]
    assert content[1] == {"text": "hello"}
    assert content[2]["toolUse"]["input"] == {"a": [1]}
    assert answer["usage"]["cacheWriteInputTokens"] == 5
    assert runtime.refused == []


def test_boto3_reads_a_stream(served: tuple[str, Runtime]) -> None:
    url, runtime = served
    streamed = _client(url).converse_stream(
        modelId="anthropic.claude-test-v1:0",
        messages=[{"role": "user", "content": [{"text": "hi"}]}],
    )
    kinds, words, given, signature = [], [], [], []
    for event in streamed["stream"]:
        [(kind, payload)] = event.items()
        kinds.append(kind)
        delta = payload.get("delta", {})
        words.append(delta.get("text", ""))
        given.append(delta.get("toolUse", {}).get("input", ""))
        signature.append(delta.get("reasoningContent", {}).get("signature", ""))
    assert kinds[0] == "messageStart"
    assert kinds[-2:] == ["messageStop", "metadata"]
    assert "".join(words) == "hello"
    assert "".join(given) == '{"a": [1]}'
    assert "".join(signature) == "sig-1"
    assert runtime.refused == []


def test_the_fake_refuses_a_wrong_signature_and_a_body_outside_the_model(
    served: tuple[str, Runtime],
) -> None:
    url, runtime = served
    with pytest.raises(botocore.exceptions.ClientError, match="AccessDenied"):
        _client(url, secret="wrong").converse(
            modelId="m", messages=[{"role": "user", "content": [{"text": "hi"}]}]
        )
    assert runtime.refused == ["the signature does not match"]
    assert body_errors("Converse", "m", {"messages": [], "temperature": 1})
    assert body_errors("Converse", "m", {"messages": [{"role": "user", "content": [{"txt": "x"}]}]})
    assert (
        body_errors("Converse", "m", {"messages": [{"role": "user", "content": [{"text": "x"}]}]})
        == []
    )
