"""Toolgate's ASGI service: an OpenAI-compatible gateway that runs HTTP tools itself.

A newcomer's glossary (the words the code uses, and OpenAI's where it has one):

- *surface*: an API a client speaks (chat completions, the Responses API, ``/mcp``);
  it decodes its request and encodes the answer (``surfaces/``).
- *round*: one upstream call (a ``CompletionRequest`` in) and its answer (a
  ``Completion``, as OpenAI's chat completion; ``ChoiceDelta``s first when streamed);
  its *turn* is the ``AssistantMessage`` in it; ``HiddenItem``s are the turns and
  tool outputs of the rounds the client does not see; the *history* a model reads
  is ``Message``s (the client's, decoded at its surface's edge, hidden items put
  back).
- *server tool* / *client tool*: a tool the gateway runs / one the client declared
  and runs itself (OpenAI: a function tool); a *hand-back* returns client calls.
- *policy point*: where every verdict on a tool call is made (run, refuse, hold,
  stop: ``policy/point.py``), set once per request; *taint*: untrusted words read in
  a run; a *hold* waits for an approval.
- *ledger*: what a run accumulates — counts, caps, spend, taint, trace lines — owned
  by the engine (``policy/ledger.py``); the *run report*: how a run ended, frozen,
  the one thing read after it (``engine/report.py``), handed out by the request's
  one *end* (``surfaces/request_end.py``).
- *snapshot* / *runtime*: the immutable configuration a request reads once
  (``runtime/``); *tenant*: whom an API key names.
- *write scope*: a request's identity across its retries, under which its writes'
  results are kept (``policy/idempotency.py``, ``store/kept_writes.py``).
- *the one guarded way out*: the transport every outbound call of configuration or
  of a model goes through (``tool_registry.GuardedTransport``).

The layers and their order are in docs/design.md §1; the manual is ``docs/``.
"""

from gateway.app import create_app
from gateway.config import GatewayConfig
from gateway.errors import ConfigError, GatewayError
from gateway.runtime.loader import load_config

__all__ = ["ConfigError", "GatewayConfig", "GatewayError", "create_app", "load_config"]
