from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tool_registry.errors import ToolArgumentsInvalid
from tool_registry.request_builder import build_request, encode_path_value
from tool_registry.spec import HttpSpec


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        ("abc", "abc"),
        ("a/b", "a%2Fb"),
        ("..", "%2E%2E"),
        (".", "%2E"),
        ("a b?#", "a%20b%3F%23"),
        ("ü", "%C3%BC"),
        ("v1.2", "v1.2"),
    ],
)
def test_path_values_are_percent_encoded(value: str, encoded: str) -> None:
    assert encode_path_value(value) == encoded


@pytest.mark.parametrize(
    ("spec", "arguments", "url", "body"),
    [
        (
            {"url": "http://t.example/items/{id}"},
            {"id": "a/../b"},
            "http://t.example/items/a%2F..%2Fb",
            None,
        ),
        (
            {"url": "http://t.example/items/{id}"},
            {"id": ".."},
            "http://t.example/items/%2E%2E",
            None,
        ),
        (
            {"url": "http://t.example/search", "query": {"q": "{term}", "lang": "en-{region}"}},
            {"term": "a&b", "region": "gb", "limit": 5, "exact": True},
            "http://t.example/search?q=a%26b&lang=en-gb&limit=5&exact=true",
            None,
        ),
        (
            {"url": "http://t.example/search", "query": {"tag": "{tags}"}},
            {"tags": ["x", "y"]},
            "http://t.example/search?tag=x&tag=y",
            None,
        ),
        (
            {"url": "http://t.example/search", "query": {"q": "{q}"}},
            {},
            "http://t.example/search",
            None,
        ),
        (
            {"method": "POST", "url": "http://t.example/users/{id}/notes"},
            {"id": 7, "text": "hi", "tags": ["a"]},
            "http://t.example/users/7/notes",
            {"text": "hi", "tags": ["a"]},
        ),
        (
            {"method": "DELETE", "url": "http://t.example:8443/x/{id}"},
            {"id": "1", "force": False},
            "http://t.example:8443/x/1?force=false",
            None,
        ),
        (
            {"url": "http://t.example/x?fixed=1&v=2", "query": {"q": "{q}"}},
            {"q": "a", "page": 3},
            "http://t.example/x?fixed=1&v=2&q=a&page=3",
            None,
        ),
        (
            {"url": "http://t.example/s?q={q}&fixed=1"},
            {"q": "a b&c"},
            "http://t.example/s?q=a+b%26c&fixed=1",
            None,
        ),
        (
            {"method": "POST", "url": "http://t.example/x?fixed=1"},
            {"a": 1},
            "http://t.example/x?fixed=1",
            {"a": 1},
        ),
        (
            {"method": "PATCH", "url": "http://t.example/x"},
            {},
            "http://t.example/x",
            {},
        ),
    ],
)
def test_build_request(
    spec: dict[str, Any], arguments: dict[str, Any], url: str, body: Any
) -> None:
    request = build_request(HttpSpec.model_validate(spec), arguments)
    assert str(request.url) == url
    if body is None:
        assert request.content == b""
    else:
        assert json.loads(request.content) == body
        assert request.headers["content-type"] == "application/json"


def test_headers_are_templates_and_refuse_line_breaks() -> None:
    spec = HttpSpec(url="http://t.example/x", headers={"x-user": "u-{user}", "x-fixed": "1"})
    request = build_request(spec, {"user": "alice"})
    assert request.headers["x-user"] == "u-alice"
    assert request.headers["x-fixed"] == "1"
    assert request.headers["user-agent"] == "toolgate"
    with pytest.raises(ToolArgumentsInvalid, match="line break"):
        build_request(spec, {"user": "alice\r\nx-evil: 1"})


def test_a_missing_path_parameter_is_an_argument_error() -> None:
    with pytest.raises(ToolArgumentsInvalid, match="'id' is required"):
        build_request(HttpSpec(url="http://t.example/items/{id}"), {})


def test_arguments_never_change_the_origin() -> None:
    spec = HttpSpec(url="http://t.example/{path}")
    for hostile in ("@evil.example/", "//evil.example", "http://evil.example", "%2F%2Fevil"):
        request = build_request(spec, {"path": hostile})
        assert request.url.host == "t.example"
        assert request.url.scheme == "http"


_TEXT = st.text(max_size=20)


@given(
    base=st.sampled_from(
        [
            "http://h.test/a/{x}",
            "https://u:p@h.test:8443/a/{x}/b?fixed=1&t={y}",
            "http://[::1]:9/{x}?k=v",
            "http://127.0.0.1/p%20q/{x}",
        ]
    ),
    x=_TEXT,
    y=_TEXT,
    extra=st.lists(_TEXT, max_size=3),
)
def test_the_url_built_is_the_url_httpx_parses(base: str, x: str, y: str, extra: list[str]) -> None:
    """The URL is put together from the origin parsed once: it must be exactly what
    parsing its text gives, whatever the arguments hold."""
    url = build_request(HttpSpec.model_validate({"url": base}), {"x": x, "y": y, "z": extra}).url
    parsed = httpx.URL(str(url))
    assert (url.scheme, url.userinfo, url.host, url.port) == (
        parsed.scheme,
        parsed.userinfo,
        parsed.host,
        parsed.port,
    )
    assert url.raw_path == parsed.raw_path
    assert str(url) == str(parsed)
