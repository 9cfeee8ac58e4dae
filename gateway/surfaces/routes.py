"""The HTTP routes (docs/design.md §7, §9)."""

from __future__ import annotations

import hmac
from functools import partial
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gateway.digits import whole
from gateway.errors import AuthError, BadRequest, NotFound
from gateway.ops.offload import offload
from gateway.policy.identity import owner_digest
from gateway.runtime.health import Health
from gateway.runtime.oauth import CALLBACK_PATH
from gateway.runtime.probe import probe_all
from gateway.store import StoreUnavailable
from gateway.store.traces import readable_by
from gateway.surfaces.chat.endpoint import ChatCompletions
from gateway.surfaces.connect.connections import Connections
from gateway.surfaces.connect.links import Connect, error_page
from gateway.surfaces.console.pages import Console
from gateway.surfaces.forward import forward_json
from gateway.surfaces.head import Admission
from gateway.surfaces.http import (
    Exchange,
    Handler,
    Render,
    endpoint,
    envelope,
    json_response,
    read_body,
)
from gateway.surfaces.mcp_server import McpEndpoint
from gateway.surfaces.messages.endpoint import ClaudeMessages, TokenCount, claude_error
from gateway.surfaces.observe import Observer
from gateway.surfaces.ollama.endpoint import (
    CHANGES_A_SERVER,
    OllamaChat,
    OllamaGenerate,
    OllamaInfo,
    ollama_error,
)
from gateway.surfaces.operator.admin import Admin
from gateway.surfaces.operator.approvals import OperatorApprovals
from gateway.surfaces.operator.inventory import Inventory
from gateway.surfaces.operator.overview import Overview
from gateway.surfaces.operator.runs import Runs
from gateway.surfaces.operator.usage import UsageReport
from gateway.surfaces.responses.conversation_routes import Conversations
from gateway.surfaces.responses.endpoint import Responses
from gateway.surfaces.skeleton import Skeleton, pass_through_meter
from tool_registry import dumps, loads

if TYPE_CHECKING:
    from gateway.runtime.services import Gateway

# OpenAI routes forwarded to the model's upstream as they are (JSON bodies naming a
# model). Any other path is a 404 here: the upstream key never goes anywhere else.
RECORDINGS_LISTED = 1000  # recordings an export gives unless it asks for another number
RECORDINGS_MAX_LISTED = 10000

FORWARDED_ROUTES = (
    "/completions",
    "/embeddings",
    "/moderations",
    "/images/generations",
    "/audio/speech",
)


ANTHROPIC_VERSION = "anthropic-version"  # every Anthropic client sends it


def anthropic_model(name: str) -> dict[str, str]:
    """A model as Anthropic's Models API describes one."""
    return {
        "type": "model",
        "id": name,
        "display_name": name,
        "created_at": "1970-01-01T00:00:00Z",
    }


