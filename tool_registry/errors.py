"""Errors of the tool registry.

::

    ToolError
    ├── ToolConfigError          a tool definition is invalid (load time)
    ├── ToolNotFound             no tool of that name is available
    ├── ToolArgumentsInvalid     the model's arguments are not JSON or fail the schema
    └── ToolCallFailed           the HTTP call could not be made or did not succeed
        ├── ToolTimeout          it took longer than the tool's timeout
        └── EgressDenied         the destination address is refused by the egress guard

Call-time errors never reach the gateway's client: the executor turns them into an
error result for the model.
"""

from __future__ import annotations


class ToolError(Exception):
    """Base class of every error raised by ``tool_registry``."""


class ToolConfigError(ToolError):
    """A tool definition is invalid."""


class ToolNotFound(ToolError):
    """No tool of that name is available."""


class ToolArgumentsInvalid(ToolError):
    """The arguments the model wrote cannot be used; the message says why."""


class ToolCallFailed(ToolError):
    """The HTTP call could not be made or did not succeed."""


class ToolTimeout(ToolCallFailed):
    """The HTTP call took longer than the tool's timeout."""


class EgressDenied(ToolCallFailed, OSError):
    """The egress guard refused the destination address.

    It is also an ``OSError`` so that it travels through aiohttp's resolver machinery
    and can be recognised again in the exception chain.
    """
