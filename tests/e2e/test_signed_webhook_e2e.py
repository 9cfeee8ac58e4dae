"""The operator-approval webhook is signed as Standard Webhooks signs it (issue 34 §1):
a request under uvicorn waits for an operator, the webhook reaches a tool server, and
the delivery is verified by the ``standardwebhooks`` library and by the manual's own
snippet (run here as written); a changed body, another secret or a stale timestamp
fail both. The secret is redacted like every other."""

from __future__ import annotations

import base64
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from standardwebhooks import Webhook, WebhookVerificationError

from gateway.config import GatewayConfig
from gateway.errors import ConfigError
from gateway.ops.redaction import secrets_of
from gateway.ops.webhook import Webhooks
from gateway.runtime.loader import load_config
from tests.support.servers import wait_for
from tool_registry import EgressPolicy, create_tool_transport

from .conftest import MODEL, StackFactory
from .test_policy_e2e import operator_rules, writes_at_once

SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()
OTHER = "whsec_" + base64.b64encode(bytes(range(1, 33))).decode()
POLICY_DOC = Path(__file__).resolve().parents[2] / "docs" / "policy.md"


def readme_verify() -> Any:
    """The manual's verification snippet (docs/policy.md), run as written."""
    text = POLICY_DOC.read_text()
    snippet = re.search(r"<!-- webhook-verify -->\n```python\n(.*?)```", text, re.S)
    assert snippet is not None, "docs/policy.md lost its webhook snippet"
    namespace: dict[str, Any] = {}
    exec(compile(snippet.group(1), "docs/policy.md", "exec"), namespace)
    return namespace["verify"]


def test_a_pending_approval_is_delivered_signed(stack: StackFactory) -> None:
    s = stack(writes_at_once, config=operator_rules(timeout_s=0.5, webhook_secret=SECRET))
    s.client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Refund order 42."}]
    )
    assert wait_for(lambda: any(h.path == "/echo/hook" for h in s.tools.hits))
    [hook] = [h for h in s.tools.hits if h.path == "/echo/hook"]
    headers = {k: v for k, v in hook.headers.items() if k.startswith("webhook-")}
    assert set(headers) == {"webhook-id", "webhook-timestamp", "webhook-signature"}
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 60

    told = Webhook(SECRET).verify(hook.body, headers)
    assert told["type"] == "approval.pending"
    verify = readme_verify()
    assert verify(SECRET, headers, hook.body)

    assert not verify(SECRET, headers, hook.body + b" ")
    assert not verify(OTHER, headers, hook.body)
    for secret, body in ((SECRET, hook.body + b" "), (OTHER, hook.body)):
        with pytest.raises(WebhookVerificationError):
            Webhook(secret).verify(body, headers)
    assert SECRET not in repr(hook)


def test_a_stale_delivery_is_refused_by_both_verifiers() -> None:
    """What makes a captured delivery useless later: the timestamp is signed, and both
    verifiers refuse one more than five minutes old."""
    transport = create_tool_transport(EgressPolicy())
    hooks = Webhooks(transport, clock=lambda: time.time() - 600)
    request = hooks.request("http://hooks.test/x", {"type": "approval.pending"}, SECRET)
    headers = {k: v for k, v in request.headers.items() if k.startswith("webhook-")}
    with pytest.raises(WebhookVerificationError, match="too old"):
        Webhook(SECRET).verify(request.content, headers)
    assert not readme_verify()(SECRET, headers, request.content)
    fresh = Webhooks(transport).request("http://hooks.test/x", {"type": "x"}, SECRET)
    assert readme_verify()(SECRET, dict(fresh.headers), fresh.content)
    assert (
        "webhook-signature" not in Webhooks(transport).request("http://h.test/", {}, None).headers
    )


@pytest.mark.parametrize(
    ("secret", "says"),
    [
        ("not-a-secret-at-all-xxxxxxxxxxxx", "must start with 'whsec_'"),
        ("whsec_!!!!", "must be base64"),
        ("whsec_" + base64.b64encode(b"short").decode(), "24 to 64 random bytes"),
    ],
)
def test_a_bad_secret_is_refused_at_load_without_quoting_it(
    secret: str, says: str, tmp_path: Path
) -> None:
    data = {
        "upstreams": [{"name": "u", "base_url": "http://u.test/v1"}],
        "models": [{"name": "m", "upstream": "u"}],
        "policy": {"approvals": {"webhook": "http://h.test/", "webhook_secret": secret}},
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=re.escape(says)) as refused:
        load_config(path)
    assert secret not in str(refused.value)


def test_the_secret_is_redacted_like_any_other() -> None:
    config = GatewayConfig.model_validate(
        {
            "upstreams": [{"name": "u", "base_url": "http://u.test/v1"}],
            "models": [{"name": "m", "upstream": "u"}],
            "policy": {"approvals": {"webhook": "http://h.test/", "webhook_secret": SECRET}},
            "tenants": [
                {
                    "id": "t",
                    "keys": ["sk-tenant-key-123"],
                    "policy": {
                        "approvals": {
                            "webhook": "http://h.test/",
                            "webhook_secret": OTHER,
                            "admin_keys": ["sk-approver-key-456"],
                        }
                    },
                }
            ],
        }
    )
    assert {SECRET, OTHER, "sk-approver-key-456"} <= set(secrets_of(config))
    with pytest.raises(ValueError, match=r"set approvals\.webhook too"):
        GatewayConfig.model_validate(
            {
                "upstreams": [{"name": "u", "base_url": "http://u.test/v1"}],
                "models": [{"name": "m", "upstream": "u"}],
                "policy": {"approvals": {"webhook_secret": SECRET}},
            }
        )


@pytest.mark.anyio
async def test_a_delivery_goes_through_the_guard() -> None:
    """The hook's transport is the guarded one: a refused address is never sent to."""
    sent: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200)

    transport = create_tool_transport(
        EgressPolicy(deny_private=True), inner=httpx.MockTransport(record)
    )
    await Webhooks(transport).deliver("http://10.0.0.7/hook", {"type": "x"}, SECRET)
    await Webhooks(transport).deliver("http://169.254.169.254/", {"type": "x"})
    await Webhooks(transport).deliver("http://hooks.test/", {"type": "x"})
    assert [r.url.host for r in sent] == ["hooks.test"]


def test_a_webhook_on_a_refused_address_is_never_delivered(stack: StackFactory) -> None:
    """``deny_private`` with the tools allowed by name: the hook's literal loopback
    address is refused, as a tool's would be (it was delivered past the guard)."""
    with_webhook = operator_rules(timeout_s=0.3)

    def refused_hook(config: dict[str, Any]) -> dict[str, Any]:
        config = with_webhook(config)
        for tool in config["tools"]:
            tool["http"]["url"] = tool["http"]["url"].replace("127.0.0.1", "localhost")
        config["egress"] = {"deny_private": True, "allow_hosts": ["localhost"]}
        return config

    s = stack(writes_at_once, config=refused_hook)
    answer = s.client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Refund order 42."}]
    )
    assert "did not come in time" in (answer.choices[0].message.content or "")
    time.sleep(0.3)  # a delivery, had there been one, is done by now
    assert [h.path for h in s.tools.hits if h.path == "/echo/hook"] == []
