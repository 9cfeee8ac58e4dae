"""The ID token in a provider's token answer (OpenID Connect Core §3.1.3.7, issue 37's
hostile input): unsigned, another client's, another issuer's, expired, signed by a key
the provider does not publish (or no longer does), or not a JWT at all — each refuses
the whole answer, so no grant is made of it. The provider's keys are fetched through
the guard for each answer, so a rotation is read as it stands."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from gateway.runtime.discovery import Discovery
from gateway.runtime.oauth import OAuthClient, authorize_url, nonce_of, pkce_pair
from gateway.runtime.providers import ProviderClient, ProviderRefused, ProviderUnreachable
from tool_registry import EgressPolicy, create_tool_transport

ISSUER = "https://idp.test"
CLIENT = "toolgate"
SECRET = "client-secret-CANARY-id-token-" + "0123456789" * 4
NONCE = nonce_of("verifier")  # the round trip's, as ``answered`` exchanges its code


class Idp:
    """A token endpoint that answers an ID token made by ``make``, and a JWKS of the
    keys it publishes now; every request recorded."""

    def __init__(self) -> None:
        self.signing = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = "k1"
        self.published: list[dict[str, Any]] = [self.jwk()]
        self.id_token: object = None
        self.sent: list[str] = []
        self.jwks_down = False

    def jwk(self) -> dict[str, Any]:
        public = self.signing.public_key()
        return {**json.loads(RSAAlgorithm.to_jwk(public)), "kid": self.kid, "use": "sig"}

    def rotate(self) -> None:
        """New keys only: the old one is no longer published."""
        self.signing = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = f"k{int(self.kid[1:]) + 1}"
        self.published = [self.jwk()]

    def sign(self, **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": ISSUER, "aud": CLIENT, "sub": "u-1", "iat": now, "exp": now + 300}
        body["nonce"] = NONCE
        return jwt.encode(body | claims, self.signing, "RS256", headers={"kid": self.kid})

    def __call__(self, request: httpx.Request) -> httpx.Response:
        url = str(request.url)
        self.sent.append(url)
        if url == f"{ISSUER}/jwks":
            if self.jwks_down:
                raise httpx.ConnectError("down", request=request)
            return httpx.Response(200, json={"keys": self.published})
        if url == f"{ISSUER}/token":
            answer: dict[str, Any] = {"access_token": "at-1", "token_type": "Bearer"}
            if self.id_token is not None:
                answer["id_token"] = self.id_token
            return httpx.Response(200, json=answer)
        return httpx.Response(404, json={})


def oauth(idp: Idp) -> OAuthClient:
    transport = create_tool_transport(EgressPolicy(), inner=httpx.MockTransport(idp))
    return OAuthClient(transport, Discovery(transport))


def client(*, keys: bool = True, secret: str | None = SECRET) -> ProviderClient:
    """A connection whose endpoints its issuer's metadata named (with its keys), or
    one configured by hand (``keys=False``: no issuer, no keys)."""
    return ProviderClient(
        connection="svc",
        authorize_url=f"{ISSUER}/authorize",
        token_url=f"{ISSUER}/token",
        client_id=CLIENT,
        client_secret=secret,
        issuer=ISSUER if keys else None,
        jwks_uri=f"{ISSUER}/jwks" if keys else None,
    )


async def answered(idp: Idp, token: object, provider: ProviderClient | None = None) -> str:
    """The access token of a code's grant, with ``token`` as the answer's ID token."""
    idp.id_token = token
    grant = await oauth(idp).exchange(provider or client(), "code", "verifier", "https://gw/cb")
    return grant.access_token


def unsigned(**claims: Any) -> str:
    now = int(time.time())
    body = {"iss": ISSUER, "aud": CLIENT, "sub": "u-1", "exp": now + 300, "nonce": NONCE} | claims
    head = base64.urlsafe_b64encode(b'{"alg":"none","typ":"JWT"}').rstrip(b"=").decode()
    payload = base64.urlsafe_b64encode(json.dumps(body).encode()).rstrip(b"=").decode()
    return f"{head}.{payload}."


@pytest.mark.anyio
async def test_an_id_token_signed_by_the_providers_key_holds() -> None:
    idp = Idp()
    assert await answered(idp, idp.sign()) == "at-1"
    assert idp.sent == [f"{ISSUER}/token", f"{ISSUER}/jwks"]


@pytest.mark.anyio
async def test_an_answer_without_an_id_token_fetches_no_keys() -> None:
    idp = Idp()
    assert await answered(idp, None) == "at-1"
    assert idp.sent == [f"{ISSUER}/token"]


@pytest.mark.anyio
@pytest.mark.parametrize("keys", [True, False])
@pytest.mark.parametrize("alg", ["none", "None", "NONE"])
async def test_an_unsigned_id_token_is_refused_and_no_key_is_fetched(keys: bool, alg: str) -> None:
    idp = Idp()
    token = unsigned().replace(
        unsigned().split(".")[0],
        base64.urlsafe_b64encode(json.dumps({"alg": alg}).encode()).rstrip(b"=").decode(),
    )
    with pytest.raises(ProviderRefused, match="unsigned"):
        await answered(idp, token, client(keys=keys))
    assert f"{ISSUER}/jwks" not in idp.sent


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("claims", "why"),
    [
        ({"aud": "another-client"}, "not for this audience"),
        ({"iss": "https://elsewhere.test"}, "another issuer"),
        ({"exp": int(time.time()) - 3600}, "expired"),
    ],
)
async def test_an_id_token_for_another_client_issuer_or_time_is_refused(
    claims: dict[str, Any], why: str
) -> None:
    idp = Idp()
    with pytest.raises(ProviderRefused, match=why):
        await answered(idp, idp.sign(**claims))


@pytest.mark.anyio
async def test_a_signature_by_a_key_not_published_is_refused() -> None:
    idp = Idp()
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = int(time.time())
    body = {"iss": ISSUER, "aud": CLIENT, "sub": "u-1", "exp": now + 300}
    forged = jwt.encode(body, stranger, "RS256", headers={"kid": "k1"})  # the right kid
    with pytest.raises(ProviderRefused, match="signature does not hold"):
        await answered(idp, forged)
    named = jwt.encode(body, stranger, "RS256", headers={"kid": "k9"})
    with pytest.raises(ProviderRefused, match="does not publish"):
        await answered(idp, named)


@pytest.mark.anyio
async def test_the_keys_are_read_as_they_are_now_when_the_jwks_changes() -> None:
    idp = Idp()
    before = idp.sign()
    assert await answered(idp, before) == "at-1"
    idp.rotate()  # the provider rotated: k1 is no longer published
    assert await answered(idp, idp.sign()) == "at-1"
    with pytest.raises(ProviderRefused, match="does not publish"):
        await answered(idp, before)
    # An EC key in place of the RSA one: the kind must fit the algorithm.
    other = ec.generate_private_key(ec.SECP256R1())
    idp.published = [{**json.loads(ECAlgorithm.to_jwk(other.public_key())), "kid": "e1"}]
    mixed = jwt.encode({"iss": ISSUER, "aud": CLIENT}, idp.signing, "RS256", {"kid": "e1"})
    with pytest.raises(ProviderRefused, match="not for its algorithm"):
        await answered(idp, mixed)


@pytest.mark.anyio
async def test_keys_that_cannot_be_fetched_keep_nothing() -> None:
    idp = Idp()
    idp.jwks_down = True
    with pytest.raises(ProviderUnreachable):
        await answered(idp, idp.sign())
    idp.jwks_down = False
    idp.published = [{"kty": "oct", "k": "c2VjcmV0"}]  # a shared secret is never a key
    with pytest.raises(ProviderRefused, match="no usable public key"):
        await answered(idp, idp.sign())


@pytest.mark.anyio
async def test_an_id_token_signed_with_the_client_secret() -> None:
    idp = Idp()
    now = int(time.time())
    body = {"iss": ISSUER, "aud": CLIENT, "sub": "u-1", "exp": now + 300, "nonce": NONCE}
    assert await answered(idp, jwt.encode(body, SECRET, "HS256")) == "at-1"
    assert f"{ISSUER}/jwks" not in idp.sent  # a shared secret's needs no keys
    with pytest.raises(ProviderRefused, match="signature does not hold"):
        await answered(idp, jwt.encode(body, "another-secret-" + "9" * 50, "HS256"))
    with pytest.raises(ProviderRefused, match="shared secret, and there is none"):
        await answered(idp, jwt.encode(body, SECRET, "HS256"), client(secret=None))


@pytest.mark.anyio
async def test_endpoints_configured_by_hand_still_hold_the_claims() -> None:
    """No metadata, no keys: the token endpoint the operator named vouches for the
    signature (§3.1.3.7, item 6); the audience and the time are still checked."""
    idp = Idp()
    by_hand = client(keys=False)
    assert await answered(idp, idp.sign(), by_hand) == "at-1"
    with pytest.raises(ProviderRefused, match="not for this audience"):
        await answered(idp, idp.sign(aud="another-client"), by_hand)
    with pytest.raises(ProviderRefused, match="expired"):
        await answered(idp, idp.sign(exp=int(time.time()) - 3600), by_hand)
    assert f"{ISSUER}/jwks" not in idp.sent


@pytest.mark.anyio
@pytest.mark.parametrize(
    "token", [42, "", "not.a.jwt", "x" * 20_000, ["a"], {"alg": "RS256"}, "e30.e30.e30"]
)
async def test_what_is_not_an_id_token_is_refused(token: object) -> None:
    with pytest.raises(ProviderRefused):
        await answered(Idp(), token)


@pytest.fixture(scope="module")
def one_idp() -> Idp:
    return Idp()


@given(token=st.text(max_size=300) | st.binary(max_size=300).map(lambda b: b.hex()))
@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_text_as_an_id_token_is_refused_with_a_reason(one_idp: Idp, token: str) -> None:
    with pytest.raises(ProviderRefused) as refused:
        asyncio.run(answered(one_idp, token))
    assert token not in str(refused.value) or len(token) < 4


@pytest.mark.anyio
@pytest.mark.parametrize("nonce", [None, "another-sign-in", ""])
async def test_an_id_token_without_this_sign_ins_nonce_is_refused(nonce: str | None) -> None:
    """Issue 62 §8: the authorization request sends a nonce (Canaille refused a request
    without one); the ID token must hold it back (OpenID Connect Core §3.1.3.7)."""
    idp = Idp()
    token = idp.sign(nonce=nonce)  # None: a null nonce, as good as none
    with pytest.raises(ProviderRefused, match="nonce"):
        await answered(idp, token)


def test_the_authorization_request_carries_a_nonce_that_is_not_the_challenge() -> None:
    verifier, challenge = pkce_pair()
    url = authorize_url(client(), "https://gw/cb", "state-1", challenge, nonce_of(verifier))
    sent = parse_qs(urlsplit(url).query)
    assert sent["nonce"] == [nonce_of(verifier)]
    assert sent["nonce"] != [challenge]
    assert nonce_of(verifier) != nonce_of(pkce_pair()[0])  # one per sign-in
