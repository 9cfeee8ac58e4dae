from __future__ import annotations

import pytest

from tests.support.schema import SHARED, VENDORED


def test_the_vendored_openai_schema_matches_the_shared_one() -> None:
    """Tests validate against ``tests/spec``; it must be the contract's own copy."""
    if not SHARED.exists():
        pytest.skip(f"{SHARED} is not beside this checkout")
    assert VENDORED.read_bytes() == SHARED.read_bytes()