class Handlers:
    """The routes that are not a model surface: models, traces, forwarded routes,
    metrics, health. Each reads the runtime snapshot of its own request."""

    def __init__(self, gateway: Gateway, admit: Admission) -> None:
        self._gateway = gateway
        self._admit = admit

    async def list_models(self, request: Request, exchange: Exchange) -> Response:
        runtime, tenant = self._admit.tenant(request, exchange)
        listing = runtime.models.listing(tenant)
        if ANTHROPIC_VERSION in request.headers:  # Anthropic's client: its Models API
            models = [anthropic_model(str(m["id"])) for m in listing["data"]]
            first, last = (models[0]["id"], models[-1]["id"]) if models else (None, None)
            page = {"data": models, "has_more": False, "first_id": first, "last_id": last}
            return json_response(page)
        return json_response(listing)

    async def get_model(self, request: Request, exchange: Exchange) -> Response:
        runtime, tenant = self._admit.tenant(request, exchange)
        name = request.path_params["model"]
        runtime.models.resolve(name, tenant)
        if ANTHROPIC_VERSION in request.headers:
            return json_response(anthropic_model(name))
        return json_response(runtime.models.describe(name))

    async def forward(self, path: str, request: Request, exchange: Exchange) -> Response:
        """The other OpenAI routes with a JSON body naming a model go to its upstream, at
        ``path`` under its base URL: a fixed path from ``FORWARDED_ROUTES``, never one
        read from the request, so nothing a client writes leaves the base path."""
        runtime, tenant, meter = await self._admit(request, exchange)
        server = runtime.config.server
        raw = await read_body(request, exchange, server, self._gateway.large_bodies)
        try:
            body = await offload(len(raw) > server.large_body_bytes, loads, raw)
        except ValueError:
            body = None
        model = body.get("model") if isinstance(body, dict) else None
        if not isinstance(body, dict) or not isinstance(model, str):
            raise NotFound(
                f"{request.url.path} is forwarded only with a JSON body naming a 'model'."
            )
        route = runtime.models.resolve(model, tenant)
        exchange.model = model
        if route.upstream.dialect != "openai":  # OpenAI's routes, to OpenAI-compatible servers
            raise NotFound(
                f"The model's upstream speaks {route.upstream.dialect!r}, which has no "
                f"{request.url.path}."
            )
        meter, on_usage = await pass_through_meter(
            self._gateway.budgets, exchange, tenant, route, meter
        )
        return await forward_json(
            client=self._gateway.model_servers.exchange,
            route=route,
            path=path,
            raw=raw,
            body=body,
            changed=False,
            client_model=model,
            stream=body.get("stream") is True,
            meter=meter,
            on_usage=on_usage,
            forwarded=True,
            trace=exchange.span.headers if exchange.span is not None else None,
        )

    async def trace(self, request: Request, exchange: Exchange) -> Response:
        """A request's hidden rounds, for the tenant that made it, and within it for
        the user who made it, where one did (404 for any other)."""
        _, tenant = await self._admit.caller(request, exchange)
        request_id = request.path_params["request_id"]
        traces = self._gateway.traces
        found = await traces.load(tenant.id, request_id) if traces is not None else None
        if found is None or not readable_by(found, owner_digest(exchange.identity)):
            raise NotFound(f"No trace of request {request_id!r} for this key.")
        return json_response(found)

    async def recordings(self, request: Request, exchange: Exchange) -> Response:
        """The tenant's kept recordings as JSON Lines, oldest first (``?limit=``, the
        newest 1000 by default): what ``toolgate replay --from`` reads. A user reads
        its own and those of requests no user made."""
        _, tenant = await self._admit.caller(request, exchange)
        limit = whole(request.query_params.get("limit", str(RECORDINGS_LISTED)))
        if limit is None or not 1 <= limit <= RECORDINGS_MAX_LISTED:
            raise BadRequest(
                f"limit must be a whole number from 1 to {RECORDINGS_MAX_LISTED}.", param="limit"
            )
        traces = self._gateway.traces
        owner = owner_digest(exchange.identity)
        found = await traces.recordings(tenant.id, limit, owner) if traces is not None else []
        body = b"".join(dumps(recording) + b"\n" for recording in found)
        return Response(body, media_type="application/x-ndjson")

    async def metrics(self, request: Request, exchange: Exchange) -> Response:
        token = self._gateway.runtime.config.server.metrics_token
        if token is not None:
            expected = f"Bearer {token.get_secret_value()}".encode()
            given = request.headers.get("authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                return json_response(AuthError("/metrics needs its bearer token.").envelope(), 401)
        body, content_type = self._gateway.metrics.exposition(request.headers.get("accept"))
        return Response(body, media_type=content_type)

    async def healthz(self, request: Request, exchange: Exchange) -> Response:
        return json_response({"status": "ok"})

    async def readyz(self, request: Request, exchange: Exchange) -> Response:
        """Ready when the configuration is loaded and the store answers. An upstream in
        trouble (loading its model, 503, unreachable at its last exchange) is named, and
        does not make the gateway unready: every replica shares it, and a client is
        better told by a 502 than by no gateway at all."""
        try:
            await self._gateway.store.ping()
        except StoreUnavailable:
            return json_response({"status": "unavailable", "store": "unavailable"}, 503)
        body: dict[str, object] = {"status": "ready", "store": "ok"}
        trouble = self._gateway.model_servers.trouble
        if trouble:
            body["upstreams"] = dict(trouble)
        return json_response(body)


def build_routes(
    gateway: Gateway, admit: Admission, mcp: McpEndpoint, observed: Observer
) -> list[BaseRoute]:
    handlers = Handlers(gateway, admit)

    def observed_route(
        path: str, handler: Handler, method: str, render: Render = envelope
    ) -> Route:
        """A route whose requests are measured, logged, kept as traces and traced."""
        template = path.replace(":path}", "}")  # as the route is named on spans
        return Route(path, endpoint(handler, observed, template, render), methods=[method])

    admin = Admin(gateway)
    operator = OperatorApprovals(gateway)
    inventory = Inventory(gateway)
    runs = Runs(gateway)
    health = Health(partial(probe_all, gateway))  # the probe's words, kept a while
    overview = Overview(gateway, health)
    console = Console(gateway, health)
    usage = UsageReport(gateway)
    connections = Connections(gateway, admit)
    connect = Connect(gateway, admit)
    conversations = Conversations(gateway, admit)
    responses = Responses(gateway, admit, conversations)
    ollama = OllamaInfo(gateway, admit)
    return [
        observed_route("/v1/chat/completions", Skeleton(gateway, admit, ChatCompletions()), "POST"),
        observed_route("/v1/responses", Skeleton(gateway, admit, responses), "POST"),
        observed_route(
            "/v1/messages", Skeleton(gateway, admit, ClaudeMessages()), "POST", claude_error
        ),
        observed_route(
            "/v1/messages/count_tokens", TokenCount(gateway, admit), "POST", claude_error
        ),
        observed_route("/api/chat", Skeleton(gateway, admit, OllamaChat()), "POST", ollama_error),
        observed_route(
            "/api/generate", Skeleton(gateway, admit, OllamaGenerate()), "POST", ollama_error
        ),
        *(
            Route(path, endpoint(handler, render=ollama_error), methods=[method])
            for path, method, handler in (
                ("/api/tags", "GET", ollama.tags),
                ("/api/ps", "GET", ollama.ps),
                ("/api/show", "POST", ollama.show),
                ("/api/version", "GET", ollama.version),
                *((f"/api/{path}", "POST", ollama.refused) for path in CHANGES_A_SERVER),
                ("/api/delete", "DELETE", ollama.refused),
                ("/api/blobs/{digest}", "HEAD", ollama.refused),
            )
        ),
        Route("/v1/responses/{response_id}", endpoint(responses.retrieve), methods=["GET"]),
        Route("/v1/responses/{response_id}", endpoint(responses.delete), methods=["DELETE"]),
        Route(
            "/v1/responses/{response_id}/input_items",
            endpoint(responses.input_items),
            methods=["GET"],
        ),
        Route("/v1/conversations", endpoint(conversations.create), methods=["POST"]),
        *(
            Route(f"/v1/conversations/{{conversation_id}}{path}", endpoint(handler), methods=[m])
            for path, m, handler in (
                ("", "GET", conversations.retrieve),
                ("", "POST", conversations.update),
                ("", "DELETE", conversations.delete),
                ("/items", "GET", conversations.list_items),
                ("/items", "POST", conversations.add_items),
                ("/items/{item_id}", "GET", conversations.get_item),
                ("/items/{item_id}", "DELETE", conversations.delete_item),
            )
        ),
        observed_route("/v1/models", handlers.list_models, "GET"),
        observed_route("/v1/models/{model:path}", handlers.get_model, "GET"),
        Route("/v1/toolgate/traces/{request_id}", endpoint(handlers.trace), methods=["GET"]),
        Route("/v1/toolgate/recordings", endpoint(handlers.recordings), methods=["GET"]),
        Route("/v1/toolgate/approvals", endpoint(operator.list), methods=["GET"]),
        Route("/v1/toolgate/approvals/decided", endpoint(operator.decided), methods=["GET"]),
        Route("/v1/toolgate/tenants", endpoint(inventory.tenants), methods=["GET"]),
        Route("/v1/toolgate/tools", endpoint(inventory.tools), methods=["GET"]),
        Route("/v1/toolgate/configuration", endpoint(inventory.configuration), methods=["GET"]),
        Route("/v1/toolgate/runs", endpoint(runs.list), methods=["GET"]),
        Route("/v1/toolgate/overview", endpoint(overview.get), methods=["GET"]),
        Route("/v1/toolgate/health", endpoint(overview.health), methods=["GET"]),
        Route("/v1/toolgate/runs/{tenant}/{request_id}", endpoint(runs.one), methods=["GET"]),
        Route("/v1/toolgate/usage", endpoint(usage.get), methods=["GET"]),
        Route("/v1/toolgate/connections", endpoint(connections.list), methods=["GET"]),
        Route("/v1/toolgate/connections/{name}", endpoint(connections.forget), methods=["DELETE"]),
        Route("/v1/toolgate/connections/{name}/link", endpoint(connect.link), methods=["POST"]),
        Route(CALLBACK_PATH, endpoint(connect.callback, render=error_page), methods=["GET"]),
        Route(
            "/v1/toolgate/connect/{ticket}",
            endpoint(connect.start, render=error_page),
            methods=["GET"],
        ),
        Route("/v1/toolgate/approvals/{approval_id}", endpoint(operator.decide), methods=["POST"]),
        *(
            observed_route(f"/v1{path}", partial(handlers.forward, path), "POST")
            for path in FORWARDED_ROUTES
        ),
        Route("/mcp", mcp, methods=["GET", "POST", "DELETE"]),
        *console.routes(),
        Route("/admin/reload", endpoint(admin.reload), methods=["POST"]),
        Route("/v1/toolgate/replays", endpoint(admin.replays), methods=["POST"]),
        Route("/healthz", endpoint(handlers.healthz), methods=["GET"]),
        Route("/readyz", endpoint(handlers.readyz), methods=["GET"]),
        Route("/metrics", endpoint(handlers.metrics), methods=["GET"]),
        # What Ollama's clients ask of a server before anything else, and what else
        # they may ask under /api: answered in Ollama's own shapes.
        Route("/", endpoint(ollama.running), methods=["GET", "HEAD"]),
        Route(
            "/api/{rest:path}",
            endpoint(ollama.unknown, render=ollama_error),
            methods=["GET", "POST", "PUT", "DELETE", "HEAD"],
        ),
    ]
