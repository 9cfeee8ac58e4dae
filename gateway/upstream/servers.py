"""The model port's one factory (docs/design.md §20): a request's ``ModelAsk`` opens a
model server in the dialect its upstream's configuration names (``dialect``)."""

from __future__ import annotations

from collections.abc import Callable

from gateway.config import UpstreamConfig
from gateway.ops.metrics import Metrics
from gateway.upstream.anthropic import AnthropicDialect
from gateway.upstream.bedrock import BedrockDialect
from gateway.upstream.call_ids import StableCallIds
from gateway.upstream.openai import OpenAIDialect
from gateway.upstream.port import Dialect, ModelAsk, OpenedServer, Secrets
from gateway.upstream.wire import Wire

# Every dialect by the name an upstream's ``dialect`` gives (``config.Dialect``): made
# with the shared wire, the shared ``trouble``, the metrics, the retries' backoff and
# where it says the credentials it uses (``Secrets``).
DIALECTS: dict[
    str, Callable[[Wire, dict[str, str], Metrics | None, float, Secrets | None], Dialect]
] = {
    "openai": OpenAIDialect,
    "anthropic": AnthropicDialect,
    "bedrock": BedrockDialect,
}


class ModelServers:
    """Every dialect, over one wire: ``open`` a request's model server, ``probe`` an
    upstream. ``trouble`` says, by upstream name, how its last exchange went when that
    was not an answer (``loading``, ``unavailable``, ``unreachable``)."""

    def __init__(
        self,
        wire: Wire,
        *,
        metrics: Metrics | None = None,
        backoff_base_s: float = 0.5,
        secrets: Secrets | None = None,
    ) -> None:
        self.trouble: dict[str, str] = {}
        self._dialects = {
            name: make(wire, self.trouble, metrics, backoff_base_s, secrets)
            for name, make in DIALECTS.items()
        }
        openai = self._dialects["openai"]
        assert isinstance(openai, OpenAIDialect)
        self.exchange = openai.exchange  # what a request that passes through is sent on

    def dialect(self, upstream: UpstreamConfig) -> Dialect:
        return self._dialects[upstream.dialect]

    def open(self, ask: ModelAsk) -> OpenedServer:
        """The model server of one request (its calls' ids stable where its client
        echoes none)."""
        opened = self.dialect(ask.upstream).open(ask)
        return StableCallIds(opened) if ask.stable_call_ids else opened

    async def probe(self, upstream: UpstreamConfig, timeout_s: float) -> tuple[int, str]:
        return await self.dialect(upstream).probe(upstream, timeout_s)
