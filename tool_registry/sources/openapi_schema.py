"""OpenAPI schemas made into self-contained JSON Schema (draft 2020-12) for a model.

``$ref``s within the document are inlined (a model server cannot follow them); a
reference met again inside itself is cut to ``{}`` with a note, and so is one past a
depth budget, so a recursive schema stays finite. The work of inlining is bounded: an
operation whose schemas expand past ``MAX_OPERATION_NODES`` schema objects, or a
document past ``MAX_DOCUMENT_NODES`` in all, raises ``ExpansionError`` (a few
references fanning out to one another would otherwise expand exponentially). OpenAPI 3.0's
dialect is translated: ``nullable``, boolean ``exclusiveMinimum``/``exclusiveMaximum``,
and its keywords that are not JSON Schema are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tool_registry.errors import ExpansionError, RefError
from tool_registry.schemas import follow_pointer

_MAX_REF_DEPTH = 8  # references inlined inside one another
MAX_OPERATION_NODES = 5_000  # schema objects produced for one operation, at most
MAX_DOCUMENT_NODES = 200_000  # and for a whole document
# OpenAPI 3.0 schema keywords that JSON Schema does not have (or means otherwise).
_OAS30_ONLY = frozenset({"nullable", "discriminator", "xml", "externalDocs", "example"})
_SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SUBSCHEMA = ("items", "not", "additionalProperties", "contains", "if", "then", "else")
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")


def pointer(document: Any, ref: str) -> Any:
    """The value a local reference (``#/a/b``) names in ``document``."""
    if not (ref == "#" or ref.startswith("#/")):
        raise RefError(f"{ref!r} is not in this document (only local references are followed)")
    found, value = follow_pointer(document, ref)
    if not found:
        raise RefError(f"{ref!r} names nothing in the document")
    return value


@dataclass
class SchemaResolver:
    """Resolves references of one document; ``oas30`` selects the 3.0 dialect."""

    document: dict[str, Any]
    oas30: bool
    notes: list[str] = field(default_factory=list)
    _nodes: int = 0  # in the current operation
    _total: int = 0  # in the whole document

    def begin_operation(self) -> None:
        """Start counting one operation's work afresh (the document's goes on)."""
        self._nodes = 0

    def follow(self, value: Any) -> Any:
        """A non-schema object (parameter, request body…) with its ``$ref`` followed."""
        seen: set[str] = set()
        while isinstance(value, dict) and isinstance(value.get("$ref"), str):
            ref = value["$ref"]
            if ref in seen:
                raise RefError(f"{ref!r} refers to itself")
            seen.add(ref)
            value = pointer(self.document, ref)
        return value

    def schema(self, value: Any, *, request: bool = True) -> dict[str, Any]:
        """A self-contained JSON Schema for ``value``. ``request``: properties marked
        ``readOnly`` are left out (the server sets them; a client never sends them)."""
        result = self._convert(value, (), request)
        return result if isinstance(result, dict) else {}

    def _convert(self, value: Any, stack: tuple[str, ...], request: bool) -> Any:
        self._nodes += 1
        self._total += 1
        if self._nodes > MAX_OPERATION_NODES:
            raise ExpansionError(
                f"its schemas expand past {MAX_OPERATION_NODES} schema objects "
                "(references fanning out to one another)"
            )
        if self._total > MAX_DOCUMENT_NODES:
            raise ExpansionError(
                f"the document's schemas expand past {MAX_DOCUMENT_NODES} schema objects in all"
            )
        if isinstance(value, bool):
            return value
        if not isinstance(value, dict):
            return {}
        ref = value.get("$ref")
        if isinstance(ref, str):
            name = ref.rsplit("/", 1)[-1]
            if ref in stack:
                return {"description": f"(a {name}: recursive, not expanded further)"}
            if len(stack) >= _MAX_REF_DEPTH:
                return {"description": f"(a {name}: nested too deep to expand)"}
            try:
                target = pointer(self.document, ref)
            except RefError as exc:
                self.notes.append(str(exc))
                return {}
            resolved = self._convert(target, (*stack, ref), request)
            siblings = {k: v for k, v in value.items() if k != "$ref"}
            if not siblings or not isinstance(resolved, dict):
                return resolved
            # 3.1 allows keywords beside $ref (a description, mostly): both apply.
            extra = self._convert(siblings, stack, request)
            return {"allOf": [resolved, extra]} if extra else resolved
        return self._object(value, stack, request)

    def _object(self, value: dict[str, Any], stack: tuple[str, ...], request: bool) -> Any:
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key in _SUBSCHEMA_MAPS and isinstance(item, dict):
                out[key] = {
                    k: self._convert(v, stack, request)
                    for k, v in item.items()
                    if not (request and key == "properties" and _read_only(self, v))
                }
            elif key in _SUBSCHEMA_LISTS and isinstance(item, list):
                out[key] = [self._convert(v, stack, request) for v in item]
            elif key in _SUBSCHEMA and isinstance(item, dict | bool):
                out[key] = self._convert(item, stack, request)
            elif key == "$schema" or key == "$id":
                continue  # the tool's schema has one dialect, stated by the registry
            elif self.oas30 and key in _OAS30_ONLY:
                continue
            else:
                out[key] = item
        if request and isinstance(out.get("required"), list) and "properties" in out:
            dropped = set(value.get("properties", {})) - set(out["properties"])
            out["required"] = [r for r in out["required"] if r not in dropped]
        _translate_30(value, out, self.oas30)
        if "properties" in out and "type" not in out:
            out["type"] = "object"
        return out


def _read_only(resolver: SchemaResolver, value: Any) -> bool:
    try:
        target = resolver.follow(value)
    except RefError:
        return False
    return isinstance(target, dict) and target.get("readOnly") is True


def _translate_30(original: dict[str, Any], out: dict[str, Any], oas30: bool) -> None:
    """OpenAPI 3.0's schema dialect in JSON Schema terms, in place. Boolean exclusive
    bounds are translated in any document (3.1 documents still carry them, and JSON
    Schema has no boolean form); ``nullable`` only in 3.0 ones."""
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        flag = original.get(exclusive)
        if isinstance(flag, bool):
            del out[exclusive]
            if flag and bound in out:
                out[exclusive] = out.pop(bound)
    if oas30 and original.get("nullable") is True:
        kind = out.get("type")
        if isinstance(kind, str):
            out["type"] = [kind, "null"]
        elif isinstance(kind, list) and "null" not in kind:
            out["type"] = [*kind, "null"]
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
