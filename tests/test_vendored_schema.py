from __future__ import annotations

import pytest

from tests.support.schema import SCHEMAS, SHARED, VENDORED


@pytest.mark.parametrize("schema", SCHEMAS)
def test_the_vendored_openai_schemas_match_the_shared_ones(schema: str) -> None:
    """Tests validate against ``tests/spec``; each must be the contract's own copy."""
    if not SHARED.exists():
        pytest.skip(f"{SHARED} is not beside this checkout")
    assert (VENDORED / schema).read_bytes() == (SHARED / schema).read_bytes()
