"""End-user tokens (docs/design.md §18) are hostile text: whatever a request carries in the
user-token header, ``verify`` answers with a user, None (a key not held), or a 401 —
never another error, and never a user for a token its keys did not sign."""

from __future__ import annotations

import base64
import json
import time

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from hypothesis import given, settings
from hypothesis import strategies as st
from jwt.algorithms import RSAAlgorithm
from starlette.datastructures import Headers

from gateway.config import JwtUsersConfig
from gateway.errors import AuthError, BadRequest
from gateway.policy.users import User, token_of, verify
from gateway.runtime.user_keys import keys_of

KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
JWK = {**json.loads(RSAAlgorithm.to_jwk(KEY.public_key())), "kid": "k1"}
KEYS = keys_of({"keys": [JWK]})
SETTINGS = JwtUsersConfig(issuer="https://idp.test", audience="gw")


def token(**claims: object) -> str:
    body = {"iss": "https://idp.test", "aud": "gw", "sub": "u1", "exp": int(time.time()) + 60}
    return jwt.encode(body | claims, KEY, "RS256", headers={"kid": "k1"})


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_a_signed_token_names_its_user() -> None:
    assert verify(token(), KEYS, SETTINGS) == User("u1", "https://idp.test")
    assert verify(token(sub="u2"), KEYS, SETTINGS.model_copy(update={"claim": "sub"})) == User(
        "u2", "https://idp.test"
    )
    other = jwt.encode({"sub": "x"}, KEY, "RS256", headers={"kid": "k9"})
    assert verify(other, KEYS, SETTINGS) is None  # a key not held: fetch again


def test_the_header_is_read_once_bearer_or_bare() -> None:
    assert token_of(Headers({"x-toolgate-user-token": "Bearer abc"}), SETTINGS) == "abc"
    assert token_of(Headers({"x-toolgate-user-token": "abc"}), SETTINGS) == "abc"
    assert token_of(Headers({}), SETTINGS) is None
    twice = Headers(raw=[(b"x-toolgate-user-token", b"a"), (b"x-toolgate-user-token", b"b")])
    with pytest.raises(BadRequest):
        token_of(twice, SETTINGS)


def test_keys_are_public_signing_keys_only() -> None:
    private = {**json.loads(RSAAlgorithm.to_jwk(KEY)), "kid": "p"}  # holds "d"
    shared = {"kty": "oct", "k": b64(b"s" * 32), "kid": "s"}
    encrypting = {**JWK, "kid": "e", "use": "enc"}
    kept = keys_of({"keys": [private, shared, encrypting, "junk", JWK]})
    assert list(kept) == ["k1"]
    with pytest.raises(ValueError, match="no usable"):
        keys_of({"keys": [shared]})
    with pytest.raises(ValueError, match="no keys"):
        keys_of({"keys": "all of them"})


parts = st.text(
    alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=", max_size=80
)


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(max_size=200)
    | st.builds(lambda a, b, c: f"{a}.{b}.{c}", parts, parts, parts)
    | st.builds(
        lambda header, body: f"{b64(json.dumps(header).encode())}.{b64(body.encode())}.sig",
        st.dictionaries(
            st.sampled_from(["alg", "kid", "typ", "crit", "jku"]), st.text(max_size=20)
        ),
        st.text(max_size=50),
    )
)
def test_any_text_is_a_user_none_or_a_401(text: str) -> None:
    found: object = None
    try:
        found = verify(text, KEYS, SETTINGS)
    except AuthError as exc:
        found = exc.code
    assert found in (None, "invalid_user_token")  # never a user: nothing here is signed
