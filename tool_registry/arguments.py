"""The arguments a model writes: parsing, scalar coercion and JSON Schema validation."""

from __future__ import annotations

import math
import re
from typing import Any

import re2
from jsonschema.exceptions import ValidationError
from referencing.exceptions import Unresolvable

from .errors import ToolArgumentsInvalid
from .jsonio import JSONDecodeError, canonical, loads_exact
from .quick_check import quick_check
from .schemas import NO_RETRIEVAL, SafeValidator

_INTEGER = re.compile(r"^[+-]?\d+$")
_MAX_REPORTED_ERRORS = 3


def parse_arguments(raw: str | None) -> dict[str, Any]:
    """Parse the JSON object a model wrote; an empty string means no arguments."""
    if raw is None or not raw.strip():
        return {}
    try:
        value = loads_exact(raw)
    except JSONDecodeError as exc:
        raise ToolArgumentsInvalid(f"arguments are not valid JSON: {exc.msg} at {exc.pos}") from exc
    if not isinstance(value, dict):
        raise ToolArgumentsInvalid("arguments must be a JSON object")
    return value


def _types(schema: dict[str, Any]) -> set[str]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return {k for k in kind if isinstance(k, str)}
    return set()


def _coerce_scalar(value: str, types: set[str]) -> Any:
    text = value.strip()
    if "integer" in types and _INTEGER.match(text):
        return int(text)
    if "number" in types:
        if _INTEGER.match(text):
            return int(text)  # digit for digit, however long
        try:
            number = float(text)
        except ValueError:
            return value
        return number if math.isfinite(number) else value  # "nan" stays a string
    if "boolean" in types and text.lower() in ("true", "false"):
        return text.lower() == "true"
    return value


def coerce(value: Any, schema: Any) -> Any:
    """Convert strings to the scalar the schema clearly asks for ("5" → 5, "true" → True).

    Only where the schema's type is unambiguous: a property that also admits a string
    is left alone. Objects and arrays are walked through ``properties`` and ``items``.
    """
    if not isinstance(schema, dict):
        return value
    types = _types(schema)
    if isinstance(value, str):
        if types and "string" not in types:
            return _coerce_scalar(value, types)
        return value
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        return {k: coerce(v, properties.get(k)) for k, v in value.items()}
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [coerce(v, schema["items"]) for v in value]
    return value


class ArgumentValidator:
    """Coerces and validates arguments against one tool's JSON Schema (draft 2020-12).

    The schema is one ``schemas.schema_problem`` passed: validating never retrieves
    anything and runs patterns in RE2. Should validation still fail to run, the call is
    refused with a result for the model, never an exception for the client."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self._schema = schema
        self._validator = SafeValidator(schema, registry=NO_RETRIEVAL)
        self._quick = quick_check(schema)  # a yes at once for the common schemas

    def validate(
        self, arguments: dict[str, Any], bound: frozenset[str] = frozenset()
    ) -> dict[str, Any]:
        """Return the coerced arguments, or raise ``ToolArgumentsInvalid`` naming the problems.

        The message is read by the model: it never quotes a ``bound`` argument's value
        (the gateway filled it from the request, and the model must not learn it).
        """
        try:
            coerced: dict[str, Any] = coerce(arguments, self._schema)
            if self._quick is not None and self._quick(coerced):
                return coerced
            errors = sorted(self._validator.iter_errors(coerced), key=lambda e: e.json_path)
        except (Unresolvable, RecursionError, re2.error) as exc:
            raise ToolArgumentsInvalid(
                "the tool's argument schema cannot be checked "
                f"({type(exc).__name__}); the gateway does not send this call"
            ) from exc
        if errors:
            hidden = [str(coerced[k]) for k in bound if k in coerced and str(coerced[k])]
            shown = "; ".join(
                f"{e.json_path}: {_message(e, bound, hidden)}"
                for e in errors[:_MAX_REPORTED_ERRORS]
            )
            more = len(errors) - _MAX_REPORTED_ERRORS
            suffix = f" (and {more} more)" if more > 0 else ""
            raise ToolArgumentsInvalid(f"arguments do not match the schema: {shown}{suffix}")
        return coerced


def _message(error: ValidationError, bound: frozenset[str], hidden: list[str]) -> str:
    if error.absolute_path and error.absolute_path[0] in bound:
        return "the value the gateway binds here does not match the schema"
    message = error.message
    for value in sorted(hidden, key=len, reverse=True):
        message = message.replace(repr(value), "[bound value]").replace(value, "[bound value]")
    return message


def visible_parameters(schema: dict[str, Any], hidden: set[str]) -> dict[str, Any]:
    """The schema the model sees: ``hidden`` (bound) properties removed."""
    if not hidden:
        return schema
    visible = dict(schema)
    properties = schema.get("properties")
    if isinstance(properties, dict):
        visible["properties"] = {k: v for k, v in properties.items() if k not in hidden}
    required = schema.get("required")
    if isinstance(required, list):
        visible["required"] = [k for k in required if k not in hidden]
    return visible


def canonical_arguments(arguments: dict[str, Any]) -> str:
    """A stable text form of arguments, to recognise the same call twice."""
    return canonical(arguments)
