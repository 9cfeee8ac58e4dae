"""The ``openai`` dialect (docs/design.md §20): chat completions, as OpenAI, vLLM,
llama.cpp, Ollama's compatible endpoint and most servers speak it. Its codec is the
values' chat JSON (``gateway.chat_json``) plus a round's request and answers
(``codec``); its client sends them (``client``); ``model.ChatModel`` is one
request's model server."""

from __future__ import annotations

from gateway.chat_json import encode_tool
from gateway.config import UpstreamConfig
from gateway.ops.metrics import Metrics
from gateway.upstream.exchange import UpstreamClient
from gateway.upstream.openai.client import OpenAIClient
from gateway.upstream.openai.model import ChatModel
from gateway.upstream.port import ModelAsk, Secrets
from gateway.upstream.rounds import Declarations
from gateway.upstream.wire import Wire


class OpenAIDialect:
    """Chat-completions servers, through an exchange of their own over the shared wire
    (also what a request that passes through is sent on)."""

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
            wire, backoff_base_s=backoff_base_s, metrics=metrics, trouble=trouble
        )
        self._client = OpenAIClient(self.exchange)
        self._declared = Declarations(encode_tool)  # server tools, once per set

    def open(self, ask: ModelAsk) -> ChatModel:
        return ChatModel(self._client, ask, self._declared)

    async def probe(self, upstream: UpstreamConfig, timeout_s: float) -> tuple[int, str]:
        return await self.exchange.probe(upstream, "/models", timeout_s)
