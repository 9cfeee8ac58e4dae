from __future__ import annotations

from typing import Any

import pytest

from tool_registry.envsubst import substitute
from tool_registry.errors import MissingVariable

ENV = {"HOST": "db", "EMPTY": "", "PORT": "5432"}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("${HOST}:${PORT}", "db:5432"),
        ("${NOPE:-fallback}", "fallback"),
        ("${EMPTY:-fallback}", "fallback"),
        ("${EMPTY}", ""),
        ("${NOPE:-}", ""),
        ("no variables", "no variables"),
        ({"a": ["${HOST}", 1, True]}, {"a": ["db", 1, True]}),
        ("$HOST stays", "$HOST stays"),
    ],
)
def test_substitute(value: Any, expected: Any) -> None:
    assert substitute(value, ENV) == expected


def test_a_missing_variable_names_itself_and_where() -> None:
    with pytest.raises(MissingVariable) as caught:
        substitute({"tenants": [{"keys": ["${ACME_KEY}"]}]}, ENV)
    assert caught.value.name == "ACME_KEY"
    assert caught.value.path == "tenants[0].keys[0]"
    assert "ACME_KEY is not set" in str(caught.value)
