"""Toolgate's ASGI service: an OpenAI-compatible gateway that runs HTTP tools itself."""

from .app import create_app
from .config import GatewayConfig
from .config_loader import load_config
from .errors import ConfigError, GatewayError

__all__ = ["ConfigError", "GatewayConfig", "GatewayError", "create_app", "load_config"]
