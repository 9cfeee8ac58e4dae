"""``POST /v1/chat/completions``: parsing, the legacy ``functions`` shape, rendering and
the chunk writer."""
