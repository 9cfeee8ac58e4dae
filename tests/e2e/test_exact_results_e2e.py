"""Issue 14 against a running gateway: what a tool sends that ``pick`` cannot read
never reaches the model, and integers the model writes reach the tool digit for digit
(JSON body, query, path) — the recording tool server shows the bytes it received."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.support.recorder import Answer, Received, Recorder
from tests.support.scripted import MODEL, TENANT_KEY, Harness, Model, asks, call, config, says, tool

SECRET = "SECRET-FIELD-VALUE-b1d9"
BIG = "12345678901234567890123"
VALID = json.dumps({"public": "ok", "secret": SECRET}).encode()
BODIES = {
    "valid": VALID,
    "deep": VALID[:-1] + b', "x": ' + b"[" * 1100 + b"]" * 1100 + b"}",
    "big": VALID[:-1] + b', "pad": "' + b"p" * 4096 + b'"}',  # over max_response_bytes
    "nan": VALID[:-1] + b', "n": NaN}',
    "trailing": VALID + b" trailing text",
}


def answer(hit: Received) -> Answer:
    shape = hit.raw_path.rsplit("=", 1)[-1]
    if hit.raw_path.startswith("/picked"):
        return Answer(body=BODIES[shape])
    return Answer(body=b'{"got": "it"}')


def reply_with_results(name: str, arguments: str) -> Any:
    def script(body: dict[str, Any]) -> dict[str, Any]:
        if body["messages"][-1]["role"] == "tool":
            return says("done")
        return asks(call(name, arguments))

    return script


def run(harness: Harness, name: str, arguments: str) -> tuple[Model, Recorder]:
    tools = Recorder(answer)
    url = harness.serve(tools).url
    integer = {"n": {"type": "integer"}}
    definitions = [
        tool(
            "picked",
            f"{url}/picked",
            {"shape": {"type": "string"}},
            result={"pick": "public"},
            http={"url": f"{url}/picked", "max_response_bytes": 2048},
        ),
        tool("in_body", f"{url}/body", integer, http={"url": f"{url}/body", "method": "POST"}),
        tool("in_query", f"{url}/query", integer),
        tool("in_path", f"{url}/path/{{n}}", integer),
        tool("bounded", f"{url}/bounded", {"n": {"type": "integer", "maximum": 1000}}),
    ]
    model = Model(reply_with_results(name, arguments))
    gateway = harness.gateway(config(harness.serve(model.recorder).url, definitions))
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=TENANT_KEY)
    harness.on_close(client.close)
    client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "go"}])
    return model, tools


@pytest.mark.parametrize("shape", ["deep", "big", "nan", "trailing"])
def test_a_body_pick_cannot_read_never_reaches_the_model(harness: Harness, shape: str) -> None:
    model, tools = run(harness, "picked", json.dumps({"shape": shape}))
    assert len(tools.hits) == 1  # the tool really answered
    (result,) = model.tool_results(1)
    assert SECRET not in result
    assert json.loads(result)["error"].startswith("the tool's answer could not be read")


def test_a_valid_body_is_picked(harness: Harness) -> None:
    model, _ = run(harness, "picked", json.dumps({"shape": "valid"}))
    assert model.tool_results(1) == ['"ok"']


@pytest.mark.parametrize(
    ("name", "where"),
    [
        ("in_body", lambda hit: json.loads(hit.body.decode(), parse_int=str)["n"]),
        ("in_query", lambda hit: hit.raw_path.split("n=", 1)[1]),
        ("in_path", lambda hit: hit.raw_path.rsplit("/", 1)[1]),
    ],
)
def test_big_integers_reach_the_tool_digit_for_digit(
    harness: Harness, name: str, where: Any
) -> None:
    for written in (BIG, str(2**100), f"-{BIG}"):
        _, tools = run(harness, name, f'{{"n": {written}}}')
        assert where(tools.hits[-1]) == written
        if name == "in_body":
            assert f'"n":{written}'.encode() in tools.hits[-1].body


def test_a_big_integer_past_the_schemas_bound_is_refused(harness: Harness) -> None:
    model, tools = run(harness, "bounded", f'{{"n": {BIG}}}')
    assert tools.hits == []
    (result,) = model.tool_results(1)
    assert BIG in json.loads(result)["error"]  # the model is told which value was wrong
