"""uvicorn's httptools protocol, with two answers of the gateway's own.

- A request the HTTP parser refuses (a broken request line, a control character in a
  header) never reaches the app: uvicorn answers it with a plain-text 400 of its own.
  This subclass answers with the same ``{"error": {...}}`` as every other error.
- An offer to switch protocols that the gateway does not take (``Upgrade: h2c``, which
  Java's ``java.net.http`` client sends by default on ``http://``) is served as the
  plain HTTP/1.1 request it also is, body and all, as RFC 9110 §7.8 lets a server that
  ignores the offer do. httptools tells its caller that such a request has no body and
  that the bytes after its head belong to the new protocol (httptools #124, uvicorn
  #2722), so uvicorn would hand the app an empty body. Here the head is parsed again
  without the offer, by a new parser, followed by the bytes that came after it.

uvicorn's methods overridden here (``send_400_response``, ``data_received``,
``on_headers_complete``, ``on_body``, ``on_message_complete``) are internals:
pyproject.toml bounds uvicorn to the releases ``tests/faults`` has run them on.
"""

from __future__ import annotations

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from gateway.errors import BadRequest
from tool_registry import dumps

_BODY = dumps(
    BadRequest(
        "The request is not valid HTTP (a malformed request line or header).",
        code="invalid_http",
    ).envelope()
)

# What an upgrade offer adds to a request: its own header, the HTTP/2 settings that go
# with an h2c offer, and their names in Connection.
_OFFER_HEADERS = frozenset({b"upgrade", b"http2-settings"})


def without_offer(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """``headers`` with the upgrade offer taken out (names lowercased, as uvicorn keeps
    them): no ``Upgrade`` or ``HTTP2-Settings``, and neither named in ``Connection``."""
    kept: list[tuple[bytes, bytes]] = []
    for name, value in headers:
        if name in _OFFER_HEADERS:
            continue
        if name == b"connection":
            tokens = [t.strip() for t in value.split(b",")]
            tokens = [t for t in tokens if t and t.lower() not in _OFFER_HEADERS]
            if not tokens:
                continue
            value = b", ".join(tokens)
        kept.append((name, value))
    return kept


class EnvelopeHttpToolsProtocol(HttpToolsProtocol):
    _declined_upgrade = False

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

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        # What is still to be parsed, the next piece last. A loop, not a call again: a
        # client that sends a thousand offers in one packet costs a thousand passes,
        # not a thousand frames or copies of the packet.
        pieces: list[bytes | memoryview] = [data]
        while pieces:
            piece = pieces.pop()
            try:
                self.parser.feed_data(piece)
            except httptools.HttpParserError:
                self.logger.warning("Invalid HTTP request received.")
                self.send_400_response("Invalid HTTP request received.")
                return
            except httptools.HttpParserUpgrade as upgrade:
                if not self._declined_upgrade:
                    if self._should_upgrade():
                        self.handle_websocket_upgrade()
                    else:  # CONNECT: uvicorn's own answer, which serves no tunnel either
                        self._unsupported_upgrade_warning()
                    return
                pieces.append(memoryview(piece)[upgrade.args[0] :])
                pieces.append(self._head_again())

    def on_headers_complete(self) -> None:
        # An offer (not CONNECT, whose request target is no path) the gateway does not
        # take: wait for the parser to give back the bytes after the head.
        parser = self.parser
        self._declined_upgrade = (
            parser.should_upgrade()
            and parser.get_method() != b"CONNECT"
            and not self._should_upgrade()
        )
        if not self._declined_upgrade:
            super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._declined_upgrade:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self._declined_upgrade:
            super().on_message_complete()

    def _head_again(self) -> bytes:
        """The declined request's head without the offer, for a new parser (made here)
        to read before the bytes that came after it: its body, and whatever the client
        sent next."""
        self._declined_upgrade = False
        version = self.parser.get_http_version().encode("ascii")
        head = [self.parser.get_method(), b" ", self.url, b" HTTP/", version, b"\r\n"]
        for name, value in without_offer(self.headers):
            head += [name, b": ", value, b"\r\n"]
        head.append(b"\r\n")
        self.parser = httptools.HttpRequestParser(self)
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        return b"".join(head)
