"""Toolgate's ASGI service: an OpenAI-compatible gateway that runs HTTP tools itself."""

from gateway.app import create_app
from gateway.config import GatewayConfig
from gateway.errors import ConfigError, GatewayError
from gateway.runtime.loader import load_config

__all__ = ["ConfigError", "GatewayConfig", "GatewayError", "create_app", "load_config"]
