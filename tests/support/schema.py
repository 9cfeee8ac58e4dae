"""Validation against OpenAI's own schemas: chat completions and the Responses API."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

SCHEMAS = ("openai-chat.schema.json", "openai-responses.schema.json")
VENDORED = Path(__file__).resolve().parent.parent / "spec"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "spec"


@cache
def _validator(name: str, schema: str) -> Draft202012Validator:
    defs = json.loads((VENDORED / schema).read_text())["$defs"]
    return Draft202012Validator({"$defs": defs, "$ref": f"#/$defs/{name}"})


def assert_valid(instance: Any, name: str, schema: str = SCHEMAS[0]) -> None:
    """Fail with every schema error if ``instance`` is not a valid ``name``."""
    validator = _validator(name, schema)
    errors = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(instance)]
    assert not errors, f"not a valid {name}: " + "; ".join(errors[:5])


def assert_valid_response(body: Any, name: str = "Response") -> None:
    """A Responses API object: ``Response``, ``ResponseStreamEvent``, ``ErrorResponse``…"""
    assert_valid(body, name, SCHEMAS[1])


def assert_valid_completion(body: Any) -> None:
    assert_valid(body, "CreateChatCompletionResponse")


def assert_valid_error(body: Any) -> None:
    assert_valid(body, "ErrorResponse")
