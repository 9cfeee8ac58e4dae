"""The configuration of end users and what acts as them (docs/design.md §18): how a
tenant verifies its users' tokens, where their grants are kept sealed, and the
connections that get a user's token for a tool. Part of ``gateway.config`` (which
re-exports every name), kept apart as one subject."""

from __future__ import annotations

import base64
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    SecretStr,
    Tag,
    field_validator,
    model_validator,
)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# The JWS algorithms an end-user token may be signed with: asymmetric only (a shared
# secret would let anyone who can verify also sign; ``none`` is never one).
UserTokenAlgorithm = Literal[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"
]


class JwtUsersConfig(_Frozen):
    """End-user tokens a tenant accepts (docs/design.md §18): JWTs from the application's
    identity provider, verified against its JWKS; their ``claim`` names the user."""

    issuer: str = Field(min_length=1)  # the ``iss`` a token must carry
    jwks_url: str | None = None  # else the issuer's discovery document names it
    audience: str = Field(min_length=1)  # the ``aud`` a token must carry
    algorithms: tuple[UserTokenAlgorithm, ...] = ("RS256", "ES256")
    header: str = Field(default="x-toolgate-user-token", pattern=r"^[A-Za-z0-9-]{1,64}$")
    claim: str = Field(default="sub", min_length=1, max_length=64)  # who the user is
    leeway_s: float = Field(default=60.0, ge=0, le=600)  # clock skew allowed
    required: bool = True  # false: a request without a token is anonymous, as before
    jwks_ttl_s: float = Field(default=600.0, gt=0, le=86400)  # keys kept this long
    min_refresh_s: float = Field(default=30.0, ge=0, le=3600)  # an unknown kid's refetch

    @field_validator("issuer", "jwks_url")
    @classmethod
    def _https_or_loopback(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("https://", "http://")):
            raise ValueError("must be an http(s) URL")
        return url


class GrantKey(_Frozen):
    """A key grants are sealed with: its id (kept beside each sealed grant) and 32
    random bytes, base64 (``openssl rand -base64 32``)."""

    id: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,32}$")
    key: SecretStr

    @field_validator("key")
    @classmethod
    def _thirty_two_bytes(cls, key: SecretStr) -> SecretStr:
        try:
            raw = base64.b64decode(key.get_secret_value(), validate=True)
        except ValueError as exc:
            raise ValueError("must be base64") from exc
        if len(raw) != 32:
            raise ValueError(f"must be 32 bytes (AES-256), not {len(raw)}")
        return key


class GrantsConfig(_Frozen):
    """Users' grants (their tokens for connections, docs/design.md §18), sealed at rest:
    the first key seals, every key listed opens (rotate by listing a new key first)."""

    keys: list[GrantKey] = Field(min_length=1)
    ttl_s: float = Field(default=90 * 86400, gt=0, le=400 * 86400)  # since the last write
    refresh_lock_s: float = Field(default=30.0, gt=0, le=300)  # one refresh at a time
    link_ttl_s: float = Field(default=600.0, ge=1, le=3600)  # a connect link opens this soon
    # Visits of the keyless connect pages (a link, the callback) per browser address
    # and minute: the pages are open to anyone, and each may reach a provider.
    pages_per_minute: int = Field(default=30, ge=1, le=10_000)

    @field_validator("keys")
    @classmethod
    def _distinct_ids(cls, keys: list[GrantKey]) -> list[GrantKey]:
        ids = [key.id for key in keys]
        if len(set(ids)) != len(ids):
            raise ValueError("two keys have the same id")
        return keys


_URL = r"^https?://[^\s#]+$"
_ENDPOINT = r"^https?://[^\s?#]+$"


