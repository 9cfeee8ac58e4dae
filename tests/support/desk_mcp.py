"""An MCP server over stdio, built with the official SDK, for clients that start their
own (Codex CLI's ``mcp_servers``): two desk tools, whose calls are written to the
file named by ``DESK_LOG`` so a test sees what ran."""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer

app = MCPServer("desk")


def _log(line: str) -> None:
    path = os.environ.get("DESK_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(line + "\n")


@app.tool()
def open_drawer(which: str) -> str:
    """Open a drawer of the user's desk."""
    _log(f"open_drawer {which}")
    return f"the {which} drawer is open: it holds a key"


@app.tool()
def water_plants(amount_ml: int) -> str:
    """Water the office plants."""
    _log(f"water_plants {amount_ml}")
    return f"watered with {amount_ml} ml"


if __name__ == "__main__":
    app.run("stdio")
