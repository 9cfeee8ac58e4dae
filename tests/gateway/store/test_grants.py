"""Users' grants (docs/design.md §18) on every backend: sealed at rest (the store never
holds a token in the clear), bound to tenant, user and connection (a sealed grant
moved does not open), readable across a key rotation (and sealed again under the new
key), listed without tokens, and refreshed once however many replicas ask at once."""

from __future__ import annotations

import asyncio
import base64
import os
from typing import Any

import pytest

from gateway.config import GrantsConfig
from gateway.store import GuardedStore, Keys
from gateway.store.grants import Grant, GrantStore, GrantUnreadable, Sealer

pytestmark = pytest.mark.anyio

TOKEN = "at-CANARY-secret-access-token"
REFRESH = "rt-CANARY-secret-refresh-token"


def key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def config(*keys: tuple[str, str], **extra: Any) -> GrantsConfig:
    listed = [{"id": kid, "key": value} for kid, value in keys]
    return GrantsConfig.model_validate({"keys": listed, **extra})


OLD, NEW = ("old", key()), ("new", key())
GRANT = Grant("github", TOKEN, REFRESH, 2_000_000_000.0, ("repo", "read:user"))


async def raw(store: GuardedStore, keys: Keys, tenant: str) -> list[bytes]:
    """Every value the store holds for ``tenant``'s grants, as stored."""
    vault = GrantStore(store, keys, config(NEW))
    found = []
    for user in ("alice", "bob"):
        found += list((await store.fields(vault._key(tenant, user))).values())
    return found


async def test_a_grant_is_kept_sealed_and_read_back(backend: tuple[GuardedStore, Keys]) -> None:
    store, keys = backend
    vault = GrantStore(store, keys, config(NEW))
    await vault.put("t", "alice", GRANT)
    assert await vault.get("t", "alice", "github") == GRANT
    assert await vault.get("t", "bob", "github") is None  # another user's is not theirs
    assert await vault.get("u", "alice", "github") is None  # nor another tenant's
    [stored] = await raw(store, keys, "t")
    assert TOKEN.encode() not in stored
    assert REFRESH.encode() not in stored
    assert b"repo" not in stored  # scopes too
    assert TOKEN not in repr(GRANT)
    assert REFRESH not in repr(GRANT)
    assert await vault.all("t", "alice") == [GRANT]
    assert GRANT.public() == {
        "connection": "github",
        "scopes": ["repo", "read:user"],
        "expires_at": 2_000_000_000.0,
    }
    await vault.forget("t", "alice", "github")
    assert await vault.all("t", "alice") == []


async def test_a_sealed_grant_moved_elsewhere_does_not_open(
    backend: tuple[GuardedStore, Keys],
) -> None:
    store, keys = backend
    vault = GrantStore(store, keys, config(NEW))
    await vault.put("t", "alice", GRANT)
    [stolen] = await raw(store, keys, "t")
    await store.field_put(vault._key("t", "bob"), "github", stolen, 60)  # bob's place
    await store.field_put(vault._key("t", "alice"), "gitlab", stolen, 60)  # another name
    assert await vault.get("t", "bob", "github") is None
    assert await vault.get("t", "alice", "gitlab") is None
    assert await vault.all("t", "alice") == [GRANT]


async def test_a_key_rotation_keeps_every_grant(backend: tuple[GuardedStore, Keys]) -> None:
    store, keys = backend
    await GrantStore(store, keys, config(OLD)).put("t", "alice", GRANT)
    rotated = GrantStore(store, keys, config(NEW, OLD))  # the new key first
    assert await rotated.get("t", "alice", "github") == GRANT
    # Read once, it was sealed again under the new key: the old one may now go.
    assert await GrantStore(store, keys, config(NEW)).get("t", "alice", "github") == GRANT
    # A key left out too soon: the grant does not open (logged), nothing breaks.
    assert (
        await GrantStore(store, keys, config(("other", key()))).get("t", "alice", "github") is None
    )


