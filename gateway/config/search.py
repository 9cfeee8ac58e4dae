"""The configuration of tool search (docs/design.md §17, docs/tools.md): how many tools
a round offers when there are too many to offer them all, and the embeddings model that
weighs meaning beside words. Part of ``gateway.config`` (which re-exports every name),
kept apart as one subject."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SearchMode = Literal["off", "auto", "on"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EmbeddingsConfig(_Frozen):
    """Tool search's dense vectors (docs/tools.md, "Tool search"): ``model`` on the
    ``upstream`` named (an ``openai`` dialect one's ``/v1/embeddings``; the first such
    upstream when unnamed). A request's vectors are one call of at most ``timeout_ms``;
    the catalog's are computed in batches of ``batch``, each of at most
    ``catalog_timeout_s`` (a CPU embedder takes minutes for a large batch), and kept in
    the store."""

    model: str = Field(min_length=1, max_length=256)
    upstream: str | None = None
    timeout_ms: int = Field(default=300, ge=10, le=60_000)
    batch: int = Field(default=64, ge=1, le=2048)
    catalog_timeout_s: float = Field(default=600.0, gt=0, le=7200)


class ToolSearchConfig(_Frozen):
    """Tool search (docs/design.md §17): with many server tools in play, a round offers the
    ``always`` tools, the ``preselect`` best matches for the conversation (and
    ``per_part`` more for each further part of the request) and a search function; what
    a search finds (``search_limit`` tools unless it asks for fewer or more) is offered
    from the next round on, ``max_loaded`` at most in a round. A tenant's settings win
    over the gateway's, field by field; ``embeddings`` are the gateway's alone."""

    mode: SearchMode = "auto"  # auto: on when more than ``auto_above`` tools are in play
    auto_above: int = Field(default=32, ge=0, le=1_000_000)
    preselect: int = Field(default=10, ge=0, le=256)
    per_part: int = Field(default=4, ge=0, le=256)
    always: tuple[str, ...] = ()  # globs of names, or of sources (mcp:*)
    max_loaded: int = Field(default=32, ge=1, le=1024)
    search_limit: int = Field(default=8, ge=1, le=1024)
    embeddings: EmbeddingsConfig | None = None

    def under(self, tenant: ToolSearchConfig | None) -> ToolSearchConfig:
        """These settings with the fields ``tenant`` sets in their place."""
        if tenant is None or not tenant.model_fields_set:
            return self
        return self.model_copy(update={k: getattr(tenant, k) for k in tenant.model_fields_set})
