"""The HTTP routes (DESIGN.md §7, §9)."""

from __future__ import annotations

import hmac
import time
from functools import partial
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from tool_registry import CallContext
from tool_registry.jsonio import loads

from .chat_request import ChatRequest, parse_chat_request
from .chunks import ChunkWriter
from .errors import AuthError, BadRequest, NotFound
from .event_stream import start_event_stream
from .http import Exchange, endpoint, json_response, read_body
from .legacy import call_id, from_functions, to_function_call, uses_functions
from .passthrough import Meter, forward_json
from .policy import effective_limits, effective_tools
from .store import StoreUnavailable
from .stream_loop import stream_loop
from .tenants import Tenant
from .tool_loop import LoopJob, LoopSession

if TYPE_CHECKING:
    from .app import Gateway

SHADOWED_HEADER = "x-toolgate-shadowed-tools"

# OpenAI routes forwarded to the model's upstream as they are (JSON bodies naming a
# model). Any other path is a 404 here: the upstream key never goes anywhere else.
FORWARDED_ROUTES = (
    "/completions",
    "/embeddings",
    "/moderations",
    "/images/generations",
    "/audio/speech",
    "/responses",
)


def build_routes(gateway: Gateway) -> list[BaseRoute]:
    config = gateway.config
    max_body = config.server.max_body_bytes
    body_timeout = config.server.body_timeout_s

    async def admit(request: Request, exchange: Exchange) -> tuple[Tenant, Meter | None]:
        """Who is asking, and whether the rate limits let them: the limit headers go on
        whatever the answer is; a tenant with a token limit has its usage charged."""
        tenant = gateway.tenants.authenticate(request.headers.get("authorization"))
        exchange.tenant = tenant.id
        admission = await gateway.limiter.admit(tenant)
        exchange.headers |= admission.headers
        if not admission.metered:
            return tenant, None

        async def meter(usage: Any) -> None:
            await gateway.limiter.charge(tenant, usage)

        return tenant, meter

    async def chat_completions(request: Request, exchange: Exchange) -> Response:
        tenant, meter = await admit(request, exchange)
        raw = await read_body(request, exchange, max_body, body_timeout)
        chat = parse_chat_request(raw, request.headers)
        route = gateway.models.resolve(chat.model, tenant)
        exchange.model = chat.model
        legacy_id = None
        if tenant.tools and uses_functions(chat.body):
            # With server tools in play, old clients' functions become tools (and back);
            # without, the request passes through as it came.
            translated = from_functions(chat)
            if effective_tools(tenant.tools, translated.narrowing, translated.client_tool_names)[0]:
                legacy_id = call_id(len(chat.body["messages"]))
                chat = translated
        server_tools, shadowed = effective_tools(
            tenant.tools, chat.narrowing, chat.client_tool_names
        )
        if shadowed:  # the client's own tools of these names win for this request
            exchange.headers[SHADOWED_HEADER] = ",".join(shadowed)
        # A turn handed back in this request is bound to what the client sent.
        conversation = (
            gateway.turns.conversation(
                chat.body["messages"], gateway.turns.identity(tenant.id, request.headers)
            )
            if server_tools and chat.client_tool_names
            else ""
        )
        changed = await restore_hidden_turns(tenant, chat, request) or chat.changed
        if not server_tools:
            return await forward_json(
                gateway.upstream,
                route,
                "/chat/completions",
                raw,
                chat.body,
                changed,
                chat.model,
                stream=chat.stream,
                meter=meter,
                on_usage=partial(setattr, exchange, "usage"),
            )
        limits = effective_limits(tenant.limits, chat.narrowing)
        n = choices_of(chat.body, limits.max_iterations)
        job = LoopJob(
            upstream=route.upstream,
            body={k: v for k, v in chat.body.items() if k != "n"},  # one loop per choice
            client_model=chat.model,
            upstream_model=route.model.target,
            server_tools=server_tools,
            client_tools=chat.client_tools,
            client_tool_names=chat.client_tool_names,
            limits=limits,
            context=CallContext(tenant.id, request.headers),
            conversation=conversation,
            legacy_call_id=legacy_id,
        )
        sessions = gateway.loop.sessions(job, n)
        exchange.session = sessions[0]  # their state is the request's
        if chat.stream:
            return await stream_chat(chat, sessions, exchange, meter)
        session = sessions[0]
        completion = await gateway.loop.run_all(sessions)
        if legacy_id is not None:
            completion = to_function_call(completion)
        state = session.state
        exchange.headers["x-toolgate-iterations"] = str(state.iterations)
        exchange.headers["x-toolgate-tool-calls"] = str(state.tool_calls)
        response = json_response(completion)
        if meter is not None:
            response.background = BackgroundTask(meter, state.usage)
        return response

    async def restore_hidden_turns(tenant: Tenant, chat: ChatRequest, request: Request) -> bool:
        """A client returning with tool results may be answering a mixed turn: put the
        server side of it back (from whichever replica saved it, for the same caller)."""
        messages = chat.body["messages"]
        if not any(m.get("role") == "tool" for m in messages):
            return False
        identity = gateway.turns.identity(tenant.id, request.headers)
        restored = await gateway.turns.restore(tenant.id, messages, identity)
        if restored is None:
            return False
        chat.body["messages"] = restored
        return True

    async def stream_chat(
        chat: ChatRequest, sessions: list[LoopSession], exchange: Exchange, meter: Meter | None
    ) -> Response:
        options = chat.body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        completion_id = f"chatcmpl-{exchange.request_id.removeprefix('req_')}"
        legacy = sessions[0].job.legacy_call_id is not None
        created = int(time.time())
        writers = [
            ChunkWriter(completion_id, chat.model, legacy=legacy, index=index, created=created)
            for index in range(len(sessions))
        ]
        state = sessions[0].state

        async def finished() -> None:
            if meter is not None:
                await meter(state.usage)

        events = stream_loop(gateway.loop, sessions, writers, include_usage, finished)
        return await start_event_stream(events, partial(first_byte, exchange))

    async def list_models(request: Request, exchange: Exchange) -> Response:
        tenant = gateway.tenants.authenticate(request.headers.get("authorization"))
        exchange.tenant = tenant.id
        return json_response(gateway.models.listing(tenant))

    async def get_model(request: Request, exchange: Exchange) -> Response:
        tenant = gateway.tenants.authenticate(request.headers.get("authorization"))
        exchange.tenant = tenant.id
        name = request.path_params["model"]
        gateway.models.resolve(name, tenant)
        return json_response(gateway.models.describe(name))

    async def forward(path: str, request: Request, exchange: Exchange) -> Response:
        """The other OpenAI routes with a JSON body naming a model go to its upstream, at
        ``path`` under its base URL: a fixed path from ``FORWARDED_ROUTES``, never one
        read from the request, so nothing a client writes leaves the base path."""
        tenant, meter = await admit(request, exchange)
        raw = await read_body(request, exchange, max_body, body_timeout)
        try:
            body = loads(raw)
        except ValueError:
            body = None
        model = body.get("model") if isinstance(body, dict) else None
        if not isinstance(body, dict) or not isinstance(model, str):
            raise NotFound(
                f"{request.url.path} is forwarded only with a JSON body naming a 'model'."
            )
        route = gateway.models.resolve(model, tenant)
        exchange.model = model
        stream = body.get("stream") is True
        return await forward_json(
            gateway.upstream,
            route,
            path,
            raw,
            body,
            False,
            model,
            stream=stream,
            meter=meter,
            on_usage=partial(setattr, exchange, "usage"),
            forwarded=True,
        )

    async def trace(request: Request, exchange: Exchange) -> Response:
        """A request's hidden rounds, for the tenant that made it (404 for any other)."""
        tenant = gateway.tenants.authenticate(request.headers.get("authorization"))
        exchange.tenant = tenant.id
        request_id = request.path_params["request_id"]
        found = None
        if gateway.traces is not None:
            found = await gateway.traces.load(tenant.id, request_id)
        if found is None:
            raise NotFound(f"No trace of request {request_id!r} for this key.")
        return json_response(found)

    async def metrics(request: Request) -> Response:
        token = config.server.metrics_token
        if token is not None:
            expected = f"Bearer {token.get_secret_value()}".encode()
            given = request.headers.get("authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                return json_response(AuthError("/metrics needs its bearer token.").envelope(), 401)
        return Response(gateway.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    async def healthz(request: Request) -> Response:
        return json_response({"status": "ok"})

    async def readyz(request: Request) -> Response:
        """Ready when the configuration is loaded and the store answers."""
        try:
            await gateway.store.ping()
        except StoreUnavailable:
            return json_response({"status": "unavailable", "store": "unavailable"}, 503)
        return json_response({"status": "ready", "store": "ok"})

    observed = gateway.observer
    return [
        Route("/v1/chat/completions", endpoint(chat_completions, observed), methods=["POST"]),
        Route("/v1/models", endpoint(list_models, observed), methods=["GET"]),
        Route("/v1/models/{model:path}", endpoint(get_model, observed), methods=["GET"]),
        Route("/v1/toolgate/traces/{request_id}", endpoint(trace), methods=["GET"]),
        *(
            Route(f"/v1{path}", endpoint(partial(forward, path), observed), methods=["POST"])
            for path in FORWARDED_ROUTES
        ),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]


def choices_of(body: dict[str, Any], max_iterations: int) -> int:
    """How many choices a request with server tools asks for: each is a loop of its
    own, and every loop makes at least one upstream call of the request's
    ``max_iterations``."""
    n = body.get("n", 1)
    if n is None:
        return 1
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= max_iterations:
        raise BadRequest(
            f"'n' must be an integer from 1 to {max_iterations} (max_iterations) "
            "when server tools are in play.",
            param="n",
        )
    return n


def first_byte(exchange: Exchange) -> None:
    exchange.first_byte = time.perf_counter()
