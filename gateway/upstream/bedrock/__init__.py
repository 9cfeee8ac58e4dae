"""The ``bedrock`` dialect (docs/design.md §20, docs/bedrock.md): Amazon Bedrock's
Converse API (``Converse``, ``ConverseStream``) on ``bedrock-runtime``. ``codec`` turns
the values into Converse and back, ``client`` signs and sends them and reads the event
stream, ``model`` is one request's model server."""

from __future__ import annotations

from gateway.config import UpstreamConfig
from gateway.ops.metrics import Metrics
from gateway.upstream.bedrock.client import AwsSigner, BedrockClient, api_key, retryable
from gateway.upstream.bedrock.codec import declare
from gateway.upstream.bedrock.model import ConverseModel
from gateway.upstream.exchange import UpstreamClient
from gateway.upstream.port import ModelAsk, Secrets
from gateway.upstream.rounds import Declarations
from gateway.upstream.wire import Wire


class BedrockDialect:
    """Bedrock Converse, through an exchange of its own (SigV4 or an API key, AWS's
    retries) over the shared wire."""

    __slots__ = ("_client", "_declared", "exchange")

    def __init__(
        self,
        wire: Wire,
        trouble: dict[str, str],
        metrics: Metrics | None = None,
        backoff_base_s: float = 0.5,
        secrets: Secrets | None = None,
    ) -> None:
        self.exchange = UpstreamClient(
            wire,
            auth=api_key,
            sign=AwsSigner(secrets),
            retryable=retryable,
            backoff_base_s=backoff_base_s,
            metrics=metrics,
            trouble=trouble,
        )
        self._client = BedrockClient(self.exchange)
        self._declared = Declarations(declare)

    def open(self, ask: ModelAsk) -> ConverseModel:
        return ConverseModel(self._client, ask, self._declared)

    async def probe(self, upstream: UpstreamConfig, timeout_s: float) -> tuple[int, str]:
        """Bedrock's runtime has no listing to ask: a signed ``GET`` of its root, which a
        reachable endpoint answers at once (403 when it refuses the credentials)."""
        return await self.exchange.probe(upstream, "/", timeout_s)
