"""Errors of the tool registry.

::

    ToolError
    ├── ToolConfigError          a tool definition is invalid (load time)
    │   ├── MissingVariable      a ${VAR} of the configuration is not set and has no default
    │   ├── OperationLeftOut     an imported operation cannot be a tool (it is left out)
    │   └── RefError             an OpenAPI reference that cannot be resolved
    │       └── ExpansionError   inlining the references would pass the document's budget
    ├── ToolArgumentsInvalid     the model's arguments are not JSON or fail the schema
    │   └── MissingValue         a template names a value the call does not have
    └── ToolCallFailed           the HTTP call could not be made or did not succeed
        └── EgressDenied         the destination address is refused by the egress guard

Call-time errors never reach the gateway's client: the executor turns them into an
error result for the model. A timeout is such a result (outcome ``timeout``), never an
exception.
"""

from __future__ import annotations


class ToolError(Exception):
    """Base class of every error raised by ``tool_registry``."""


class ToolConfigError(ToolError):
    """A tool definition is invalid."""


class MissingVariable(ToolConfigError):
    """An environment variable named in the configuration is not set and has no default."""

    def __init__(self, name: str, path: str) -> None:
        super().__init__(name)
        self.name = name
        self.path = path

    def __str__(self) -> str:
        return f"environment variable {self.name} is not set and has no default"


class OperationLeftOut(ToolConfigError):
    """An operation of an imported document cannot be a tool; the message says why.
    The source goes on without it."""


class RefError(ToolConfigError):
    """A reference that cannot be resolved in the document."""


class ExpansionError(RefError):
    """Inlining the references would produce more than the budget allows."""


class ToolArgumentsInvalid(ToolError):
    """The arguments the model wrote cannot be used; the message says why."""


class MissingValue(ToolArgumentsInvalid):
    """A template names a value that is not available."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class ToolCallFailed(ToolError):
    """The HTTP call could not be made or did not succeed."""


class EgressDenied(ToolCallFailed, OSError):
    """The egress guard refused the destination address.

    It is also an ``OSError`` so that it travels through aiohttp's resolver machinery
    and can be recognised again in the exception chain.
    """
