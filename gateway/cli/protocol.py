"""uvicorn's HTTP protocol, answering requests it cannot parse with OpenAI's envelope.

A request the HTTP parser refuses (a broken request line, a control character in a
header) never reaches the app: uvicorn answers it with a plain-text 400 of its own.
``toolgate serve`` runs this subclass instead, whose 400 carries the same
``{"error": {...}}`` as every other error. It overrides uvicorn's
``send_400_response``; should a later uvicorn drop that method, the plain-text answer
comes back and ``tests/faults`` says so.
"""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from gateway.errors import BadRequest
from tool_registry import dumps

_BODY = dumps(
    BadRequest(
        "The request is not valid HTTP (a malformed request line or header).",
        code="invalid_http",
    ).envelope()
)


class EnvelopeHttpToolsProtocol(HttpToolsProtocol):
    def send_400_response(self, msg: str) -> None:
        body = _BODY
        content = [STATUS_LINE[400]]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend(
            [
                b"content-type: application/json\r\n",
                b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
                b"connection: close\r\n",
                b"\r\n",
                body,
            ]
        )
        self.transport.write(b"".join(content))
        self.transport.close()
