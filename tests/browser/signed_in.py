"""What both browser tests share: the application its users sign in to at the provider
(its client, the page the provider sends them back to, the ID tokens it gets), and
how it asks the gateway as one of them."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.oidc import Browser, Idp
from tests.support.recorder import Answer, Recorder
from tests.support.scripted import MODEL, TENANT_KEY, Harness
from tests.support.servers import ServerThread

APP = ("app", "app-secret-CANARY-0037-0037-0037-0037")


class SignedIn:
    """The application; a test's stack sets ``idp`` and ``gateway``."""

    idp: Idp
    gateway: ServerThread

    def __init__(self, harness: Harness) -> None:
        self.browser = Browser()  # first: without a Chromium, the test skips here
        harness.on_close(self.browser.close)
        back = Recorder(lambda hit: Answer(200, b"signed in", [("content-type", "text/plain")]))
        self.app_url = harness.serve(back).url + "/signed-in"
        self.id_tokens: dict[str, str] = {}

    def app_client(self) -> dict[str, Any]:
        """The application's client at the provider (oidc-provider's metadata)."""
        return {
            "client_id": APP[0],
            "client_secret": APP[1],
            "redirect_uris": [self.app_url],
            "grant_types": ["authorization_code"],
            "response_types": ["code"],
            "scope": "openid",
        }

    def users(self) -> dict[str, Any]:
        """A tenant's ``users``: the provider's ID tokens for the application."""
        return {"jwt": {"issuer": self.idp.issuer, "audience": APP[0]}}

    def sign_in(self, user: str) -> None:
        self.id_tokens[user] = self.browser.sign_in(user, self.idp, APP, self.app_url)

    def headers(self, user: str) -> dict[str, str]:
        return {
            "authorization": f"Bearer {TENANT_KEY}",
            "x-toolgate-user-token": self.id_tokens[user],
        }

    def ask(self, user: str) -> httpx.Response:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "my tickets?"}]}
        answer = httpx.post(
            f"{self.gateway.url}/v1/chat/completions",
            json=body,
            headers=self.headers(user),
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        return answer

    def connections(self, user: str) -> list[dict[str, Any]]:
        listed = httpx.get(
            f"{self.gateway.url}/v1/toolgate/connections", headers=self.headers(user)
        )
        assert listed.status_code == 200, listed.text
        data: list[dict[str, Any]] = listed.json()["data"]
        return data


def said(answer: httpx.Response) -> str:
    text: str = answer.json()["choices"][0]["message"]["content"]
    return text
