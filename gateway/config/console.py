"""The operator console's settings (docs/operations.md#the-operator-console), in the base
layer; ``gateway.config`` takes them in as ``console``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ConsoleConfig(_Frozen):
    """The operator console (docs/design.md §19): off unless enabled. Signed in with
    ``server.admin_key`` or a tenant's ``policy.approvals.admin_keys``."""

    enabled: bool = False
    session_ttl_s: float = Field(default=8 * 3600.0, ge=60, le=7 * 86400)
    # Visits of its pages per browser address and minute (sign-in attempts among them);
    # its stylesheet and script are not counted (immutable, cached by the browser).
    pages_per_minute: int = Field(default=120, ge=1, le=100_000)
    # A signed-in session's live updates (htmx polls) per minute, counted apart from
    # its pages: a few tabs left open all day stay well inside it.
    polls_per_minute: int = Field(default=240, ge=1, le=100_000)
    # Each tenant's newest runs listed on the Runs page (one store write per request
    # while the console is enabled; 0: none), kept this long after the last one.
    runs_kept: int = Field(default=10_000, ge=0, le=100_000)
    runs_ttl_s: float = Field(default=7 * 86400.0, gt=0, le=90 * 86400)
    # A run's trace id links here (``{trace_id}`` is replaced): a tracing backend's page.
    trace_url: str | None = Field(default=None, pattern=r"^https?://[^\s]*\{trace_id\}[^\s]*$")
