"""MCP servers for the tests, built with the official ``mcp`` SDK and served by uvicorn.

``tools_server`` serves both protocol revisions, as the SDK does: the current one
(2026-07-28, no session) and the earlier session-based one. ``legacy_only`` puts a
guard in front that answers a current-revision request the way a server on the
earlier SDK does (400, "Missing session ID"), so a client must fall back to the
``initialize`` handshake and its ``Mcp-Session-Id``. ``HeaderLog`` records the headers
each request carried.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import anyio
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import (
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    ToolAnnotations,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Message, Receive, Scope, Send

PAGE_SIZE = 2  # tools per tools/list page: listing needs several pages


class PagedServer(MCPServer):
    """An ``MCPServer`` whose ``tools/list`` answers ``PAGE_SIZE`` tools per page."""

    async def _handle_list_tools(self, ctx: Any, params: PaginatedRequestParams | None) -> Any:
        tools = await self.list_tools()
        start = int(params.cursor) if params is not None and params.cursor else 0
        end = start + PAGE_SIZE
        cursor = str(end) if end < len(tools) else None
        return ListToolsResult(tools=tools[start:end], next_cursor=cursor)


def tools_server(name: str = "demo") -> PagedServer:
    server = PagedServer(name)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def add(a: int, b: int) -> int:
        """Adds two integers."""
        return a + b

    @server.tool()
    def fail(reason: str) -> str:
        """Always fails, saying why."""
        raise ValueError(f"failed on purpose: {reason}")

    @server.tool(name="files.read")
    def read(path: str) -> list[TextContent]:
        """A name with a dot, which OpenAI refuses."""
        return [TextContent(type="text", text=f"contents of {path}")]

    @server.tool()
    def big_number(n: int) -> str:
        """Echoes an integer as the server read it."""
        return json.dumps({"n": n})

    @server.tool()
    async def slow(seconds: float) -> str:
        """Answers after ``seconds``."""
        await anyio.sleep(seconds)
        return "slept"

    @server.tool()
    async def reveal(ctx: Context) -> str:
        """Adds a tool and tells the client its list changed."""

        @server.tool()
        def hidden_door() -> str:
            """Appears when revealed."""
            return "found"

        await ctx.session.send_tool_list_changed()
        return "revealed"

    return server


class HeaderLog:
    """ASGI middleware keeping every request's headers (lower-case names) and the
    JSON-RPC messages its bodies carried (``messages``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.seen: list[dict[str, str]] = []
        self.messages: list[Any] = []
        self._lock = threading.Lock()

    def calls(self) -> list[dict[str, Any]]:
        """The ``tools/call`` requests received."""
        with self._lock:
            return [
                m for m in self.messages if isinstance(m, dict) and m.get("method") == "tools/call"
            ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        with self._lock:
            self.seen.append(headers)
        body = bytearray()

        async def reading() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
                if not message.get("more_body", False) and body:
                    try:
                        decoded = json.loads(bytes(body))
                    except ValueError:
                        decoded = None
                    with self._lock:
                        self.messages.append(decoded)
            return message

        await self.app(scope, reading, send)


class LegacyOnly:
    """Answers requests of the current revision as a session-based-only server does."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.refused = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            version = headers.get(b"mcp-protocol-version", b"").decode("latin-1")
            if version and version not in HANDSHAKE_PROTOCOL_VERSIONS:
                self.refused += 1
                body = json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": "server-error",
                        "error": {"code": -32600, "message": "Bad Request: Missing session ID"},
                    }
                ).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 400,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


class JwtVerifier:
    """The SDK's ``TokenVerifier`` for an authorization server's JWT access tokens:
    signed by a key of its JWKS, its issuer's, for this server (``aud``)."""

    def __init__(self, issuer: str, resource: str) -> None:
        self.issuer = issuer
        self.resource = resource
        self.verified: list[str] = []  # the subjects of the tokens accepted, in order

    async def verify_token(self, token: str) -> AccessToken | None:
        import httpx
        import jwt

        async with httpx.AsyncClient() as client:
            keys = (await client.get(f"{self.issuer}/jwks")).json()
        try:
            header = jwt.get_unverified_header(token)
            key = next(k for k in keys["keys"] if k.get("kid") == header.get("kid"))
            claims = jwt.decode(
                token,
                jwt.PyJWK(key),
                algorithms=["RS256"],
                audience=self.resource,
                issuer=self.issuer,
            )
        except (jwt.PyJWTError, StopIteration, KeyError):
            return None
        self.verified.append(claims["sub"])
        return AccessToken(
            token=token,
            client_id=str(claims.get("client_id", "")),
            scopes=str(claims.get("scope", "")).split(),
            expires_at=claims.get("exp"),
            resource=self.resource,
            subject=claims["sub"],
        )


def authorized_server(issuer: str, resource: str) -> tuple[MCPServer, JwtVerifier]:
    """An MCP server that requires authorization, as the SDK builds one: it serves its
    protected resource metadata naming ``issuer``, refuses a request without a token
    of that issuer for ``resource`` (401), and its tool says whose tickets it read."""
    verifier = JwtVerifier(issuer, resource)
    server = MCPServer(
        "desk",
        token_verifier=verifier,
        auth=AuthSettings(
            issuer_url=issuer,
            resource_server_url=resource,
            required_scopes=["tickets:read"],
            validate_token_resource=True,
        ),
    )

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def my_tickets() -> str:
        """The signed-in user's own tickets."""
        token = get_access_token()
        return f"T-7 of {token.subject if token is not None else 'nobody'}"

    return server, verifier
