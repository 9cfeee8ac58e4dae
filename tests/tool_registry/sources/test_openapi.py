"""The OpenAPI source: realistic 3.0 and 3.1 documents become tools whose schemas are
valid JSON Schema and whose requests carry what the document and the configuration say."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from tool_registry import (
    CallContext,
    HttpTool,
    OpenApiSource,
    Tool,
    ToolArgumentsInvalid,
    ToolConfigError,
    ToolRegistry,
    openapi_tools,
)
from tool_registry.registry import tool_name
from tool_registry.schemas import schema_problem
from tool_registry.sources.fetch import parse_document
from tool_registry.sources.openapi_schema import SchemaResolver

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "openapi"
NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def parameters_of(tool: Tool) -> Mapping[str, Any]:
    """The JSON Schema a model is offered for the tool's arguments."""
    parameters = tool.definition.parameters
    assert parameters is not None
    return parameters


def document(name: str) -> Any:
    return parse_document((FIXTURES / name).read_bytes(), name)


def shop(**options: Any) -> dict[str, HttpTool]:
    source = OpenApiSource(
        spec="shop.yaml",
        prefix="shop_",
        auth={"apiKey": "key-from-config", "bearer": "token-from-config"},
        **options,
    )
    found = openapi_tools(document("shop-3.1.yaml"), source, "shop.yaml")
    return {tool.name: tool for tool in found.tools}


def pets(**options: Any) -> dict[str, HttpTool]:
    source = OpenApiSource(
        spec="https://pets.example.com/specs/openapi.json",
        prefix="pets_",
        auth={"basic": "user:pass-word", "queryKey": "query-key-1"},
        **options,
    )
    found = openapi_tools(document("pets-3.0.json"), source, "pets")
    return {tool.name: tool for tool in found.tools}


def test_every_model_visible_schema_is_valid_json_schema() -> None:
    tools = {**shop(), **pets()}
    assert len(tools) == 10
    registry = ToolRegistry(tools.values())  # names and schemas pass the registry's checks
    for tool in registry:
        assert NAME.match(tool.name)
        Draft202012Validator.check_schema(parameters_of(tool))
        assert tool.source == "openapi"


def test_names_prefix_operation_ids_or_method_and_path_and_shorten_long_ones() -> None:
    names = set(shop())
    assert {"shop_getOrder", "shop_createOrder", "shop_get_orders", "shop_getCategoryTree"} < names
    long = [n for n in names if n.startswith("shop_addNotes")]
    assert len(long) == 1
    assert len(long[0]) == 64
    again = tool_name(
        "shop_", "addNotesToOneOrderOfTheCurrentCustomerWithAVeryLongOperationIdentifierIndeed"
    )
    assert long[0] == again  # stable: the same imported name always maps the same way


def test_operations_that_cannot_be_tools_are_named_with_why() -> None:
    source = OpenApiSource(spec="shop.yaml")
    skipped = openapi_tools(document("shop-3.1.yaml"), source, "shop.yaml").skipped
    assert skipped == [
        "POST /uploads: its request body is multipart/form-data, not JSON",
        "GET /session: needs the cookie parameter 'sid', which tools cannot send",
    ]


def test_path_query_and_header_parameters_and_the_configured_key() -> None:
    tool = shop()["shop_getOrder"]
    parameters = parameters_of(tool)
    assert parameters["required"] == ["orderId", "X-Request-Region"]
    assert "Accept" not in parameters["properties"]  # OpenAPI ignores these header params
    assert "X-Api-Key" not in json.dumps(parameters)  # the model never sees the credential
    arguments = {"orderId": "a/../b", "expand": ["lines", "customer"], "X-Request-Region": "eu"}
    with pytest.raises(ToolArgumentsInvalid, match="'X-Api-Key' was unexpected"):
        tool.prepare(json.dumps({**arguments, "X-Api-Key": "from-the-model"}), _context())
    request = tool.request.build(tool.prepare(json.dumps(arguments), _context()).arguments)
    assert request.url.raw_path == b"/api/v2/orders/a%2F..%2Fb?expand=lines&expand=customer"
    assert request.headers["x-api-key"] == "key-from-config"
    assert request.headers["x-request-region"] == "eu"


def test_an_object_body_sits_beside_the_parameters_without_read_only_fields() -> None:
    tool = shop()["shop_createOrder"]
    parameters = parameters_of(tool)
    assert parameters["required"] == ["customer", "lines"]
    assert "id" not in parameters["properties"]  # readOnly: the server sets it
    line = parameters["properties"]["lines"]["items"]
    assert line["properties"]["price"]["required"] == ["amount", "currency"]  # $ref inlined
    arguments = {"customer": "c1", "lines": [{"sku": "s", "quantity": 2}], "note": None}
    request = tool.request.build(tool.prepare(json.dumps(arguments), _context()).arguments)
    assert request.method == "POST"
    assert json.loads(request.content) == arguments
    assert request.headers["authorization"] == "Bearer token-from-config"  # its own scheme
    assert "x-api-key" not in request.headers


