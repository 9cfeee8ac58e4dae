"""An AWS error's words never carry a request's SigV4 signature (docs/bedrock.md)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.upstream.bedrock.signatures import unsigned

SIGNATURE = "eae0d0bcfe3e986a40a4559ae68c43e443bbe53a6fc09e4387b6fa502a3b3b07"
AUTHORIZATION = (
    "AWS4-HMAC-SHA256 Credential=AKIDGATEWAY/20261207/us-east-1/bedrock/aws4_request, "
    f"SignedHeaders=content-type;host;x-amz-date, Signature={SIGNATURE}"
)


@pytest.mark.parametrize(
    ("said", "left"),
    [
        (f"Authorization: {AUTHORIZATION}; done", "Authorization: [redacted]; done"),
        (f"The signature was Signature={SIGNATURE}.", "The signature was Signature=[redacted]."),
        (f"?X-Amz-Signature={SIGNATURE}&x=1", "?X-Amz-Signature=[redacted]&x=1"),
        (
            "Malformed input request: 2 schema violations",
            "Malformed input request: 2 schema violations",
        ),
        ("Signature=short", "Signature=short"),  # no signature of the request's length
    ],
)
def test_a_quoted_signature_is_cut(said: str, left: str) -> None:
    assert unsigned(said) == left


@given(st.text(max_size=200), st.text(max_size=200))
def test_no_signature_survives_whatever_surrounds_it(before: str, after: str) -> None:
    said = unsigned(f"{before}Signature={SIGNATURE}{after}")
    assert SIGNATURE not in said or SIGNATURE in before + after
    assert not re.search(r"AWS4-HMAC-SHA256\s+Credential=\w", unsigned(before + AUTHORIZATION))
