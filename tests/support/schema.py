"""Validation against OpenAI's own chat-completion schema."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

VENDORED = Path(__file__).resolve().parent.parent / "spec" / "openai-chat.schema.json"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "spec" / "openai-chat.schema.json"


@cache
def _validator(name: str) -> Draft202012Validator:
    defs = json.loads(VENDORED.read_text())["$defs"]
    return Draft202012Validator({"$defs": defs, "$ref": f"#/$defs/{name}"})


def assert_valid(instance: Any, name: str) -> None:
    """Fail with every schema error if ``instance`` is not a valid ``name``."""
    errors = [f"{e.json_path}: {e.message}" for e in _validator(name).iter_errors(instance)]
    assert not errors, f"not a valid {name}: " + "; ".join(errors[:5])


def assert_valid_completion(body: Any) -> None:
    assert_valid(body, "CreateChatCompletionResponse")


def assert_valid_error(body: Any) -> None:
    assert_valid(body, "ErrorResponse")
