"""A scripted Bedrock runtime (``Converse`` and ``ConverseStream``): every request's SigV4
signature is verified with botocore's own signer against the keys it knows (or a Bedrock
API key as a bearer token), every body is validated against botocore's
``bedrock-runtime`` service model, and streams are framed in AWS's event-stream encoding,
which botocore's parser decodes (``tests/gateway/upstream/test_bedrock_fake.py`` points
boto3 at it to prove so).

A script step is a list of content blocks (``text``, ``tool_use``, ``reasoning``) or a
function of the request body that returns one."""

from __future__ import annotations

import binascii
import json
import re
import struct
import threading
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote

import botocore.session
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.validate import ParamValidator

from tests.support.recorder import Answer, Received, Recorder

Block = dict[str, Any]
Step = list[Block] | Callable[[dict[str, Any]], list[Block]]
REGION = "us-east-1"
USAGE = {
    "inputTokens": 11,
    "outputTokens": 7,
    "totalTokens": 18,
    "cacheReadInputTokens": 3,
    "cacheWriteInputTokens": 5,
}
_AUTH = re.compile(
    r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
    r"SignedHeaders=([^,]+), Signature=([0-9a-f]{64})$"
)
_PATH = re.compile(r"^/model/([^/]+)/(converse|converse-stream)$")


def text(words: str) -> Block:
    return {"text": words}


def tool_use(name: str, given: dict[str, Any], call_id: str = "tooluse_1") -> Block:
    return {"toolUse": {"toolUseId": call_id, "name": name, "input": given}}


def reasoning(words: str, signature: str = "sig-1") -> Block:
    return {"reasoningContent": {"reasoningText": {"text": words, "signature": signature}}}


def _operation(name: str) -> Any:
    model = botocore.session.get_session().get_service_model("bedrock-runtime")
    return model.operation_model(name)


def body_errors(operation: str, model_id: str, body: Any) -> list[str]:
    """What in ``body`` the service model does not allow."""
    if not isinstance(body, dict):
        return ["the body is not an object"]
    report = ParamValidator().validate(
        {**body, "modelId": model_id}, _operation(operation).input_shape
    )
    return [report.generate_report()] if report.has_errors() else []


def signature_errors(hit: Received, keys: Mapping[str, tuple[str, str | None]]) -> list[str]:
    """Whether the request is signed, as botocore signs, by one of ``keys`` (access key
    id → secret and session token) for the bedrock service in ``REGION``."""
    found = _AUTH.match(hit.headers.get("authorization", ""))
    if found is None:
        return ["no SigV4 Authorization header"]
    key_id, _, region, service, signed, given = found.groups()
    if key_id not in keys:
        return [f"an unknown access key {key_id}"]
    secret, token = keys[key_id]
    if (region, service) != (REGION, "bedrock"):
        return [f"signed for {service} in {region}"]
    if token is not None and hit.headers.get("x-amz-security-token") != token:
        return ["the session token is missing"]
    names = signed.split(";")
    headers = {name: hit.headers[name] for name in names if name in hit.headers}
    url = f"http://{hit.headers['host']}{hit.raw_path}"
    request = AWSRequest(method=hit.method, url=url, data=hit.body, headers=headers)
    request.context["timestamp"] = hit.headers.get("x-amz-date", "")
    auth = SigV4Auth(Credentials(key_id, secret, token), "bedrock", REGION)
    canonical = auth.canonical_request(request)
    expected = auth.signature(auth.string_to_sign(request, canonical), request)
    return [] if expected == given else ["the signature does not match"]


def _header(name: str, value: str) -> bytes:
    encoded = value.encode()
    return bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(encoded)) + encoded


def frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message: prelude (lengths, CRC), headers, payload, CRC."""
    head = b"".join(_header(name, value) for name, value in headers.items())
    total = 12 + len(head) + len(payload) + 4
    prelude = struct.pack(">II", total, len(head))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    message = prelude + head + payload
    return message + struct.pack(">I", binascii.crc32(message))


def event(kind: str, payload: dict[str, Any]) -> bytes:
    headers = {":event-type": kind, ":content-type": "application/json", ":message-type": "event"}
    return frame(headers, json.dumps(payload).encode())


def exception(kind: str, words: str) -> bytes:
    headers = {
        ":exception-type": kind,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return frame(headers, json.dumps({"message": words}).encode())


def answer_of(blocks: list[Block]) -> dict[str, Any]:
    stop = "tool_use" if any("toolUse" in b for b in blocks) else "end_turn"
    return {
        "output": {"message": {"role": "assistant", "content": blocks}},
        "stopReason": stop,
        "usage": USAGE,
        "metrics": {"latencyMs": 12},
    }


def stream_of(answer: dict[str, Any]) -> list[bytes]:
    """An answer as ConverseStream sends it."""
    frames = [event("messageStart", {"role": "assistant"})]
    for index, block in enumerate(answer["output"]["message"]["content"]):
        if "text" in block:
            words = block["text"]
            for piece in (words[: len(words) // 2], words[len(words) // 2 :]):
                frames.append(
                    event(
                        "contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": piece}}
                    )
                )
        elif "toolUse" in block:
            use = block["toolUse"]
            start = {"toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}}
            frames.append(event("contentBlockStart", {"contentBlockIndex": index, "start": start}))
            given = json.dumps(use["input"])
            # as the service streams it: a little at a time (here at most 64 KiB)
            for piece in [given[:3]] + [given[i : i + 65536] for i in range(3, len(given), 65536)]:
                delta = {"toolUse": {"input": piece}}
                frames.append(
                    event("contentBlockDelta", {"contentBlockIndex": index, "delta": delta})
                )
        elif "reasoningContent" in block:
            thought = block["reasoningContent"]["reasoningText"]
            for delta in ({"text": thought["text"]}, {"signature": thought["signature"]}):
                frames.append(
                    event(
                        "contentBlockDelta",
                        {"contentBlockIndex": index, "delta": {"reasoningContent": delta}},
                    )
                )
        frames.append(event("contentBlockStop", {"contentBlockIndex": index}))
    frames.append(event("messageStop", {"stopReason": answer["stopReason"]}))
    frames.append(event("metadata", {"usage": answer["usage"], "metrics": {"latencyMs": 12}}))
    return frames


def error(status: int, kind: str, words: str) -> Answer:
    headers = [("content-type", "application/json"), ("x-amzn-errortype", f"{kind}:http://x/")]
    return Answer(status, json.dumps({"message": words}).encode(), headers)


class Runtime:
    """The scripted server: answers each Converse with the next step of ``script`` (the
    last repeats); records what it was sent, and refuses (as Bedrock would, and in
    ``refused``) what is not signed or not of the service model's shape."""

    def __init__(
        self,
        *script: Step,
        keys: Mapping[str, tuple[str, str | None]] | None = None,
        api_key: str | None = None,
    ) -> None:
        self.script = list(script) or [[text("done")]]
        self.keys = keys or {}
        self.api_key = api_key
        self.recorder = Recorder(self._respond)
        self.refused: list[str] = []
        self._count = 0
        self._lock = threading.Lock()

    def _respond(self, hit: Received) -> Answer:
        found = _PATH.match(hit.raw_path.split("?")[0])
        if hit.method != "POST" or found is None:
            return error(404, "ResourceNotFoundException", "no such route")
        model_id, operation = unquote(found.group(1)), found.group(2)
        bearer = hit.headers.get("authorization", "")
        if self.api_key is not None and bearer == f"Bearer {self.api_key}":
            problems: list[str] = []
        else:
            problems = signature_errors(hit, self.keys)
        if problems:
            self.refused.extend(problems)
            return error(403, "AccessDeniedException", "; ".join(problems))
        body = json.loads(hit.body)
        name = "ConverseStream" if operation == "converse-stream" else "Converse"
        problems = body_errors(name, model_id, body)
        if problems:
            self.refused.extend(problems)
            return error(400, "ValidationException", "; ".join(problems))
        with self._lock:
            step = self.script[min(self._count, len(self.script) - 1)]
            self._count += 1
        answer = answer_of(step(body) if callable(step) else step)
        if name == "ConverseStream":
            headers = [("content-type", "application/vnd.amazon.eventstream")]
            return Answer(headers=headers, chunks=stream_of(answer))
        return Answer(body=json.dumps(answer).encode())

    @property
    def requests(self) -> list[dict[str, Any]]:
        return [json.loads(h.body) for h in self.recorder.hits if h.method == "POST"]
