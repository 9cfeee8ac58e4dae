"""A real OpenID provider for the tests (panva's ``oidc-provider``, certified, run by
Node from ``tests/node``) and the browser that signs in at it (the system's Chromium,
driven by Playwright; never a browser Playwright downloads).

``Idp`` starts ``tests/node/oidc_provider.mjs`` on a free loopback port and stops it
by its PID. ``Browser`` signs a user in at the provider's own login and consent pages;
each user has a browser context of their own (cookies apart), and every request for
anywhere but loopback is refused (the pages' web fonts, say): nothing leaves."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest

from tests.support.node import NODE_DIR, node
from tests.support.servers import free_port

CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    """The system's Chromium (``TOOLGATE_CHROMIUM``, else on the PATH), or a skip that
    says how to get one: the browser tests run wherever one is installed."""
    named = os.environ.get("TOOLGATE_CHROMIUM")
    found = named or next(
        (p for n in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(n))),
        None,
    )
    if found is None or not Path(found).exists():
        pytest.skip(
            "browser tests skipped: no Chromium (apt-get install chromium, or set "
            "TOOLGATE_CHROMIUM to its path)"
        )
    return found


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


class Idp:
    """The provider, with the clients given (oidc-provider's client metadata)."""

    def __init__(
        self,
        clients: list[dict[str, Any]],
        resources: list[dict[str, str]] | None = None,
        access_token_ttl: int = 600,
    ) -> None:
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        settings = {
            "port": self.port,
            "clients": clients,
            "resources": resources or [],
            "access_token_ttl": access_token_ttl,
        }
        self._process = subprocess.Popen(
            [node("oidc-provider"), str(NODE_DIR / "oidc_provider.mjs"), json.dumps(settings)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line.startswith("ready "):
            self.close()
            raise RuntimeError(f"the OpenID provider did not start: {line!r}")

    def token(self, form: dict[str, str], client: tuple[str, str]) -> dict[str, Any]:
        answer = httpx.post(f"{self.issuer}/token", data=form, auth=client, timeout=10)
        assert answer.status_code == 200, answer.text
        found: dict[str, Any] = answer.json()
        return found

    def introspect(self, token: str, client: tuple[str, str]) -> dict[str, Any]:
        """What the provider says of a token (RFC 7662), asked as a resource server."""
        answer = httpx.post(
            f"{self.issuer}/token/introspection", data={"token": token}, auth=client, timeout=10
        )
        assert answer.status_code == 200, answer.text
        found: dict[str, Any] = answer.json()
        return found

    def close(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()


class Browser:
    """Chromium, headless; a page per user, each in a context of its own."""

    def __init__(self) -> None:
        from playwright.sync_api import sync_playwright

        path = chromium()
        self._playwright = sync_playwright().start()
        self._browser = self._playwright.chromium.launch(
            executable_path=path, headless=True, args=CHROMIUM_FLAGS
        )
        self._pages: dict[str, Any] = {}
        self.visited: list[str] = []  # every URL a page asked for (redirects too), in order

    def page(self, user: str) -> Any:
        if user not in self._pages:
            context = self._browser.new_context()
            context.route("**/*", self._only_loopback)
            context.on("request", lambda request: self.visited.append(request.url))
            page = context.new_page()
            page.set_default_timeout(15_000)
            self._pages[user] = page
        return self._pages[user]

    def _only_loopback(self, route: Any) -> None:
        url = route.request.url
        if urlsplit(url).hostname in ("127.0.0.1", "localhost"):
            route.continue_()
        else:
            route.abort()

    def go(self, user: str, url: str) -> Any:
        """Open ``url`` as ``user`` and go through the provider's pages: sign in (any
        password: the provider's development login), then consent. The page where
        the browser ends (the page after the provider's redirect back)."""
        page = self.page(user)
        page.goto(url)
        for _ in range(4):
            if page.locator("input[name=login]").count():
                page.fill("input[name=login]", user)
                page.fill("input[name=password]", "any password")
                with page.expect_navigation():
                    page.click("button[type=submit]")
            elif page.locator("input[name=prompt][value=consent]").count():
                with page.expect_navigation():
                    page.click("button[type=submit]")
            else:
                break
        return page

    def sign_in(self, user: str, idp: Idp, client: tuple[str, str], redirect_uri: str) -> str:
        """The user signs in to the application (the authorization code flow of its
        client, with PKCE); the ID token the application gets."""
        verifier, challenge = pkce()
        query = {
            "client_id": client[0],
            "response_type": "code",
            "redirect_uri": redirect_uri,
            "scope": "openid",
            "state": secrets.token_urlsafe(16),
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        page = self.go(user, f"{idp.issuer}/auth?{urlencode(query)}")
        code = parse_qs(urlsplit(page.url).query)["code"][0]
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": verifier,
        }
        id_token: str = idp.token(form, client)["id_token"]
        return id_token

    def close(self) -> None:
        self._browser.close()
        self._playwright.stop()