async def test_one_refresh_at_a_time_across_replicas(backend: tuple[GuardedStore, Keys]) -> None:
    store, keys = backend
    replicas = [GrantStore(store, keys, config(NEW)) for _ in range(2)]
    await replicas[0].put("t", "alice", GRANT)
    made: list[str] = []

    async def refresh(old: Grant) -> Grant:
        made.append(old.access_token)
        await asyncio.sleep(0.1)  # the provider takes its time
        return Grant("github", "at-2", "rt-2", 2_100_000_000.0, old.scopes)

    results = await asyncio.gather(
        *(replicas[i % 2].refreshed("t", "alice", GRANT, refresh, poll_s=0.01) for i in range(8))
    )
    assert made == [TOKEN]  # the provider saw one refresh, with the old token
    assert {r.access_token if r else None for r in results} == {"at-2"}
    assert (await replicas[1].get("t", "alice", "github")).access_token == "at-2"  # type: ignore[union-attr]


async def test_a_refresh_that_fails_lets_go(backend: tuple[GuardedStore, Keys]) -> None:
    store, keys = backend
    vault = GrantStore(store, keys, config(NEW))
    await vault.put("t", "alice", GRANT)

    async def failing(old: Grant) -> Grant:
        raise RuntimeError("the provider said no")

    with pytest.raises(RuntimeError):
        await vault.refreshed("t", "alice", GRANT, failing)

    async def working(old: Grant) -> Grant:
        return Grant("github", "at-3")

    fresh = await vault.refreshed("t", "alice", GRANT, working)  # not locked out
    assert fresh is not None
    assert fresh.access_token == "at-3"


def test_a_sealed_grant_that_was_altered_does_not_open() -> None:
    sealer = Sealer([("k", os.urandom(32))])
    sealed = sealer.seal(b"plain", b"bound")
    assert sealer.open(sealed, b"bound") == (b"plain", False)
    flipped = sealed.replace(sealed[-8:-7], b"A" if sealed[-8:-7] != b"A" else b"B")
    for bad in (flipped, b"not json", b'{"v": 9}', sealed.replace(b'"k"', b'"x"')):
        with pytest.raises(GrantUnreadable):
            sealer.open(bad, b"bound")
    with pytest.raises(GrantUnreadable):
        sealer.open(sealed, b"another binding")


def test_a_replaced_key_is_told_from_an_altered_grant() -> None:
    """The bytes of a key replaced under the same id are not tampering: the reason
    says which it is, and an operator can act on it."""
    before, after = Sealer([("k", os.urandom(32))]), Sealer([("k", os.urandom(32))])
    sealed = before.seal(b"plain", b"bound")
    with pytest.raises(GrantUnreadable, match="another key of the id 'k'") as replaced:
        after.open(sealed, b"bound")
    assert "altered" not in str(replaced.value)
    with pytest.raises(GrantUnreadable, match="altered, or sealed for another user"):
        before.open(sealed, b"another binding")
    unchecked = sealed.replace(b'"check":', b'"older":')  # sealed before checks were kept
    with pytest.raises(GrantUnreadable, match="that key's bytes changed, or the grant"):
        after.open(unchecked, b"bound")
    assert before.open(unchecked, b"bound") == (b"plain", False)


def test_keys_must_be_thirty_two_bytes_with_distinct_ids() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        config(("a", base64.b64encode(b"short").decode()))
    with pytest.raises(ValueError, match="base64"):
        config(("a", "not base64 at all!"))
    with pytest.raises(ValueError, match="same id"):
        config(("a", key()), ("a", key()))


async def test_a_lock_is_released_by_its_holder_only(backend: tuple[GuardedStore, Keys]) -> None:
    """A refresh that outlived its lock does not release the next holder's."""
    store, keys = backend
    lock = f"{keys.prefix}lock"
    assert await store.put_new(lock, b"first", 60)
    assert not await store.delete_if(lock, b"second")  # not second's to release
    assert await store.get(lock) == b"first"
    assert await store.delete_if(lock, b"first")
    assert await store.get(lock) is None
    assert not await store.delete_if(lock, b"first")  # gone already
