"""JSON log lines: one per request (``gateway.access``), and structured warnings."""

from __future__ import annotations

import logging
import time
from typing import Any

from gateway.ops.log_context import context_fields
from gateway.ops.redaction import forget_links_text
from tool_registry import FIELDS, Redactor, dumps_text

__all__ = ["FIELDS", "JsonFormatter", "configure_logging"]


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "message", …fields}`` on one line, configured secrets
    redacted (tracebacks included)."""

    def __init__(self, redactor: Redactor | None = None) -> None:
        super().__init__()
        self._redactor = redactor or Redactor(())

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(context_fields())  # the request it was written in, if any
        fields = getattr(record, FIELDS, None)
        if isinstance(fields, dict):
            line.update(fields)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return forget_links_text(self._redactor.text(dumps_text(line)))


def configure_logging(level: str, redactor: Redactor | None = None) -> None:
    """JSON lines on stderr for everything; uvicorn's own access log is off (ours is
    ``gateway.access``)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter(redactor))
    # The handler holds the level too: a library that sets its own logger to DEBUG
    # (bm25s does, at import) writes no debug lines into an info log.
    handler.setLevel(level.upper())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    # The HTTP clients' and the MCP SDK's own lines ("HTTP Request: POST …", a session
    # manager starting) are one per call: their warnings and errors only, unless the
    # gateway logs at debug.
    quiet = "DEBUG" if level.upper() == "DEBUG" else "WARNING"
    for name in ("httpx", "httpx2", "mcp", "bm25s"):
        logging.getLogger(name).setLevel(quiet)
