"""Which request a log line was written in (docs/operations.md#logs): the boundary names
the request for the task that serves it (and the tasks it starts), and every line
written meanwhile — a connection refused, a grant that does not open, a store that
does not answer — carries its ``request_id``, its ``tenant`` once admitted, and its
``user`` (a digest: who it was can be checked, not read) once known.

A ``ContextVar`` is the one kind of module-level state this needs: it is each task's
own, never shared between requests."""

from __future__ import annotations

import hashlib
from contextvars import ContextVar
from typing import Protocol

UNKNOWN = ("", "-", "(none)")  # a tenant not yet admitted


class LogSubject(Protocol):
    """What a line can say of its request (a surface's ``Exchange``)."""

    request_id: str
    tenant: str
    user: str | None


_CURRENT: ContextVar[LogSubject | None] = ContextVar("toolgate_log_subject", default=None)


def serving(subject: LogSubject) -> None:
    """Lines written from here in this task (and tasks it starts) are ``subject``'s:
    to the end of its answer, a stream's too (the server gives each request a task of
    its own; the next request a task serves names itself again)."""
    _CURRENT.set(subject)


def user_digest(user: str) -> str:
    return "u:" + hashlib.sha256(user.encode()).hexdigest()[:16]


def context_fields() -> dict[str, str]:
    """The request's fields for a line written in it (none outside a request)."""
    subject = _CURRENT.get()
    if subject is None:
        return {}
    fields = {"request_id": subject.request_id}
    if subject.tenant not in UNKNOWN:
        fields["tenant"] = subject.tenant
    if subject.user:
        fields["user"] = user_digest(subject.user)
    return fields
