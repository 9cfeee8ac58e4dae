"""The HTTP surfaces: routes, the request boundary, and the APIs a client speaks over
the engine (chat completions, Responses, MCP, forwarded routes, admin)."""
