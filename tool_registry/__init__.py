"""Toolgate's registry of HTTP tools, usable as a library on its own.

Define tools (``ToolSpec`` for one HTTP request, ``OpenApiSource`` for a document's
operations), gather them in a ``ToolRegistry``, prepare a model's call
(``Tool.prepare``) and run it (``ToolExecutor.execute``), which always returns a
``ToolResult`` for the model, whatever happened on the wire.
"""

from .client import create_tool_transport
from .egress import EgressPolicy
from .errors import (
    EgressDenied,
    ToolArgumentsInvalid,
    ToolCallFailed,
    ToolConfigError,
    ToolError,
    ToolNotFound,
    ToolTimeout,
)
from .executor import ToolExecutor
from .loader import load_tool_file
from .openapi import OpenApiSource, openapi_tools
from .registry import ToolRegistry, tool_name
from .results import Outcome, ToolResult, error_result
from .spec import HttpSpec, ResultSpec, ToolSpec
from .tool import CallContext, HttpTool, PreparedCall, Tool

__all__ = [
    "CallContext",
    "EgressDenied",
    "EgressPolicy",
    "HttpSpec",
    "HttpTool",
    "OpenApiSource",
    "Outcome",
    "PreparedCall",
    "ResultSpec",
    "Tool",
    "ToolArgumentsInvalid",
    "ToolCallFailed",
    "ToolConfigError",
    "ToolError",
    "ToolExecutor",
    "ToolNotFound",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "ToolTimeout",
    "create_tool_transport",
    "error_result",
    "load_tool_file",
    "openapi_tools",
    "tool_name",
]
