"""Anthropic's Messages API as a surface (``POST /v1/messages``), docs/claude.md."""
