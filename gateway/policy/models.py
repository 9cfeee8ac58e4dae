"""Model routing: the name a client asks for → an upstream and the name it knows."""

from __future__ import annotations

from typing import Any

from gateway.config import GatewayConfig, ModelConfig, UpstreamConfig
from gateway.errors import NotFound
from gateway.policy.tenants import Tenant
from tool_registry import immutable


@immutable
class ModelRoute:
    model: ModelConfig
    upstream: UpstreamConfig


LATEST = ":latest"  # an Ollama tag: a model named without a tag is its latest


class ModelRouter:
    def __init__(self, config: GatewayConfig) -> None:
        upstreams = {u.name: u for u in config.upstreams}
        self._routes = {m.name: ModelRoute(m, upstreams[m.upstream]) for m in config.models}

    def route(self, name: str) -> ModelRoute:
        """The route of a model, whoever asks; 404 if unknown."""
        route = self._routes.get(name)
        if route is None:
            raise NotFound(
                f"The model {name!r} does not exist.", param="model", code="model_not_found"
            )
        return route

    def resolve(self, name: str, tenant: Tenant) -> ModelRoute:
        """The route of a model the tenant may use. Another tenant's model is as unknown
        as one that does not exist, on every surface (404 ``model_not_found``, the same
        words: OpenAI's answer), so no tenant learns what another may use."""
        if name not in self._routes and name.endswith(LATEST):  # Ollama's: m:latest is m
            name = name.removesuffix(LATEST)
        route = self._routes.get(name)
        if route is None or name not in tenant.models:
            raise NotFound(
                f"The model {name!r} does not exist.", param="model", code="model_not_found"
            )
        return route

    def describe(self, name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": 0, "owned_by": "toolgate"}

    def listing(self, tenant: Tenant) -> dict[str, Any]:
        """``GET /v1/models``: the tenant's models only."""
        data = [self.describe(name) for name in self._routes if name in tenant.models]
        return {"object": "list", "data": data}
