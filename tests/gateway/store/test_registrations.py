"""The clients the gateway registered at authorization servers (docs/design.md §18), on
every backend: sealed (the secret never in the clear), bound to connection and server,
and the first replica's registration kept when several register at once."""

from __future__ import annotations

import asyncio
import base64
import os

import pytest

from gateway.config import GrantsConfig
from gateway.store import GuardedStore, Keys
from gateway.store.grants import Sealer
from gateway.store.registrations import Registration, Registrations

pytestmark = pytest.mark.anyio

SECRET = "client-secret-CANARY-registered"


def sealer() -> Sealer:
    key = base64.b64encode(os.urandom(32)).decode()
    return Sealer.of(GrantsConfig.model_validate({"keys": [{"id": "k", "key": key}]}))


async def test_a_registration_is_kept_sealed_and_bound(backend: tuple[GuardedStore, Keys]) -> None:
    store, keys = backend
    registrations = Registrations(store, keys, sealer())
    made = Registration("client-1", SECRET)
    assert await registrations.keep("desk", "https://as.example", made) == made
    assert await registrations.get("desk", "https://as.example") == made
    assert await registrations.get("desk", "https://other.example") is None
    assert await registrations.get("other", "https://as.example") is None
    stored = await store.get(registrations._key("desk", "https://as.example"))
    assert stored is not None
    assert SECRET.encode() not in stored
    assert SECRET not in repr(made)
    # Moved to another connection's key, it does not open.
    await store.put(registrations._key("other", "https://as.example"), stored, 60)
    assert await registrations.get("other", "https://as.example") is None
    await registrations.forget("desk", "https://as.example")
    assert await registrations.get("desk", "https://as.example") is None


async def test_replicas_registering_at_once_all_use_the_first(
    backend: tuple[GuardedStore, Keys],
) -> None:
    store, keys = backend
    replicas = [Registrations(store, keys, sealer_) for sealer_ in [sealer()] * 5]
    kept = await asyncio.gather(
        *(
            r.keep("desk", "https://as.example", Registration(f"client-{i}", None))
            for i, r in enumerate(replicas)
        )
    )
    assert len({k.client_id for k in kept}) == 1
    assert (await replicas[0].get("desk", "https://as.example")) == kept[0]
    await replicas[0].forget("desk", "https://as.example")
