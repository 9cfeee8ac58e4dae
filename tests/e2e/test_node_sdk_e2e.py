"""The openai Node SDK, unchanged: ``responses.create`` streamed through the gateway,
with a server tool round inside. ``make test`` installs the SDK from
``tests/node/package-lock.json``; without Node.js the test fails saying so, unless
``TOOLGATE_SKIP_NODE=1``."""

from __future__ import annotations

import json
import subprocess

from tests.support.node import NODE_DIR, node
from tests.support.schema import assert_valid_response
from tests.support.scripted import MODEL, TENANT_KEY, Harness, Model

from .test_responses_e2e import server_round, stack


def test_the_node_sdk_streams_a_response_with_a_server_round(harness: Harness) -> None:
    runtime = node()
    gateway, tools = stack(harness, Model(server_round))
    done = subprocess.run(
        [runtime, str(NODE_DIR / "responses_stream.mjs"), f"{gateway.url}/v1", TENANT_KEY, MODEL],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["text"] == "The length is 5."
    assert seen["types"][0] == "response.created"
    assert seen["types"][-1] == "response.completed"
    assert_valid_response(seen["final"])
    assert seen["final"]["output"][0]["content"][0]["text"] == "The length is 5."
    assert len(tools.hits) == 1
