"""Who is asking, within a tenant (docs/design.md §6, §11, §13, §18).

A caller's identity is its tenant, the end user a verified token names (where the
tenant verifies its users), and the value of every request header some tool binds
(``ToolRegistry.bound_headers``, e.g. ``x-toolgate-user``). Hidden turns, stored
responses and conversations are bound to it: another user of the same tenant neither
continues nor reads them. A bound header sent twice is refused (400): one value is the
one every surface binds, and no layer may pick another.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from starlette.datastructures import Headers

from gateway.errors import BadRequest


def caller_identity(
    tenant: str, headers: Headers, bound_headers: Iterable[str], user: str | None = None
) -> str:
    """The tenant, the verified end user if there is one (docs/design.md §18), and each
    bound header's value (``bound_headers``: lower-case, sorted)."""
    values = [] if user is None else [f"user={user}"]
    for name in bound_headers:
        given = headers.getlist(name)
        if len(given) > 1:
            raise BadRequest(
                f"The header {name!r} is sent {len(given)} times; a header the tools bind "
                "must be sent once.",
                code="duplicate_header",
            )
        values.append(f"{name}={given[0] if given else ''}")
    return "\0".join([tenant, *values])


def owner_of(identity: str, user: str | None) -> str | None:
    """Who alone (besides the operators) may read what a request keeps of its run, its
    trace and recording: its caller, where a user made it (a digest of its identity);
    anyone with the tenant's key, where none did (None)."""
    return owner_digest(identity) if user is not None else None


def owner_digest(identity: str) -> str:
    """What a stored response or conversation keeps of who made it (never the values)."""
    return hashlib.sha256(identity.encode()).hexdigest()[:32]
