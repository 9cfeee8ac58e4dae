"""The console's pages: sign-in and sign-out, tenants, tools (docs/design.md §19). Each page
is the JSON route's rows (``surfaces/operator/inventory.py``) through a template that escapes
every word: tool names, descriptions and schemas are hostile text."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import orjson
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.templating import Jinja2Templates

from gateway.digits import whole
from gateway.errors import BadRequest, GatewayError, NotFound
from gateway.runtime.health import Health
from gateway.store.approval_records import Decision
from gateway.store.audit import KEPT as AUDIT_KEPT
from gateway.surfaces.console.approval_cards import approval_cards
from gateway.surfaces.console.asked import exchanged
from gateway.surfaces.console.assets import ASSET_HEADERS, HTMX_INTEGRITY, Assets
from gateway.surfaces.console.budget import Refusal, address, is_poll, page_refusal, poll_refusal
from gateway.surfaces.console.guards import HEADERS, form, handler_of, same_origin, tokens_match
from gateway.surfaces.console.sessions import ConsoleSessions, Session
from gateway.surfaces.console.shapes import (
    OUTCOME_WORDS,
    TROUBLED,
    budget_words,
    charts,
    dollars,
    guardrail_rows,
    kept_row,
    moment,
    plain,
    pretty,
    steps,
    took,
    when,
)
from gateway.surfaces.http import endpoint, page_headers, page_words
from gateway.surfaces.operator.admin import replays
from gateway.surfaces.operator.approvals import MAX_REASON, decide_for
from gateway.surfaces.operator.inventory import (
    MAX_QUERY,
    configuration_summary,
    find_tools,
    source_rows,
    tenant_rows,
    tool_row,
)
from gateway.surfaces.operator.keys import OperatorScope, scope_of
from gateway.surfaces.operator.overview import health_of, overview
from gateway.surfaces.operator.runs import RunQuery, list_runs, run_of, timeline

if TYPE_CHECKING:
    from gateway.runtime.services import Gateway

HERE = Path(__file__).parent
Page = Callable[[Request], Awaitable[Response]]
Signed = tuple[Session, OperatorScope]  # a page's signed-in operator
SESSION_COOKIE = "toolgate_console"
SIGN_IN_COOKIE = "toolgate_console_sign_in"  # the sign-in form's CSRF token, before a session
PATH = "/console"
MAX_KEY_CHARS = 512
REPLAYS_LISTED = 50  # recordings the replay page offers
AUDIT_PAGE = 100  # entries the Audit page shows at once
MAX_REPLAYED = 20  # recordings one replay from the page runs


class Console:
    def __init__(self, gateway: Gateway, health: Health) -> None:
        self._gateway = gateway
        self._health = health  # the probe's words, kept a while
        self._templates = Jinja2Templates(directory=HERE / "templates")
        self._assets = Assets.of(HERE / "static")

    def routes(self) -> list[BaseRoute]:
        pages: list[tuple[str, Page, str]] = [
            ("", self.home, "GET"),
            ("/sign-in", self.sign_in_page, "GET"),
            ("/sign-in", self.sign_in, "POST"),
            ("/sign-out", self.sign_out, "POST"),
            ("/overview", self.overview, "GET"),
            ("/tenants", self.tenants, "GET"),
            ("/tools", self.tools, "GET"),
            ("/approvals", self.approvals, "GET"),
            ("/approvals/{approval_id}", self.decide, "POST"),
            ("/runs", self.runs, "GET"),
            ("/runs/{tenant}/{request_id}", self.run, "GET"),
            ("/replay", self.replay_page, "GET"),
            ("/replay", self.replay, "POST"),
            ("/configuration", self.configuration, "GET"),
            ("/configuration/reload", self.reload, "POST"),
            ("/configuration/check", self.check, "POST"),
            ("/audit", self.audit, "GET"),
            ("/static/{name}", self.asset, "GET"),
        ]
        return [
            Route(PATH + path, endpoint(handler_of(page), render=self._error_page), methods=[m])
            for path, page, m in pages
        ]

    def _error_page(self, request: Request, exc: GatewayError, request_id: str) -> Response:
        """The boundary's rendering of what a page raised: a page (``page_words``: a
        store that does not answer is a 503 to try again shortly, for sessions and
        approvals live there), never a traceback."""
        title, text = page_words(exc, request_id)
        response = self._page(request, "message.html", {"title": title, "text": text}, exc.status)
        for name, value in page_headers(exc).items():
            response.headers.setdefault(name, value)
        return response

    # -- what every page does first

    async def _refused(self, request: Request) -> Response | None:
        """404 while the console is off; 429 past the page budget of the address."""
        if not self._gateway.runtime.config.console.enabled:
            return self._page(request, "message.html", {"title": "Not found"}, 404, None)
        refusal = await page_refusal(self._gateway, request)
        return None if refusal is None else self._too_many(request, refusal)

    def _too_many(self, request: Request, refusal: Refusal) -> Response:
        """A refused page that says so: what was too much, and when to come back."""
        context = {"title": "Too many requests", "text": refusal.text}
        response = self._page(request, "message.html", context, 429)
        response.headers["retry-after"] = str(refusal.seconds)
        return response

    def _sessions(self) -> ConsoleSessions:
        gateway = self._gateway
        return ConsoleSessions(gateway.store, gateway.keys)

    async def _signed_in(self, request: Request) -> Signed | None:
        session = await self._sessions().find(request.cookies.get(SESSION_COOKIE))
        if session is None:
            return None
        scope = scope_of(self._gateway.runtime, session.key_digest)
        return None if scope is None else (session, scope)

    async def _page_for(self, request: Request) -> Signed | Response:
        """A page's signed-in operator, or what to answer instead (404 while off, 429
        past the budget, the sign-in page without a session). A live update of a
        signed-in page (htmx's poll) is taken from its session's poll budget, not from
        the address's page budget: tabs left open do not use up the clicks."""
        if is_poll(request):
            polled = await self._polled(request)
            if polled is not None:
                return polled
        refused = await self._refused(request)
        if refused is not None:
            return refused
        signed = await self._signed_in(request)
        return self._to("/sign-in") if signed is None else signed

    async def _polled(self, request: Request) -> Signed | Response | None:
        """A poll's signed-in operator, or its 429; None when it has no session (it is
        counted as a page then: a made-up header buys nothing)."""
        if not self._gateway.runtime.config.console.enabled:
            return None
        signed = await self._signed_in(request)
        if signed is None:
            return None
        refusal = await poll_refusal(self._gateway, request.cookies[SESSION_COOKIE])
        return signed if refusal is None else self._too_many(request, refusal)

    async def _post_for(self, request: Request) -> tuple[dict[str, str], Signed] | Response:
        """A post's form and signed-in operator, or what to answer instead: a post from
        another site, without a session or without its CSRF token is refused (403)."""
        refused = await self._refused(request)
        if refused is not None:
            return refused
        fields = await form(request)
        signed = await self._signed_in(request)
        if fields is None or not same_origin(request) or signed is None:
            return self._forbidden(request)
        if not tokens_match(fields.get("csrf"), signed[0].csrf):
            return self._forbidden(request)
        return fields, signed

    def _secure(self, request: Request) -> bool:
        public = self._gateway.runtime.config.server.public_url or ""
        return request.url.scheme == "https" or public.startswith("https://")

    def _page(
        self,
        request: Request,
        template: str,
        context: dict[str, Any],
        status: int = 200,
        signed: Signed | None = None,
    ) -> HTMLResponse:
        context = {
            "request": request,
            "path": PATH,
            "signed": signed,
            "htmx_integrity": HTMX_INTEGRITY,
            "assets": self._assets.urls,
            "when": when,  # a wall-clock time as the pages show it
            "dollars": dollars,
            "took": took,  # a time taken: ms, s or minutes
            "budget_words": budget_words,
            "plain": plain,
            **context,
        }
        if signed is not None:
            context["csrf"] = signed[0].csrf
            context["who"] = signed[1].who
        response = self._templates.TemplateResponse(request, template, context, status)
        response.headers.update(HEADERS)
        return response

    def _to(self, where: str) -> RedirectResponse:
        return RedirectResponse(f"{PATH}{where}", 303, headers=HEADERS)

    # -- the routes

    async def asset(self, request: Request) -> Response:
        """The stylesheet or the vendored htmx, by a hashed name (``assets.py``); any
        other name is a page not found, and counted."""
        found = self._assets.named(request.path_params["name"])
        if found is None or not self._gateway.runtime.config.console.enabled:
            refused = await self._refused(request)
            return refused or self._page(request, "message.html", {"title": "Not found"}, 404)
        body, media_type = found
        return Response(body, media_type=media_type, headers=ASSET_HEADERS)

    async def home(self, request: Request) -> Response:
        return await self._refused(request) or self._to("/overview")

    async def sign_in_page(self, request: Request, status: int = 200, said: str = "") -> Response:
        refused = await self._refused(request)
        if refused is not None:
            return refused
        token = secrets.token_urlsafe(32)
        context = {"title": "Sign in", "sign_in_csrf": token, "said": said}
        response = self._page(request, "sign_in.html", context, status)
        response.set_cookie(
            SIGN_IN_COOKIE,
            token,
            max_age=3600,
            path=PATH,
            secure=self._secure(request),
            httponly=True,
            samesite="strict",
        )
        return response

    async def sign_in(self, request: Request) -> Response:
        refused = await self._refused(request)
        if refused is not None:
            return refused
        fields = await form(request)
        if fields is None or not same_origin(request):
            return self._forbidden(request)
        if not tokens_match(fields.get("csrf"), request.cookies.get(SIGN_IN_COOKIE)):
            return self._forbidden(request)
        key = fields.get("key", "").strip()[:MAX_KEY_CHARS]
        digest = hashlib.sha256(key.encode()).digest()
        scope = scope_of(self._gateway.runtime, digest) if key else None
        if scope is None:
            await self._audit(request, "unknown key", "sign-in refused")
            return await self.sign_in_page(request, 401, "That key is not an operator's key.")
        config = self._gateway.runtime.config.console
        token, _ = await self._sessions().open(digest, config.session_ttl_s)
        await self._audit(request, scope.who, "sign-in")
        response = self._to("/overview")
        response.set_cookie(
            SESSION_COOKIE,
            token,
            max_age=int(config.session_ttl_s),
            path=PATH,
            secure=self._secure(request),
            httponly=True,
            samesite="strict",
        )
        response.delete_cookie(SIGN_IN_COOKIE, path=PATH)
        return response

    async def sign_out(self, request: Request) -> Response:
        posted = await self._post_for(request)
        if isinstance(posted, Response):
            return posted
        await self._sessions().close(request.cookies[SESSION_COOKIE])
        await self._audit(request, posted[1][1].who, "sign-out")
        response = self._to("/sign-in")
        response.delete_cookie(SESSION_COOKIE, path=PATH)
        return response

    def _forbidden(self, request: Request) -> Response:
        context = {"title": "Refused", "text": "This form did not come from the console."}
        return self._page(request, "message.html", context, 403)

    async def overview(self, request: Request) -> Response:
        signed = await self._page_for(request)
        if isinstance(signed, Response):
            return signed
        data = await overview(self._gateway, signed[1].tenants)
        health = None
        if signed[1].admin:
            health = health_of(self._gateway, await self._health.checked())
        context = {
            "title": "Overview",
            "data": data,
            "charts": [charts(row, data["since"]) for row in data["tenants"]],
            "health": health,
        }
        return self._page(request, "overview.html", context, 200, signed)

    async def tenants(self, request: Request) -> Response:
        signed = await self._page_for(request)
        if isinstance(signed, Response):
            return signed
        rows = await tenant_rows(self._gateway, signed[1].tenants)
        return self._page(request, "tenants.html", {"title": "Tenants", "rows": rows}, 200, signed)

    async def tools(self, request: Request) -> Response:
        signed = await self._page_for(request)
        if isinstance(signed, Response):
            return signed
        scope, runtime = signed[1], self._gateway.runtime
        asked = request.query_params.get("tenant")
        tenant = scope.tenant(asked) if asked else (scope.tenants[0] if scope.tenants else None)
        if tenant is None:
            missing = {"title": "Not found", "text": "No such tenant that this key may see."}
            return self._page(request, "message.html", missing, 404, signed)
        query = request.query_params.get("q", "")[:MAX_QUERY].strip()
        names, how = await find_tools(self._gateway, runtime, tenant, query)
        rows = [row for name in names if (row := tool_row(tenant, runtime, name))]
        for row in rows:
            row["schema"] = orjson.dumps(row["parameters"], option=orjson.OPT_INDENT_2).decode()
        context: dict[str, Any] = {
            "title": f"Tools of {tenant.id}",
            "tenant": tenant.id,
            "tenants": [t.id for t in scope.tenants],
            "rows": rows,
            "q": query,
            "found": how,
            "sources": source_rows(self._gateway, tenant, scope.admin),
        }
        return self._page(request, "tools.html", context, 200, signed)

    async def runs(self, request: Request) -> Response:
        signed = await self._page_for(request)
        if isinstance(signed, Response):
            return signed
        try:
            query = RunQuery.of(request.query_params)
            listed = await list_runs(self._gateway, signed[1], query)
        except (BadRequest, NotFound) as exc:
            said = {"title": "Runs", "text": exc.message}
            return self._page(request, "message.html", said, exc.status, signed)
        asked = {k: v for k, v in request.query_params.items() if k != "before" and v}
        older = None
        if listed.rows and len(listed.rows) >= query.limit and not query.request_id:
            older = urlencode(asked | {"before": repr(listed.rows[-1].at)})
        context: dict[str, Any] = {
            "title": "Runs",
            "q": query,
            "listed": listed,
            "tenants": [t.id for t in signed[1].tenants],
            "keeping": self._gateway.runs.keeping,
            "outcomes": list(OUTCOME_WORDS),
            "outcome_words": OUTCOME_WORDS,
            "troubled": TROUBLED,
            "moment": moment,
            "newest": urlencode(asked),
            "older": older,
        }
        return self._page(request, "runs.html", context, 200, signed)

    async def run(self, request: Request) -> Response:
        signed = await self._page_for(request)
        if isinstance(signed, Response):
            return signed
        tenant, request_id = request.path_params["tenant"], request.path_params["request_id"]
        try:
            row, trace = await run_of(self._gateway, signed[1], tenant, request_id)
        except NotFound as exc:
            missing = {"title": "Not found", "text": exc.message}
            return self._page(request, "message.html", missing, 404, signed)
        drawn = timeline(trace) if trace is not None else None
        trace_url = self._gateway.runtime.config.console.trace_url
        trace_id = (row.trace_id if row is not None else None) or (trace or {}).get("trace_id")
        context: dict[str, Any] = {
            "title": f"Run {request_id[:64]}",
            "tenant": tenant,
            "row": row,
            "outcome_words": OUTCOME_WORDS,
            "trace": trace,
            "timeline": drawn,
            "steps": steps(drawn) if drawn is not None else [],
            "guardrails": guardrail_rows(trace),
            "exchanged": exchanged(trace),
            "trace_id": trace_id if isinstance(trace_id, str) else None,
            "trace_link": trace_url.replace("{trace_id}", quote(trace_id))
            if trace_url and isinstance(trace_id, str)
            else None,
        }
        return self._page(request, "run.html", context, 200, signed)

    async def approvals(self, request: Request) -> Response:
        signed = await self._page_for(request)
        if isinstance(signed, Response):
            return signed
        return await self._approvals(request, signed)

    async def _approvals(
        self, request: Request, signed: Signed, said: str = "", status: int = 200
    ) -> Response:
        shown = request.query_params.get("shown", "")[:8192]
        cards = await approval_cards(self._gateway, signed[1].tenants, shown)
        context = {"title": "Approvals", "said": said, "c": cards}
        return self._page(request, "approvals.html", context, status, signed)

    async def decide(self, request: Request) -> Response:
        posted = await self._post_for(request)
        if isinstance(posted, Response):
            return posted
        fields, signed = posted
        approve = fields.get("approve")
        if approve not in ("yes", "no"):
            return await self._approvals(request, signed, "Say approve or deny.", 400)
        reason = fields.get("reason", "").strip()[:MAX_REASON] or None
        decision = Decision(approve == "yes", reason, signed[1].who)
        approval_id = request.path_params["approval_id"][:128]
        outcome, _ = await decide_for(
            self._gateway, signed[1].tenants, approval_id, decision, address(request)
        )
        if outcome == "decided":
            return self._to("/approvals")
        said = (
            "That call was decided already: the first decision stands."
            if outcome == "already"
            else "That approval no longer waits (decided, expired, or not this key's)."
        )
        return await self._approvals(request, signed, said, 409 if outcome == "already" else 404)

    async def replay_page(self, request: Request) -> Response:
        """Pick a tenant's kept recordings and a model to replay them against (the
        admin key's, as ``POST /v1/toolgate/replays`` is); a replay's reports side by
        side."""
        signed = await self._page_for(request)
        if isinstance(signed, Response):
            return signed
        if not signed[1].admin:
            missing = {"title": "Not found", "text": "Replays are the admin key's."}
            return self._page(request, "message.html", missing, 404, signed)
        return await self._replay_page(request, signed)

    async def _replay_page(
        self,
        request: Request,
        signed: Signed,
        result: dict[str, Any] | None = None,
        said: str = "",
        status: int = 200,
    ) -> Response:
        scope, gateway = signed[1], self._gateway
        asked = request.query_params.get("tenant") or (scope.tenants[0].id if scope.tenants else "")
        tenant = scope.tenant(asked)
        kept: list[dict[str, Any]] = []
        if tenant is not None and gateway.traces is not None:
            kept = await gateway.traces.recordings(tenant.id, REPLAYS_LISTED)
            kept.reverse()  # newest first
        context: dict[str, Any] = {
            "title": "Replay",
            "tenant": tenant.id if tenant is not None else "",
            "tenants": [t.id for t in scope.tenants],
            "models": [m.name for m in gateway.runtime.config.models],
            "kept": [kept_row(r) for r in kept],
            "result": result,
            "said": said,
        }
        return self._page(request, "replay.html", context, status, signed)

    async def replay(self, request: Request) -> Response:
        posted = await self._post_for(request)
        if isinstance(posted, Response):
            return posted
        fields, signed = posted
        if not signed[1].admin:
            return self._forbidden(request)
        checked = [v for k, v in fields.items() if k.startswith("run-")]
        ids = checked[:MAX_REPLAYED]
        model, tenant = fields.get("model", ""), fields.get("tenant", "")
        if scope_tenant := signed[1].tenant(tenant):
            tenant = scope_tenant.id
        else:
            return await self._replay_page(request, signed, None, "No such tenant.", 404)
        models = {m.name for m in self._gateway.runtime.config.models}
        if model not in models or not ids:
            said = "Pick at least one recording and a model."
            return await self._replay_page(request, signed, None, said, 400)
        result = await replays(self._gateway, model, tenant, ids)
        summary = result["summary"]
        await self._audit(
            request,
            signed[1].who,
            "replay",
            tenant,
            f"{len(ids)} recording(s) against {model}: {summary['agree']} agree",
        )
        for report in result["reports"]:
            for call in report["calls"]:
                call["arguments_text"] = pretty(call["arguments"])
        said = (
            f"The first {MAX_REPLAYED} of the {len(checked)} checked were replayed."
            if len(checked) > MAX_REPLAYED
            else ""
        )
        return await self._replay_page(request, signed, result, said)

    async def configuration(self, request: Request) -> Response:
        signed = await self._page_for(request)
        if isinstance(signed, Response):
            return signed
        if not signed[1].admin:
            missing = {"title": "Not found", "text": "This page is the admin key's."}
            return self._page(request, "message.html", missing, 404, signed)
        return await self._configuration(request, signed)

    async def _configuration(
        self,
        request: Request,
        signed: Signed,
        said: str = "",
        status: int = 200,
        again: bool = False,
    ) -> Response:
        summary = configuration_summary(self._gateway.runtime)
        checked = await self._health.checked(again)
        context = {
            "title": "Configuration",
            "summary": summary,
            "said": said,
            "health": health_of(self._gateway, checked),
        }
        return self._page(request, "configuration.html", context, status, signed)

    async def check(self, request: Request) -> Response:
        """Probe every model server, tool origin and source now, as ``toolgate check
        --probe`` does, and show what each said."""
        posted = await self._post_for(request)
        if isinstance(posted, Response):
            return posted
        signed = posted[1]
        if not signed[1].admin:
            return self._forbidden(request)
        await self._audit(request, signed[1].who, "probe")
        return await self._configuration(request, signed, "Probed just now.", again=True)

    async def reload(self, request: Request) -> Response:
        posted = await self._post_for(request)
        if isinstance(posted, Response):
            return posted
        signed = posted[1]
        if not signed[1].admin:
            return self._forbidden(request)
        result = await self._gateway.runtimes.reload()
        if not result.ok:
            said = f"Not reloaded; the running configuration stays. {result.message}"
            await self._audit(request, signed[1].who, "reload refused", detail=result.message)
            return await self._configuration(request, signed, said, 422)
        said = f"Reloaded: {result.tools} tools."
        await self._audit(request, signed[1].who, "reload", detail=said)
        return await self._configuration(request, signed, said)

    async def audit(self, request: Request) -> Response:
        """What operators did, newest first, a page at a time (the admin key's)."""
        signed = await self._page_for(request)
        if isinstance(signed, Response):
            return signed
        if not signed[1].admin:
            missing = {"title": "Not found", "text": "The audit log is the admin key's."}
            return self._page(request, "message.html", missing, 404, signed)
        page = whole(request.query_params.get("page", "1")) or 1
        page = min(max(page, 1), AUDIT_KEPT // AUDIT_PAGE)
        entries = await self._gateway.audit.newest(AUDIT_PAGE + 1, (page - 1) * AUDIT_PAGE)
        context = {
            "title": "Audit",
            "entries": entries[:AUDIT_PAGE],
            "page": page,
            "more": len(entries) > AUDIT_PAGE,
        }
        return self._page(request, "audit.html", context, 200, signed)

    async def _audit(
        self, request: Request, who: str, what: str, tenant: str = "", detail: str = ""
    ) -> None:
        await self._gateway.audit.write(who, what, tenant, detail, address(request))
