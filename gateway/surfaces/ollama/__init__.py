"""Ollama's API as a surface: ``POST /api/chat`` and the routes its clients probe
(docs/ollama.md)."""
