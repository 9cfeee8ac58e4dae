from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tool_registry import HttpTool, ToolRegistry
from tool_registry.spec import ToolSpec

VALID: dict[str, Any] = {
    "name": "lookup",
    "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
    "http": {"url": "https://api.example.com/items/{id}"},
}


def test_a_valid_spec_has_defaults() -> None:
    spec = ToolSpec.model_validate(VALID)
    assert spec.http.method == "GET"
    assert spec.http.retries == 0
    assert spec.http.follow_redirects is False
    assert spec.result.max_chars == 16000
    assert spec.http.max_response_bytes == 1024 * 1024


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": "has space"}, "does not match"),
        ({"name": "x" * 65}, "does not match"),
        (
            {"parameters": {"type": "object", "properties": {"a": {"type": "strnig"}}}},
            "invalid JSON Schema at properties/a/type",
        ),
        ({"parameters": {"type": "array"}}, '"type": "object"'),
        ({"http": {"url": "ftp://x.example/"}}, "http:// or https://"),
        ({"http": {"url": "https://{host}.example.com/"}}, "path and query only"),
        ({"http": {"url": "https://api.example.com/{nope}"}}, "nope"),
        ({"http": {"url": "https://api.example.com/", "headers": {"x": "{ghost}"}}}, "ghost"),
        ({"http": {"url": "https://api.example.com/", "method": "TRACE"}}, "method"),
        ({"http": {"url": "https://api.example.com/", "retries": 9}}, "retries"),
        ({"bind": {"id": "{env.HOME}"}}, "not a bindable value"),
        ({"result": {"pick": "a[?"}}, "invalid JMESPath"),
        ({"surprise": 1}, "Extra inputs are not permitted"),
        (
            {"cache_ttl_s": 60, "http": {"url": "https://x.example/", "method": "POST"}},
            "cache_ttl_s is for GET",
        ),
        ({"cache_ttl_s": 0}, "greater than 0"),
    ],
)
def test_invalid_specs_say_why(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ToolSpec.model_validate({**VALID, **change})
    assert message in str(caught.value)


def test_methods_are_case_insensitive_and_bind_counts_as_known() -> None:
    spec = ToolSpec.model_validate(
        {
            **VALID,
            "bind": {"tenant": "{tenant.id}", "user": "u-{header.x-user}"},
            "http": {"url": "https://x.example/{tenant}/{id}", "method": "post"},
        }
    )
    assert spec.http.method == "POST"
    assert not spec.http.idempotent


def test_what_the_gateway_asks_of_a_tool() -> None:
    get = ToolSpec.model_validate(
        {
            "name": "lookup",
            "http": {"url": "http://t.example/{id}"},
            "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
            "bind": {"user": "{header.x-user}", "tenant": "{tenant.id}"},
            "cache_ttl_s": 30,
        }
    )
    post = ToolSpec.model_validate(
        {"name": "create", "http": {"url": "http://t.example/", "method": "POST"}}
    )
    registry = ToolRegistry([HttpTool(get), HttpTool(post)])
    lookup, create = registry.get("lookup"), registry.get("create")
    assert lookup is not None
    assert create is not None
    assert (lookup.side_effects, create.side_effects) == (False, True)
    assert (lookup.cache_ttl_s, create.cache_ttl_s) == (30, None)
    assert lookup.header_bound == frozenset({"user"})  # the tenant id is not a secret
