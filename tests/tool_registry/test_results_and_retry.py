from __future__ import annotations

import json

import pytest

from tool_registry.results import cut, error_result, success_result
from tool_registry.retry import Backoff, backoff_delay, retry_after_s, should_retry
from tool_registry.spec import ResultSpec


def test_cut_marks_what_it_left_out() -> None:
    assert cut("abcdef", 10) == "abcdef"
    assert cut("abcdef", 4) == "abcd…[truncated 2 characters]"


@pytest.mark.parametrize(
    ("pick", "body", "expected"),
    [
        (None, b'{ "a" : 1,  "b": [1, 2] }', '{"a":1,"b":[1,2]}'),
        ("b[1]", b'{"a": 1, "b": [1, 2]}', "2"),
        ("missing", b'{"a": 1}', "null"),
        (None, b"plain text", "plain text"),
        (None, b'{"n": 12345678901234567890123}', '{"n":12345678901234567890123}'),
        (None, '{"w": "ü"}'.encode(), '{"w":"ü"}'),
    ],
)
def test_success_results(pick: str | None, body: bytes, expected: str) -> None:
    result = success_result(ResultSpec(pick=pick), 200, body, "utf-8", truncated=False)
    assert (result.content, result.outcome, result.status) == (expected, "ok", 200)


def test_empty_and_truncated_bodies() -> None:
    spec = ResultSpec(max_chars=50)
    assert success_result(spec, 204, b"", None, False).content == "OK (HTTP 204, no content)"
    truncated = success_result(spec, 200, b'{"a": "' + b"x" * 10, None, True)
    assert truncated.content.endswith("…[response cut at the size limit]")
    long = success_result(spec, 200, b"y" * 100, None, False)
    assert long.content == "y" * 50 + "…[truncated 50 characters]"


def test_error_results_are_json_for_the_model() -> None:
    result = error_result("HTTP 503", "http_error", 503, "x" * 900)
    payload = json.loads(result.content)
    assert payload["error"] == "HTTP 503"
    assert payload["status"] == 503
    assert len(payload["body"]) < 600
    assert not result.ok


@pytest.mark.parametrize(
    ("status", "headers", "expected"),
    [
        (429, {}, True),
        (502, {}, True),
        (503, {}, True),
        (504, {}, True),
        (500, {}, False),
        (400, {}, False),
        (500, {"x-should-retry": "true"}, True),
        (503, {"x-should-retry": "false"}, False),
    ],
)
def test_should_retry(status: int, headers: dict[str, str], expected: bool) -> None:
    assert should_retry(status, headers) is expected


def test_retry_after_forms() -> None:
    assert retry_after_s({"retry-after": "3"}) == 3.0
    assert retry_after_s({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_s({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, now=1445412480) == 10
    assert retry_after_s({"retry-after": "soon"}) is None
    assert retry_after_s({}) is None
    # A far side's hostile numbers (issue 34 §3): never a wait of nan or forever.
    assert retry_after_s({"retry-after": "nan"}) is None
    assert retry_after_s({"retry-after": "inf"}) is None
    assert retry_after_s({"retry-after": "-5"}) == 0.0
    assert retry_after_s({"retry-after-ms": "NaN", "retry-after": "2"}) == 2.0
    assert backoff_delay(0, {"retry-after": "1e308"}, 0.5, 8.0) == 8.0


def test_backoff_is_exponential_capped_and_honours_retry_after() -> None:
    assert [backoff_delay(n, {}, 0.5, 3.0) for n in range(4)] == [0.5, 1.0, 2.0, 3.0]
    assert backoff_delay(0, {"retry-after": "2"}, 0.5, 8.0) == 2.0
    assert backoff_delay(0, {"retry-after": "600"}, 0.5, 8.0) == 8.0


@pytest.mark.anyio
async def test_backoff_doubles_to_its_cap_and_starts_again_after_a_reset() -> None:
    backoff = Backoff(first_s=0.001, cap_s=0.004)
    seen = []
    for _ in range(4):
        seen.append(backoff.delay)
        await backoff.wait()
    assert seen == [0.001, 0.002, 0.004, 0.004]
    backoff.reset()
    assert backoff.delay == 0.001
