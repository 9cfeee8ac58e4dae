"""The ``anthropic`` dialect (docs/design.md §20, docs/anthropic.md): Anthropic's
Messages API, as api.anthropic.com and the servers that copy it speak it. ``codec``
turns the values into Messages and back, ``client`` sends them, ``model`` is one
request's model server."""

from __future__ import annotations

from gateway.config import UpstreamConfig
from gateway.ops.metrics import Metrics
from gateway.upstream.anthropic.client import MODELS_PATH, AnthropicClient, api_key, retryable
from gateway.upstream.anthropic.codec import declare
from gateway.upstream.anthropic.model import MessagesModel
from gateway.upstream.exchange import UpstreamClient
from gateway.upstream.port import ModelAsk, Secrets
from gateway.upstream.rounds import Declarations
from gateway.upstream.wire import Wire


class AnthropicDialect:
    """Messages servers, through an exchange of their own (their key's headers, their
    retries) over the shared wire."""

    __slots__ = ("_client", "_declared", "exchange")

    def __init__(
        self,
        wire: Wire,
        trouble: dict[str, str],
        metrics: Metrics | None = None,
        backoff_base_s: float = 0.5,
        secrets: Secrets | None = None,  # its key is the configuration's: listed
    ) -> None:
        self.exchange = UpstreamClient(
            wire,
            auth=api_key,
            retryable=retryable,
            backoff_base_s=backoff_base_s,
            metrics=metrics,
            trouble=trouble,
        )
        self._client = AnthropicClient(self.exchange)
        self._declared = Declarations(declare)

    def open(self, ask: ModelAsk) -> MessagesModel:
        return MessagesModel(self._client, ask, self._declared)

    async def probe(self, upstream: UpstreamConfig, timeout_s: float) -> tuple[int, str]:
        return await self.exchange.probe(upstream, MODELS_PATH, timeout_s)