class OAuth2Connection(_Frozen):
    """A way to get a user's token for a service (docs/design.md §18): OAuth 2 authorization
    code with PKCE at the provider's endpoints (given, or read from the ``issuer``'s
    metadata document), refreshed before it expires."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    type: Literal["oauth2"] = "oauth2"
    # How its users know it, on the pages they see and in the answer's link ("GitHub");
    # else its name.
    display_name: str | None = Field(default=None, min_length=1, max_length=64)
    issuer: str | None = Field(default=None, pattern=_ENDPOINT)  # its metadata names the rest
    authorize_url: str | None = Field(default=None, pattern=_URL)
    token_url: str | None = Field(default=None, pattern=_ENDPOINT)
    revoke_url: str | None = Field(default=None, pattern=_ENDPOINT)
    # Origins beside the issuer's that its metadata's endpoints may be on (a provider
    # whose token endpoint is on another host); any other origin is refused.
    endpoint_origins: tuple[str, ...] = ()
    client_id: str = Field(min_length=1, max_length=512)
    client_secret: SecretStr | None = None  # sent to the token endpoint only
    scopes: tuple[str, ...] = ()
    params: dict[str, str] = Field(default_factory=dict)  # more authorize parameters
    refresh_margin_s: float = Field(default=60.0, ge=0, le=3600)  # refresh this early

    @model_validator(mode="after")
    def _endpoints_or_issuer(self) -> OAuth2Connection:
        given = self.authorize_url is not None and self.token_url is not None
        if self.issuer is None and not given:
            raise ValueError("needs an issuer, or both authorize_url and token_url")
        if self.issuer is None and self.endpoint_origins:
            raise ValueError("endpoint_origins is for endpoints an issuer's metadata names")
        return self


class McpConnection(_Frozen):
    """An MCP server that requires authorization, as the MCP specification has it: its
    protected resource metadata names the authorization server, whose metadata names
    the endpoints; the gateway registers itself there (dynamic client registration)
    unless ``client_id`` is given, and asks for tokens for the server (the resource
    indicator), with PKCE."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    type: Literal["mcp"]
    # How its users know it, on the pages they see and in the answer's link ("GitHub");
    # else its name.
    display_name: str | None = Field(default=None, min_length=1, max_length=64)
    url: str = Field(pattern=_URL)  # the MCP server's endpoint: the resource
    client_id: str | None = Field(default=None, min_length=1, max_length=512)
    client_secret: SecretStr | None = None
    scopes: tuple[str, ...] = ()  # else those its resource metadata lists
    # The authorization servers accepted (empty: the one the server names).
    issuers: tuple[str, ...] = ()
    endpoint_origins: tuple[str, ...] = ()
    refresh_margin_s: float = Field(default=60.0, ge=0, le=3600)

    @model_validator(mode="after")
    def _secret_with_id(self) -> McpConnection:
        if self.client_secret is not None and self.client_id is None:
            raise ValueError("client_secret needs the client_id it belongs to")
        return self


class TokenExchangeConnection(_Frozen):
    """A way to get a user's token with no consent round trip (RFC 8693): the verified
    end-user token is exchanged at the provider's token endpoint for one for
    ``audience`` (and ``resource``) and ``scopes``, kept until it expires."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    type: Literal["token_exchange"]
    # How its users know it, on the pages they see and in the answer's link ("GitHub");
    # else its name.
    display_name: str | None = Field(default=None, min_length=1, max_length=64)
    token_url: str = Field(pattern=r"^https?://[^\s?#]+$")
    client_id: str = Field(min_length=1, max_length=512)
    client_secret: SecretStr | None = None  # sent to the token endpoint only
    audience: str | None = None
    resource: str | None = Field(default=None, pattern=r"^https?://[^\s#]+$")
    scopes: tuple[str, ...] = ()
    refresh_margin_s: float = Field(default=60.0, ge=0, le=3600)  # exchange again this early
    # How the verified end-user token is named to the provider (RFC 8693 §3): a JWT, or
    # the provider's own ID or access token, as some providers require.
    subject_token_type: Literal["jwt", "id_token", "access_token"] = "jwt"


def _connection_type(value: object) -> str:
    found = value.get("type", "oauth2") if isinstance(value, dict) else getattr(value, "type", "")
    return str(found)


Connection = Annotated[
    Annotated[OAuth2Connection, Tag("oauth2")]
    | Annotated[TokenExchangeConnection, Tag("token_exchange")]
    | Annotated[McpConnection, Tag("mcp")],
    Discriminator(_connection_type),
]


class AssertedUsersConfig(_Frozen):
    """End users a tenant's own key asserts (docs/design.md §18): a trusted backend holding
    the key names its user in ``header``; the gateway believes it as it believes the
    key. For a key that never sits where users are."""

    header: str = Field(default="x-toolgate-user", pattern=r"^[A-Za-z0-9-]{1,64}$")
    required: bool = True  # false: a request without the header is anonymous


class UsersConfig(_Frozen):
    """How a tenant knows its end users: verified (``jwt``) or asserted by its key."""

    jwt: JwtUsersConfig | None = None
    asserted: AssertedUsersConfig | None = None

    @model_validator(mode="after")
    def _one_way(self) -> UsersConfig:
        if (self.jwt is None) == (self.asserted is None):
            raise ValueError("users: give one of jwt (verified) or asserted (by the key)")
        return self

    @property
    def way(self) -> JwtUsersConfig | AssertedUsersConfig:
        found = self.jwt or self.asserted
        assert found is not None  # the validator holds one
        return found
