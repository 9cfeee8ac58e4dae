"""The OpenAI Agents SDK, unchanged, with its default Responses model pointed at the
gateway: an agent with a function tool of its own beside the tenant's server tools."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

from tests.support.scripted import MODEL, TENANT_KEY, Harness, Model, asks, call, says

from .test_responses_e2e import stack


def both_tools(body: dict[str, Any]) -> dict[str, Any]:
    """The server tool first, then the agent's own, then an answer from both."""
    results = [m for m in body["messages"] if m["role"] == "tool"]
    if not results:
        return asks(call("string_length", {"s": "hello"}, "c_len"))
    if len(results) == 1:
        return asks(call("get_weather", {"city": "Oslo"}, "c_weather"))
    return says(f"{results[-1]['content']}; 'hello' has {results[0]['content']} letters.")


def test_an_agent_runs_its_own_tool_beside_server_tools(harness: Harness) -> None:
    set_tracing_disabled(True)  # nothing leaves for OpenAI's tracing service
    model = Model(both_tools)
    gateway, tools = stack(harness, model)
    ran: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        ran.append(city)
        return f"sunny in {city}"

    async def run() -> Any:
        async with openai.AsyncOpenAI(
            base_url=f"{gateway.url}/v1", api_key=TENANT_KEY, max_retries=0
        ) as client:
            agent = Agent(
                name="helper",
                instructions="Answer with the tools.",
                tools=[get_weather],
                model=OpenAIResponsesModel(model=MODEL, openai_client=client),
            )
            question = "How is the weather in Oslo, and how long is 'hello'?"
            return await Runner.run(agent, question)

    result = asyncio.run(run())
    assert result.final_output == "sunny in Oslo; 'hello' has 5 letters."
    assert ran == ["Oslo"]  # the agent ran its own tool, once
    assert len(tools.hits) == 1  # the gateway ran the server tool, once
    # The agent's tool reached the model beside the server tool, as the SDK wrote it.
    offered = {t["function"]["name"]: t["function"] for t in model.requests[0]["tools"]}
    assert set(offered) == {"string_length", "get_weather"}
    assert offered["get_weather"]["parameters"]["properties"] == {
        "city": {"title": "City", "type": "string"}
    }
    assert json.loads(json.dumps(model.requests[-1]["messages"]))[-1]["role"] == "tool"