def test_a_body_that_is_not_an_object_is_the_body_argument() -> None:
    tool = next(t for n, t in shop().items() if n.startswith("shop_addNotes"))
    call = tool.prepare('{"orderId": "7", "body": ["first", "second"]}', _context())
    request = tool.request.build(call.arguments)
    assert request.url.path == "/api/v2/orders/7/notes"
    assert json.loads(request.content) == ["first", "second"]


def test_a_json_media_type_other_than_application_json_is_sent_as_it_is() -> None:
    tool = shop()["shop_updateOrder"]
    request = tool.request.build(
        tool.prepare('{"orderId": "1", "note": "n"}', _context()).arguments
    )
    assert request.headers["content-type"] == "application/merge-patch+json"
    assert json.loads(request.content) == {"note": "n"}


def test_a_recursive_schema_is_cut_and_stays_finite() -> None:
    tool = pets()["pets_updatePet"]
    owner = parameters_of(tool)["properties"]["owner"]
    assert "recursive" in owner["properties"]["pets"]["items"]["description"]


def test_openapi_30_dialect_becomes_json_schema() -> None:
    tools = pets()
    properties = parameters_of(tools["pets_updatePet"])["properties"]
    assert properties["weight"] == {"type": "number", "exclusiveMinimum": 0}
    assert properties["tag"] == {"type": ["string", "null"]}
    assert "example" not in properties["name"]
    status = tools["pets_findPetsByStatus"].parameters["properties"]["status"]
    assert status["enum"] == ["available", "sold", None]


def test_a_relative_server_is_taken_against_the_documents_url() -> None:
    tools = pets()
    assert tools["pets_getPetById"].spec.http.url == "https://pets.example.com/v1/pets/{petId}"


def test_a_relative_server_in_a_file_needs_base_url() -> None:
    source = OpenApiSource(spec="pets.json", prefix="pets_")
    found = openapi_tools(document("pets-3.0.json"), source, "pets.json")
    assert not found.tools
    assert all("set base_url" in s for s in found.skipped)
    based = OpenApiSource(spec="pets.json", base_url="http://10.0.0.1:8080/p/")
    urls = {t.spec.http.url for t in openapi_tools(document("pets-3.0.json"), based, "x").tools}
    assert "http://10.0.0.1:8080/p/pets/{petId}" in urls


def test_security_fills_basic_auth_and_query_keys_from_configured_secrets() -> None:
    tools = pets()
    delete = tools["pets_deletePet"]
    request = delete.request.build(delete.prepare('{"petId": 3}', _context()).arguments)
    assert request.headers["authorization"] == "Basic dXNlcjpwYXNzLXdvcmQ="
    find = tools["pets_findPetsByStatus"]
    call = find.prepare('{"status": "sold"}', _context())
    assert find.request.build(call.arguments).url.params.get_list("key") == ["query-key-1"]
    with pytest.raises(ToolArgumentsInvalid):  # the model cannot add a second "key"
        find.prepare('{"key": "model-key"}', _context())


def test_include_and_exclude_select_operations_and_an_unmatched_include_is_an_error() -> None:
    assert set(shop(include=["getOrder", "POST /orders"])) == {"shop_getOrder", "shop_createOrder"}
    assert "shop_getOrder" not in shop(exclude=["shop_get*"])
    with pytest.raises(ToolConfigError, match="include 'nothing_like_this' matches no operation"):
        shop(include=["getOrder", "nothing_like_this"])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"swagger": "2.0", "paths": {}}', "OpenAPI 3.0 or 3.1 is supported, this is swagger 2.0"),
        ('{"openapi": "3.1.0"}', "has no 'paths'"),
        ("[1, 2]", "not an OpenAPI document"),
    ],
)
def test_documents_that_cannot_be_used(text: str, message: str) -> None:
    with pytest.raises(ToolConfigError, match=re.escape(message)):
        openapi_tools(parse_document(text, "doc"), OpenApiSource(spec="doc"), "doc")


def _context() -> CallContext:
    return CallContext("acme")


# Schemas made of references into a random component graph (cycles included): the
# resolver always ends, and what it makes is valid JSON Schema.

