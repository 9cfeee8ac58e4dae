"""Imported documents and schemas are hostile input (issue 19): loading them is bounded
in size and work, a loaded schema never sends the validator to the network or the disk,
and every pattern runs in linear time. Tables for the rules, hypothesis for the rest;
an audit hook sees every connection and file the validator might open."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tool_registry import OpenApiSource, ToolArgumentsInvalid, ToolConfigError, openapi_tools
from tool_registry.arguments import ArgumentValidator
from tool_registry.schemas import MAX_SCHEMA_BYTES, schema_problem
from tool_registry.sources.fetch import parse_document

# --- Reaching out: every connection, address lookup and non-Python file opened --------

_AUDIT: dict[str, Any] = {"on": False, "seen": []}
_PYTHON = (sys.prefix, sys.base_prefix, str(Path(__file__).resolve().parents[2]))


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _AUDIT["on"]:
        return
    if event in ("socket.connect", "socket.getaddrinfo", "urllib.Request"):
        _AUDIT["seen"].append((event, args))
    elif event == "open" and args and isinstance(args[0], str | bytes | Path):
        path = str(args[0])
        if not path.startswith(_PYTHON):
            _AUDIT["seen"].append((event, path))


sys.addaudithook(_audit)  # process-wide, and inert unless a test switches it on


def validate_watched(schema: dict[str, Any], arguments: dict[str, Any]) -> list[Any]:
    """Validate, and return everything the validator tried to reach meanwhile."""
    validator = ArgumentValidator(schema)
    _AUDIT["seen"], _AUDIT["on"] = [], True
    try:
        validator.validate(arguments)
    except ToolArgumentsInvalid:
        pass
    finally:
        _AUDIT["on"] = False
    return list(_AUDIT["seen"])


def test_the_watch_sees_a_fetch(tmp_path: Path) -> None:
    """The audit hook is not blind: a file read and a connection attempt are seen."""
    (tmp_path / "schema.json").write_text("{}")
    _AUDIT["seen"], _AUDIT["on"] = [], True
    try:
        (tmp_path / "schema.json").read_text()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", 9), timeout=0.2)
    finally:
        _AUDIT["on"] = False
    events = [event for event, _ in _AUDIT["seen"]]
    assert "open" in events
    assert "socket.connect" in events


# --- The rules, from a table ---------------------------------------------------------


def properties(**schemas: Any) -> dict[str, Any]:
    return {"type": "object", "properties": schemas}


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        (properties(a={"$ref": "http://127.0.0.3/x.json"}), "points outside the schema"),
        (properties(a={"$ref": "file:///etc/hostname"}), "points outside the schema"),
        (properties(a={"$ref": "other.json#/a"}), "points outside the schema"),
        (properties(a={"$ref": "#anchor"}), "points outside the schema"),
        (properties(a={"$ref": "#/$defs/missing"}), "names nothing in the schema"),
        (properties(a={"$id": "http://127.0.0.3/", "type": "string"}), "$id inside"),
        (properties(a={"$dynamicRef": "#meta"}), "$dynamicRef is not supported"),
        (
            {
                "type": "object",
                "x-hidden": {"$ref": "http://x/"},
                "properties": {"a": {"$ref": "#/x-hidden"}},
            },
            "points outside the schema",
        ),
        (properties(a={"type": "string", "pattern": "(?=a)b"}), "cannot run in linear time"),
        (properties(a={"type": "string", "pattern": r"(a)\1"}), "cannot run in linear time"),
        ({"type": "object", "patternProperties": {"(?<=x)y": {}}}, "cannot run in linear time"),
        (
            {"type": "object", "patternProperties": {"^a": {}}, "unevaluatedProperties": False},
            "unevaluatedProperties beside patterns",
        ),
        (properties(**{f"p{i}": {"type": "string"} for i in range(4000)}), "over the limit"),
        ({"type": "array"}, '"type": "object"'),
    ],
)
def test_what_a_schema_may_not_be(schema: dict[str, Any], problem: str) -> None:
    found = schema_problem(schema)
    assert found is not None
    assert problem in found


@pytest.mark.parametrize(
    "schema",
    [
        properties(a={"$ref": "#/$defs/A"}) | {"$defs": {"A": {"type": "string"}}},
        properties(node={"$ref": "#/$defs/N"})
        | {"$defs": {"N": {"type": "object", "properties": {"next": {"$ref": "#/$defs/N"}}}}},
        properties(a={"type": "string", "pattern": r"^\d{3}-[a-z]+$"}),
        properties(a={"type": "string", "pattern": r"^\u00e9+$"}),  # ECMA-262 escapes
        {"$id": "https://example.com/tool", **properties(a={"$ref": "#/properties/b"}, b={})},
    ],
)
def test_self_contained_linear_schemas_are_kept(schema: dict[str, Any]) -> None:
    assert schema_problem(schema) is None


def test_a_catastrophic_pattern_is_matched_in_linear_time_everywhere_it_may_stand() -> None:
    nasty = "^(a+)+$"
    schema = {
        "type": "object",
        "properties": {"s": {"type": "string", "pattern": nasty}},
        "patternProperties": {nasty: {"type": "integer"}},
        "additionalProperties": False,
    }
    assert schema_problem(schema) is None
    attack = "a" * 5000 + "!"  # astronomically slow for a backtracking engine
    with pytest.raises(ToolArgumentsInvalid, match="does not match"):
        ArgumentValidator(schema).validate({"s": attack})
    with pytest.raises(ToolArgumentsInvalid, match="Additional properties"):
        ArgumentValidator(schema).validate({attack: 1})
    assert ArgumentValidator(schema).validate({"aaaa": 1}) == {"aaaa": 1}
    assert ArgumentValidator(
        {"type": "object", "properties": {"s": {"pattern": r"^\u00e9$"}}}
    ).validate({"s": "é"}) == {"s": "é"}


def test_a_schema_that_could_not_be_judged_is_refused_at_call_time_not_raised() -> None:
    """Defence in depth: an ``ArgumentValidator`` made straight from a remote schema
    (never through the registry) still refuses to fetch and says so to the model."""
    schema = {"$id": "http://127.0.0.3/", **properties(a={"$ref": "x.json"})}
    assert validate_watched(schema, {"a": 1}) == []
    with pytest.raises(ToolArgumentsInvalid, match="cannot be checked"):
        ArgumentValidator(schema).validate({"a": 1})


# --- Hypothesis: any schema is judged, and a kept one never reaches out ----------------

_refs = st.sampled_from(
    [
        "#/$defs/a",
        "#/$defs/missing",
        "#",
        "#/properties/x",
        "http://127.0.0.3:9/schema.json",
        "https://169.254.169.254/latest/meta-data",
        "file:///etc/hostname",
        "other.json",
        "#anchor",
    ]
)
_patterns = st.sampled_from(["^(a+)+$", "(?=x)", "[a-z]+", r"\u00e9", "(a|aa)*$", "^.*$"])
_leaf = st.one_of(
    st.just({"type": "string"}),
    st.just({"type": "integer", "minimum": 0}),
    _refs.map(lambda ref: {"$ref": ref}),
    _patterns.map(lambda p: {"type": "string", "pattern": p}),
    _refs.map(lambda ref: {"$id": ref, "type": "string"}),
)
_schemas = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.dictionaries(st.sampled_from(["x", "y", "z"]), inner, max_size=3).map(
            lambda props: {"type": "object", "properties": props}
        ),
        inner.map(lambda items: {"type": "array", "items": items}),
        st.lists(inner, min_size=1, max_size=3).map(lambda xs: {"anyOf": xs}),
        st.tuples(_patterns, inner).map(lambda pi: {"patternProperties": {pi[0]: pi[1]}}),
    ),
    max_leaves=10,
)
_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=40)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["x", "y", "z"]), _schemas, max_size=3),
    st.dictionaries(st.sampled_from(["a", "b"]), _schemas, max_size=2),
    st.dictionaries(st.sampled_from(["x", "y", "z", "aaaa!"]), _values, max_size=4),
)
def test_a_kept_schema_never_makes_the_validator_reach_the_network_or_the_disk(
    props: dict[str, Any], defs: dict[str, Any], arguments: dict[str, Any]
) -> None:
    schema = {"type": "object", "properties": props, "$defs": defs}
    if schema_problem(schema) is not None:
        return  # refused whole: the registry leaves such a tool out
    assert validate_watched(schema, arguments) == []


# --- Documents: bounded in size and work ---------------------------------------------


def fan_out(levels: int, width: int) -> dict[str, Any]:
    """Each level's object has ``width`` properties referring to the next level: a few
    hundred bytes that inline into width ** levels schema objects."""
    schemas = {
        f"L{i}": {
            "type": "object",
            "properties": {
                f"p{j}": {"$ref": f"#/components/schemas/L{i + 1}"} for j in range(width)
            },
        }
        for i in range(levels)
    }
    schemas[f"L{levels}"] = {"type": "string"}
    return schemas


def document(paths: dict[str, Any], schemas: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "t", "version": "1"},
        "paths": paths,
        "components": {"schemas": schemas or {}},
    }


def body_of(ref: str) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": {"$ref": ref}}}}


def test_exponential_fan_out_is_refused_naming_the_operation() -> None:
    doc = document(
        {
            "/bomb": {
                "post": {"operationId": "bomb", "requestBody": body_of("#/components/schemas/L0")}
            },
            "/fine": {"get": {"operationId": "fine"}},
        },
        fan_out(levels=8, width=10),
    )
    source = OpenApiSource(spec="doc.json", base_url="https://api.example.com")
    found = openapi_tools(doc, source, "doc.json")
    assert [tool.name for tool in found.tools] == ["fine"]
    assert any(s.startswith("POST /bomb: its schemas expand past") for s in found.skipped)


def test_a_document_past_its_work_budget_leaves_the_rest_out() -> None:
    paths = {
        f"/op{i}": {
            "post": {"operationId": f"op{i}", "requestBody": body_of("#/components/schemas/L0")}
        }
        for i in range(100)
    }
    source = OpenApiSource(spec="doc.json", base_url="https://api.example.com")
    found = openapi_tools(document(paths, fan_out(levels=3, width=10)), source, "doc.json")
    assert 0 < len(found.tools) < 100
    assert any("the document's schemas expand past" in s for s in found.skipped)
    for tool in found.tools:
        assert len(json.dumps(tool.parameters)) <= MAX_SCHEMA_BYTES


def test_an_openapi_source_gives_at_most_max_tools() -> None:
    paths = {f"/op{i}": {"get": {"operationId": f"op{i}"}} for i in range(1500)}
    source = OpenApiSource(spec="doc.json", base_url="https://api.example.com")
    found = openapi_tools(document(paths), source, "doc.json")
    assert len(found.tools) == 256
    assert found.skipped == ["1244 more operations: the source gives at most 256 tools (max_tools)"]
    fewer = openapi_tools(document(paths), source.model_copy(update={"max_tools": 3}), "doc.json")
    assert [tool.name for tool in fewer.tools] == ["op0", "op1", "op2"]


@pytest.mark.parametrize("text", [b"[" * 50_000 + b"]" * 50_000, b"a:\n" + b"  - " * 50_000 + b"x"])
def test_a_document_nested_past_the_parsers_is_a_clear_refusal(text: bytes) -> None:
    with pytest.raises(ToolConfigError, match=r"nests too deep|neither JSON nor YAML"):
        parse_document(text, "doc")


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 12), st.integers(1, 20), st.integers(1, 20))
def test_any_fan_out_loads_with_bounded_output(levels: int, width: int, operations: int) -> None:
    paths = {
        f"/op{i}": {
            "post": {"operationId": f"op{i}", "requestBody": body_of("#/components/schemas/L0")}
        }
        for i in range(operations)
    }
    source = OpenApiSource(spec="doc.json", base_url="https://api.example.com")
    found = openapi_tools(document(paths, fan_out(levels, width)), source, "doc.json")
    assert len(found.tools) + len(found.skipped) >= 1
    for tool in found.tools:
        # What the registry takes is bounded; anything larger it leaves out, named.
        problem = tool.schema_problem
        assert problem is None or "over the limit" in problem


def test_a_document_of_the_wrong_shape_is_a_clear_refusal() -> None:
    """Whatever types a document puts where OpenAPI has others, reading it gives tools,
    names what it left out, or is a ToolConfigError (a failed source, retried): never
    another exception."""
    source = OpenApiSource(
        spec="doc.json", base_url="https://api.example.com", auth={"key": "k-123456789"}
    )
    ok = {"/a": {"get": {"operationId": "a"}}}
    # 'components' a list: the security requirement cannot be filled, the tool stays.
    found = openapi_tools(
        document(ok) | {"components": [1], "security": [{"key": []}]}, source, "d"
    )
    assert [tool.name for tool in found.tools] == ["a"]
    bad_ref = {"/a": {"get": {"parameters": [{"$ref": 3}]}}}
    assert openapi_tools(document(bad_ref), source, "d").skipped == [
        "GET /a: a parameter without a valid name and place: None in None"
    ]
    for paths in ({"/a": {"get": {"parameters": 5}}}, {"/a": {"parameters": 7, "get": {}}}):
        with pytest.raises(ToolConfigError, match=r"^d: not a usable OpenAPI document"):
            openapi_tools(document(paths), source, "d")
