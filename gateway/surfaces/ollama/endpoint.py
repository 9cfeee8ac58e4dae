"""Ollama's API as a surface (docs/design.md §20, docs/ollama.md): ``POST /api/chat``
through the request skeleton, decoded into the same values as every surface so that it
reaches a model server of any dialect; the routes Ollama's clients probe before they chat
(``/api/tags``, ``/api/show``, ``/api/version``, ``/api/ps``) answered from the tenant's
models; and the routes that change a server refused, saying so. Errors are Ollama's:
``{"error": "..."}``. Nothing is passed through."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from gateway.engine.report import RunReport
from gateway.errors import BadRequest, GatewayError, NotFound, PolicyDenied
from gateway.ops.offload import offload
from gateway.policy.tenants import Tenant
from gateway.surfaces.approval_answers import asked_in
from gateway.surfaces.head import Admission, Head
from gateway.surfaces.http import Exchange, json_response, read_body
from gateway.surfaces.ollama.render import ChatLines, created_at, render_chat
from gateway.surfaces.ollama.request import (
    OllamaRequest,
    parse_ollama_chat,
    parse_ollama_generate,
)
from gateway.surfaces.request_end import Ended
from gateway.surfaces.skeleton import Answered, Start
from gateway.surfaces.streaming import NDJSON
from gateway.values import Message, UsageCounts
from tool_registry import dumps, loads

if TYPE_CHECKING:
    from gateway.runtime.services import Gateway

VERSION = "0.6.4"  # the Ollama API version whose shapes these routes answer in
CHANGES_A_SERVER = ("pull", "push", "create", "delete", "copy", "blobs/{digest}")


def ollama_error(request: Request, exc: GatewayError, request_id: str) -> Response:
    """The boundary's rendering of an error on this surface: Ollama's shape."""
    headers = {**exc.headers, "x-request-id": request_id}
    return json_response({"error": exc.message}, exc.status, headers)


class OllamaChat:
    """``POST /api/chat`` (its part of the request skeleton)."""

    forward_path = "/api/chat"
    echoes_call_ids = False  # a call comes back as its name and arguments

    def parse(self, raw: bytes, headers: Mapping[str, str]) -> OllamaRequest:
        return parse_ollama_chat(raw, headers)

    def adapt(self, asked: OllamaRequest, tenant: Tenant) -> OllamaRequest:
        return asked

    def call(self, asked: OllamaRequest, head: Head) -> OllamaCall:
        return OllamaCall(asked, head)


class OllamaGenerate(OllamaChat):
    """``POST /api/generate``: a prompt in, its text out, with no tools (a pass-through
    of the same model, through the loop so that any dialect answers it)."""

    forward_path = "/api/generate"

    def parse(self, raw: bytes, headers: Mapping[str, str]) -> OllamaRequest:
        return parse_ollama_generate(raw, headers)


def _has_images(asked: OllamaRequest) -> bool:
    return any(
        not isinstance(m.content, str) and any(p.type != "text" for p in m.content or ())
        for m in asked.messages
    )


class OllamaCall:
    """One Ollama chat request, after its head."""

    ended: Ended | None = None  # an Ollama answer keeps nothing once answered

    framing = NDJSON

    def __init__(self, asked: OllamaRequest, head: Head) -> None:
        self._asked = asked
        self._head = head
        self._started = time.perf_counter()
        self._lines: ChatLines | None = None

    async def decode(self) -> Start | Answered:
        asked = self._asked
        if asked.generate and not asked.user_text() and not _has_images(asked):
            # Ollama's libraries load a model with an empty generate: no round is spent
            loaded = {
                "model": asked.model,
                "created_at": created_at(),
                "response": "",
                "done": True,
                "done_reason": "load",
            }
            body = dumps(loaded) + (b"\n" if asked.stream else b"")
            return Answered(body, NDJSON.media_type if asked.stream else "application/json")
        approvals = await offload(self._head.large, asked_in, asked.messages)
        return Start(asked.parameters, asked.messages, asked.client_tools, approvals)

    async def fit(self, history: list[Message], usage: list[UsageCounts | None]) -> list[Message]:
        return history  # the client's to fit

    async def render(self, report: RunReport) -> bytes:
        [outcome] = report.outcomes
        asked = self._asked
        return dumps(render_chat(outcome, asked.model, report.usage, self._started, asked.generate))

    def stream(self, n: int) -> OllamaCall:
        self._lines = ChatLines(self._asked.model, self._started, self._asked.generate)
        return self

    @property
    def choices(self) -> Sequence[ChatLines]:
        assert self._lines is not None  # a stream has its writer before its first event
        return [self._lines]

    async def close(self, report: RunReport) -> list[bytes]:
        assert self._lines is not None
        return self._lines.close(report.usage)


def _details(name: str) -> dict[str, Any]:
    return {
        "parent_model": "",
        "format": "toolgate",
        "family": "toolgate",
        "families": ["toolgate"],
        "parameter_size": "",
        "quantization_level": "",
    }


def _shown_model(raw: bytes) -> str:
    """``/api/show``'s model: ``model``, or ``name`` as older clients send it."""
    try:
        body = loads(raw)
    except ValueError as exc:
        raise BadRequest("The request body is not valid JSON.") from exc
    model = body.get("model") or body.get("name") if isinstance(body, dict) else None
    if not isinstance(model, str) or not model:
        raise BadRequest("'model' is required and must be a non-empty string.", param="model")
    return model


