"""Argument schemas a tool brings, judged once and validated with safely (docs/design.md §12).

A schema from an imported document or an MCP server is as hostile as a model's
arguments. ``schema_problem`` is the one judgement every tool's schema passes (inline,
tool files, OpenAPI, MCP) before the registry takes it:

- bounded: at most ``MAX_SCHEMA_BYTES`` of JSON (every model request carries it);
- self-contained: every ``$ref`` is a JSON pointer into the schema itself that names
  something there; no nested ``$id``, no ``$dynamicRef``: nothing can send the
  validator to the network or the disk, and nothing left unresolved fails at call time;
- linear: every ``pattern`` and ``patternProperties`` key compiles in RE2, and
  ``SafeValidator`` runs them there, so no argument can make a match backtrack;
- valid JSON Schema (draft 2020-12) with ``"type": "object"`` at the top.

``SafeValidator`` is Draft 2020-12 with the regex keywords on RE2 and a registry that
refuses every retrieval.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any

import orjson
import re2
from jsonschema import validators
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.protocols import Validator
from referencing import Registry, Resource
from referencing.exceptions import NoSuchResource

from .jsonio import dumps

MAX_SCHEMA_BYTES = 64 * 1024

# Keywords whose value is a schema, a list of schemas or a map of schemas: the walk
# follows these and nothing else (an "enum" or "default" value is data, not schema).
_ONE = (
    "items",
    "not",
    "additionalProperties",
    "additionalItems",
    "contains",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
)
_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_UNSUPPORTED = ("$dynamicRef", "$recursiveRef")
# ECMA-262's \uXXXX (JSON Schema's regex dialect), which RE2 writes \x{XXXX}; an escaped
# backslash before it is kept.
_ECMA_UNICODE = re.compile(r"(?<!\\)((?:\\\\)*)\\u([0-9a-fA-F]{4})")


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is our message, not a line on stderr
    return options


_RE2_OPTIONS = _options()


@functools.lru_cache(maxsize=4096)
def linear_pattern(pattern: str) -> Any:
    """``pattern`` compiled in RE2 (matching in time linear in the text); ``re2.error``
    when RE2 cannot run it (look-around, back-references)."""
    return re2.compile(_ECMA_UNICODE.sub(r"\1\\x{\2}", pattern), _RE2_OPTIONS)


def _search(pattern: str, text: str) -> bool:
    return linear_pattern(pattern).search(text) is not None


# The regex keywords of Draft 2020-12, as jsonschema writes them, on RE2.


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = [
        key
        for key in instance
        if key not in properties and not any(_search(p, key) for p in patterns)
    ]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        listed = ", ".join(repr(extra) for extra in sorted(extras))
        verb = "was" if len(extras) == 1 else "were"
        yield ValidationError(f"Additional properties are not allowed ({listed} {verb} unexpected)")


SafeValidator: type[Validator] = validators.extend(  # type: ignore[no-untyped-call]
    validators.Draft202012Validator,
    {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    },
)


def _refuse(uri: str) -> Resource[Any]:
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]


# Resolution never leaves the schema: anything not in it is unresolvable.
NO_RETRIEVAL: Registry[Any] = Registry(retrieve=_refuse)  # type: ignore[call-arg]


def follow_pointer(root: Any, ref: str) -> tuple[bool, Any]:
    """Whether a local reference (``#`` or ``#/a/b``) names something in ``root``, and
    what."""
    value = root
    for raw in ref[2:].split("/") if ref != "#" else []:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return False, None
    return True, value


class _Walk:
    """Every schema node reachable from the root (through keywords and references),
    each checked once."""

    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root
        self.nodes: list[tuple[tuple[str, ...], dict[str, Any]]] = []  # (where, node)
        self.seen: set[int] = set()
        self.patterns: set[str] = set()
        self.unevaluated = False

    def schema(self, node: Any, depth: int = 0, where: tuple[str, ...] = ()) -> str | None:
        if not isinstance(node, dict) or id(node) in self.seen:
            return None
        self.seen.add(id(node))
        self.nodes.append((where, node))
        problem = self._keywords(node, depth)
        if problem is not None:
            return problem
        for step, child in self._children(node):
            problem = self.schema(child, depth + 1, (*where, *step))
            if problem is not None:
                return problem
        return None

    def _keywords(self, node: dict[str, Any], depth: int) -> str | None:
        for keyword in _UNSUPPORTED:
            if keyword in node:
                return f"{keyword} is not supported"
        if "$id" in node and depth > 0:
            return "$id inside the schema is not supported (references stay in the schema)"
        if "unevaluatedProperties" in node:
            self.unevaluated = True
        if isinstance(node.get("pattern"), str):
            self.patterns.add(node["pattern"])
        if isinstance(node.get("patternProperties"), dict):
            self.patterns.update(node["patternProperties"])
        ref = node.get("$ref")
        if ref is None:
            return None
        if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
            return f"$ref {ref!r} points outside the schema (only '#/…' references are kept)"
        found, target = follow_pointer(self.root, ref)
        if not found:
            return f"$ref {ref!r} names nothing in the schema"
        return self.schema(target, depth + 1, tuple(ref[2:].split("/")) if ref != "#" else ())

    @staticmethod
    def _children(node: dict[str, Any]) -> Iterator[tuple[tuple[str, ...], Any]]:
        for keyword in _ONE:
            value = node.get(keyword)
            if isinstance(value, dict):
                yield (keyword,), value
        for keyword in _LISTS:
            value = node.get(keyword)
            if isinstance(value, list):
                yield from (((keyword, str(i)), item) for i, item in enumerate(value))
        for keyword in _MAPS:
            value = node.get(keyword)
            if isinstance(value, dict):
                yield from (((keyword, str(k)), item) for k, item in value.items())


def _shallow(node: dict[str, Any]) -> dict[str, Any]:
    """``node`` with every subschema the walk visits on its own replaced by ``{}``."""
    out = dict(node)
    for keyword in _ONE:
        if isinstance(out.get(keyword), dict):
            out[keyword] = {}
    for keyword in _LISTS:
        if isinstance(out.get(keyword), list):
            out[keyword] = [{} if isinstance(x, dict) else x for x in out[keyword]]
    for keyword in _MAPS:
        value = out.get(keyword)
        if isinstance(value, dict):
            stubbed = {k: {} if isinstance(v, dict) else v for k, v in value.items()}
            if keyword != "patternProperties":  # only its keys are judged (as regexes)
                # One stub stands for all: a name here is any string to the metaschema.
                kept = [(k, v) for k, v in stubbed.items() if v != {}]
                stubbed = dict(kept or list(stubbed.items())[:1])
            out[keyword] = stubbed
    return out


# Annotations the metaschema asks only to be strings: a node's shape is keyed without
# their text, so the same shape with other words is judged once.
_ANNOTATIONS = ("description", "title", "$comment")


def _metaschema_problem(nodes: list[tuple[tuple[str, ...], dict[str, Any]]]) -> str | None:
    """Each node checked against the Draft 2020-12 metaschema on its own, its
    subschemas stubbed out (they are nodes too), and each distinct shape once, across
    every schema this process judges: the metaschema judges a schema node by node, and
    a catalog's thousands of tools, like inlined references, repeat the same few shapes
    (checking a whole tree at once costs ~0.5 ms a node, a shape ~3 ms)."""
    shapes: dict[bytes, tuple[str, ...]] = {}
    for where, node in nodes:
        shallow = _shallow(node)
        for keyword in _ANNOTATIONS:
            if isinstance(shallow.get(keyword), str):
                shallow[keyword] = ""
        shapes.setdefault(orjson.dumps(shallow, option=orjson.OPT_SORT_KEYS), where)
    for shape, where in shapes.items():
        problem = _shape_problem(shape)
        if problem is not None:
            path, message = problem
            return f"invalid JSON Schema at {'/'.join([*where, *path]) or '(root)'}: {message}"
    return None


@functools.lru_cache(maxsize=4096)
def _shape_problem(shape: bytes) -> tuple[tuple[str, ...], str] | None:
    """What the metaschema finds wrong with one node's shape (its JSON), or None."""
    try:
        SafeValidator.check_schema(orjson.loads(shape))
    except SchemaError as exc:
        return tuple(str(p) for p in exc.path), exc.message
    return None


def schema_problem(schema: Any) -> str | None:
    """Why a tool's argument schema cannot be used (see the module's list), or None."""
    if not isinstance(schema, dict):
        return "the parameters schema is not an object"
    try:
        size = len(dumps(schema))
    except (TypeError, ValueError):  # orjson: nested past its depth, or not JSON
        return "the parameters schema nests too deep or is not JSON"
    if size > MAX_SCHEMA_BYTES:
        return (
            f"the parameters schema is {size} bytes of JSON, over the limit of {MAX_SCHEMA_BYTES}"
        )
    walk = _Walk(schema)
    try:
        problem = walk.schema(schema)
    except RecursionError:
        return "the parameters schema nests too deep"
    if problem is not None:
        return problem
    if walk.unevaluated and walk.patterns:
        return "unevaluatedProperties beside patterns is not supported"
    for pattern in sorted(walk.patterns):
        try:
            linear_pattern(pattern)
        except re2.error as exc:
            reason = exc.args[0] if exc.args else "refused"
            reason = reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)
            return f"pattern {pattern[:80]!r} cannot run in linear time ({reason})"
    try:
        problem = _metaschema_problem(walk.nodes)
    except RecursionError:
        return "the parameters schema nests too deep"
    if problem is not None:
        return problem
    if schema.get("type", "object") != "object":
        return 'the parameters schema must have "type": "object"'
    return None