_names = st.sampled_from(["A", "B", "C", "D"])
_leaf = st.one_of(
    st.just({"type": "string"}),
    st.just({"type": "integer", "minimum": 0, "exclusiveMinimum": True}),
    st.just({"type": "number", "nullable": True}),
    _names.map(lambda n: {"$ref": f"#/components/schemas/{n}"}),
    st.just({"$ref": "#/components/schemas/Missing"}),
)
_schemas = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.dictionaries(st.sampled_from(["x", "y", "z"]), inner, max_size=3).map(
            lambda p: {"type": "object", "properties": p}
        ),
        inner.map(lambda i: {"type": "array", "items": i}),
        st.lists(inner, min_size=1, max_size=3).map(lambda xs: {"anyOf": xs}),
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(st.fixed_dictionaries({n: _schemas for n in ["A", "B", "C", "D"]}), _schemas, st.booleans())
def test_resolved_schemas_are_finite_and_valid(
    components: dict[str, Any], root: Any, oas30: bool
) -> None:
    resolver = SchemaResolver({"components": {"schemas": components}}, oas30=oas30)
    result = resolver.schema(root)
    Draft202012Validator.check_schema(result)
    assert "$ref" not in json.dumps(result)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=10), st.text(min_size=1, max_size=200))
def test_tool_names_are_always_valid_and_stable(prefix: str, name: str) -> None:
    made = tool_name(prefix, name)
    assert NAME.match(made)
    assert made == tool_name(prefix, name)


# Whole documents, hostile or careless: the source either refuses the document with a
# ToolConfigError or gives tools that pass every registry check.

_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
_parameter = st.fixed_dictionaries(
    {
        "name": st.one_of(st.sampled_from(["id", "x", "q", "X-Trace", "body"]), _text),
        "in": st.sampled_from(["path", "query", "header", "cookie", "body", 7]),
    },
    optional={
        "required": st.booleans(),
        "schema": _schemas,
        "description": _text,
        "content": st.just({"application/json": {"schema": {"type": "object"}}}),
    },
)
_operation: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries(
    {},
    optional={
        "operationId": _text,
        "parameters": st.lists(
            st.one_of(_parameter, st.just({"$ref": "#/components/parameters/P"})), max_size=4
        ),
        "requestBody": st.fixed_dictionaries(
            {
                "content": st.dictionaries(
                    st.sampled_from(["application/json", "text/plain", "application/x+json"]),
                    st.fixed_dictionaries({}, optional={"schema": _schemas}),
                    max_size=2,
                )
            },
            optional={"required": st.booleans()},
        ),
        "security": st.lists(st.dictionaries(st.sampled_from(["k", "b", "x"]), st.just([]))),
        "summary": _text,
    },
)
_documents = st.fixed_dictionaries(
    {
        "openapi": st.sampled_from(["3.0.3", "3.1.0"]),
        "paths": st.dictionaries(
            st.one_of(_text, st.sampled_from(["/a/{id}", "/{x}/{x}", "/ä b/{id}", "/q"])),
            st.dictionaries(st.sampled_from(["get", "post", "put", "trace", "x"]), _operation),
            max_size=4,
        ),
        "components": st.just(
            {
                "schemas": {
                    "A": {"type": "object", "properties": {"a": {"$ref": "#/components/schemas/A"}}}
                },
                "parameters": {"P": {"name": "p", "in": "query", "schema": {"type": "string"}}},
                "securitySchemes": {
                    "k": {"type": "apiKey", "in": "header", "name": "X-K"},
                    "b": {"type": "http", "scheme": "basic"},
                },
            }
        ),
    },
    optional={
        "servers": st.sampled_from(
            [
                [{"url": "https://api.example.com/v1"}],
                [{"url": "https://api.example.com/v1"}],
                [{"url": "/relative"}],
                [{"url": "{s}://h.example.com", "variables": {"s": {"default": "https"}}}],
                [{"url": "ftp://nope"}],
            ]
        )
    },
)


@settings(max_examples=200, deadline=None)
@given(_documents)
def test_any_document_gives_usable_tools_or_a_clear_refusal(document: dict[str, Any]) -> None:
    source = OpenApiSource(
        spec="https://specs.example.com/doc.json", prefix="p_", auth={"k": "key-123456", "b": "u:p"}
    )
    try:
        found = openapi_tools(document, source, "doc")
    except ToolConfigError:
        return
    for tool in found.tools:
        assert NAME.match(tool.name)
        assert schema_problem(parameters_of(tool)) is None
        assert tool.spec.http.url.startswith("https://")


def test_a_yaml_document_with_aliases_is_refused_not_expanded() -> None:
    bomb = b"openapi: 3.1.0\na: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a]\nc: [*b, *b]\n"
    with pytest.raises(ToolConfigError, match="aliases"):
        parse_document(bomb, "doc.yaml")
    assert parse_document(b"openapi: 3.1.0\npaths: {}\n", "doc.yaml") == {
        "openapi": "3.1.0",
        "paths": {},
    }