class OllamaInfo:
    """What Ollama's clients ask before they chat, from the tenant's models."""

    def __init__(self, gateway: Gateway, admit: Admission) -> None:
        self._gateway = gateway
        self._admit = admit

    def _models(self, request: Request, exchange: Exchange) -> list[str]:
        runtime, tenant = self._admit.tenant(request, exchange)
        listing = runtime.models.listing(tenant)
        return [str(model["id"]) for model in listing.get("data", [])]

    async def tags(self, request: Request, exchange: Exchange) -> Response:
        now = created_at()
        models = [
            {
                "name": name,
                "model": name,
                "modified_at": now,
                "size": 0,
                "digest": "",
                "details": _details(name),
            }
            for name in self._models(request, exchange)
        ]
        return json_response({"models": models})

    async def ps(self, request: Request, exchange: Exchange) -> Response:
        models = [
            {"name": name, "model": name, "size": 0, "digest": "", "details": _details(name)}
            for name in self._models(request, exchange)
        ]
        return json_response({"models": models})

    async def show(self, request: Request, exchange: Exchange) -> Response:
        runtime, tenant = self._admit.tenant(request, exchange)
        raw = await read_body(request, exchange, runtime.config.server, self._gateway.large_bodies)
        model = _shown_model(raw)
        runtime.models.resolve(model, tenant)  # 404 for a model the tenant has not
        return json_response(
            {
                "modelfile": "",
                "parameters": "",
                "template": "",
                "details": _details(model),
                "model_info": {},
                # images are passed on to the model as Ollama's clients send them
                "capabilities": ["completion", "tools", "vision"],
                "modified_at": created_at(),
            }
        )

    async def running(self, request: Request, exchange: Exchange) -> Response:
        """``GET /``: what Ollama answers, and its libraries look for."""
        return PlainTextResponse("Ollama is running")

    async def unknown(self, request: Request, exchange: Exchange) -> Response:
        raise NotFound(f"{request.method} {request.url.path} is not a route of this server.")

    async def version(self, request: Request, exchange: Exchange) -> Response:
        return json_response({"version": VERSION})

    async def refused(self, request: Request, exchange: Exchange) -> Response:
        raise PolicyDenied(
            f"{request.url.path} changes an Ollama server's models; Toolgate serves the "
            "models its configuration names, and none can be pulled, pushed, created, "
            "copied or deleted through it.",
            code="not_allowed",
        )
