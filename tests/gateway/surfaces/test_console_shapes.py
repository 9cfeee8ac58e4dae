"""What the console's pages show of a call's arguments (docs/design.md §19): the model's JSON
indented to read; what does not parse as it came; megabytes cut, not parsed."""

from __future__ import annotations

import json

from gateway.surfaces.console.shapes import SHOWN_CHARS, pretty


def test_arguments_are_indented_where_they_parse() -> None:
    assert pretty('{"a": [1, 2]}') == json.dumps({"a": [1, 2]}, indent=2)
    assert pretty({"a": 1}) == '{\n  "a": 1\n}'
    assert pretty("{not json") == "{not json"


def test_megabytes_of_arguments_are_cut() -> None:
    huge = json.dumps({"notes": "<script>" * 200_000})
    shown = pretty(huge)
    assert len(shown) < SHOWN_CHARS + 64
    assert shown.endswith(f"…[{len(huge) - SHOWN_CHARS} more characters]")
    assert len(pretty({"notes": "x" * 200_000})) < SHOWN_CHARS + 64
