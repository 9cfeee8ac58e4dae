"""Toolgate's registry of HTTP tools, usable as a library on its own.

Define tools (``ToolSpec`` for one HTTP request, ``OpenApiSource`` for a document's
operations), gather them in a ``ToolRegistry``, prepare a model's call
(``Tool.prepare``) and run it (``ToolExecutor.execute``), which always returns a
``ToolResult`` for the model, whatever happened on the wire.
"""

from .arguments import canonical_arguments, parse_arguments
from .client import GuardedTransport, body_chunks, create_tool_transport, send
from .deadline import Deadline
from .definition import NO_EXTRA, Extra, ToolDefinition
from .egress import EgressPolicy, egress_denial, failure_words
from .errors import (
    EgressDenied,
    ExpansionError,
    MissingValue,
    MissingVariable,
    OperationLeftOut,
    RefError,
    ToolArgumentsInvalid,
    ToolCallFailed,
    ToolConfigError,
    ToolError,
)
from .executor import ToolExecutor, origin, read_capped
from .jsonio import canonical, dumps, dumps_each, dumps_text, loads, loads_object
from .logfields import FIELDS
from .redact import Redactor, display_url, url_secrets
from .registry import ToolRegistry, tool_name
from .results import Outcome, ToolResult, error_result
from .retry import Backoff, backoff_delay, retry_after_s, should_retry
from .schemas import linear_pattern
from .search import (
    FIT,
    OFFLOADED_TOOLS,
    QUERY_CHARS,
    SEARCH_TOOL,
    SearchTool,
    ToolIndex,
    definition_bytes,
)
from .sources.fetch import fetch_document, parse_document
from .sources.files import load_yaml, read_bounded
from .sources.mcp import McpServer, McpServerConfig
from .sources.openapi import OpenApiSource, openapi_tools
from .sources.yaml import describe_validation_error, load_tool_file, read_yaml
from .spec import PUBLIC_HEADERS, HttpSpec, ResultSpec, ToolSpec
from .tasks import Chosen, Pick
from .tool import (
    CallContext,
    Effects,
    HttpRunner,
    HttpTool,
    PreparedCall,
    Tool,
    Trust,
    definition_fingerprint,
)
from .transport import AiohttpTimeouts, GatewayTransport, aiohttp_body, map_transport_errors
from .value_type import immutable

__all__ = [
    "FIELDS",
    "FIT",
    "NO_EXTRA",
    "OFFLOADED_TOOLS",
    "PUBLIC_HEADERS",
    "QUERY_CHARS",
    "SEARCH_TOOL",
    "AiohttpTimeouts",
    "Backoff",
    "CallContext",
    "Chosen",
    "Deadline",
    "Effects",
    "EgressDenied",
    "EgressPolicy",
    "ExpansionError",
    "Extra",
    "GatewayTransport",
    "GuardedTransport",
    "HttpRunner",
    "HttpSpec",
    "HttpTool",
    "McpServer",
    "McpServerConfig",
    "MissingValue",
    "MissingVariable",
    "OpenApiSource",
    "OperationLeftOut",
    "Outcome",
    "Pick",
    "PreparedCall",
    "Redactor",
    "RefError",
    "ResultSpec",
    "SearchTool",
    "Tool",
    "ToolArgumentsInvalid",
    "ToolCallFailed",
    "ToolConfigError",
    "ToolDefinition",
    "ToolError",
    "ToolExecutor",
    "ToolIndex",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "Trust",
    "aiohttp_body",
    "backoff_delay",
    "body_chunks",
    "canonical",
    "canonical_arguments",
    "create_tool_transport",
    "definition_bytes",
    "definition_fingerprint",
    "describe_validation_error",
    "display_url",
    "dumps",
    "dumps_each",
    "dumps_text",
    "egress_denial",
    "error_result",
    "failure_words",
    "fetch_document",
    "immutable",
    "linear_pattern",
    "load_tool_file",
    "load_yaml",
    "loads",
    "loads_object",
    "map_transport_errors",
    "openapi_tools",
    "origin",
    "parse_arguments",
    "parse_document",
    "read_bounded",
    "read_capped",
    "read_yaml",
    "retry_after_s",
    "send",
    "should_retry",
    "tool_name",
    "url_secrets",
]
