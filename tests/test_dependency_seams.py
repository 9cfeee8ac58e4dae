"""Where the gateway reaches inside a dependency (issue 63 §4), it says so here, and a
new release that moves what it reaches fails loudly, naming the upstream issue, before
anything else runs against it. Only uvicorn's httptools protocol is overridden
(``gateway/cli/protocol.py``: its 400s as envelopes, and an ``Upgrade: h2c`` offer
served as the HTTP/1.1 request it also is, httptools #124 and uvicorn #2722); starlette
is composed through what it documents (``gateway/app.py``: a plain ASGI front)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.cli.protocol import EnvelopeHttpToolsProtocol

ROOT = Path(__file__).resolve().parent.parent
OVERRIDDEN = (
    "send_400_response",
    "data_received",
    "on_headers_complete",
    "on_body",
    "on_message_complete",
)
CALLED = ("_unset_keepalive_if_required", "_should_upgrade", "handle_websocket_upgrade")
CALLED_TOO = ("_unsupported_upgrade_warning",)
WHY = "gateway/cli/protocol.py must be looked at again (httptools #124, uvicorn #2722)"


def test_what_the_protocol_overrides_is_still_uvicorns_shape() -> None:
    for name in OVERRIDDEN:
        theirs = getattr(HttpToolsProtocol, name, None)
        assert callable(theirs), f"uvicorn {uvicorn.__version__}: no {name}; {WHY}"
        ours = getattr(EnvelopeHttpToolsProtocol, name)
        assert inspect.signature(ours) == inspect.signature(theirs), (name, WHY)
    for name in (*CALLED, *CALLED_TOO):
        assert callable(getattr(HttpToolsProtocol, name, None)), (
            f"uvicorn {uvicorn.__version__}: no {name}; {WHY}"
        )


def test_no_other_module_reaches_inside_starlette_or_uvicorn() -> None:
    """Outside the protocol, nothing imports from a private module of either, or
    subclasses uvicorn."""
    for path in sorted((ROOT / "gateway").rglob("*.py")):
        if path.name == "protocol.py" and path.parent.name == "cli":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                module = node.module
                if module.startswith(("starlette", "uvicorn")):
                    assert not any(part.startswith("_") for part in module.split(".")), (
                        f"{path.relative_to(ROOT)} imports {module}"
                    )
                    assert not module.startswith("uvicorn.protocols"), path
