"""The tool policy's pure parts (docs/design.md §13): what a tool is by its source and the
rules, what a tenant may change, an approval's binding, and reading a client's
answers out of a history (hostile input: fuzzed)."""

from __future__ import annotations

import dataclasses
from typing import Any

import mcp_types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.chat_json import decode_messages, encode_messages
from gateway.config import ApprovalsConfig, LimitsConfig, PolicyConfig, TenantPolicyConfig, ToolRule
from gateway.policy.approval_desk import Answer, ApprovalDesk, arguments_text, binding_problem
from gateway.policy.ledger import Ledger
from gateway.policy.limits import Narrowing, effective_limits
from gateway.policy.point import PolicyPoint
from gateway.policy.rules import TenantPolicy, unmatched_rules
from gateway.store import GuardedStore, Keys
from gateway.store.approval_records import ApprovalRecord, ApprovalStore, Decision
from gateway.store.memory import MemoryStore
from gateway.surfaces.approval_answers import asked_in, held_calls, take_answers
from gateway.values import Message, ToolCall
from tool_registry import EgressPolicy, HttpTool, McpServer, McpServerConfig, ToolRegistry, ToolSpec
from tool_registry.sources.mcp import McpTool


def http_tool(name: str, method: str = "GET") -> HttpTool:
    return HttpTool(
        ToolSpec.model_validate({"name": name, "http": {"url": "http://t/", "method": method}})
    )


def mcp_tool(annotations: mcp_types.ToolAnnotations | None) -> McpTool:
    server = McpServer(McpServerConfig(name="desk", url="http://127.0.0.1:9/mcp"), EgressPolicy())
    remote = mcp_types.Tool(name="act", input_schema={"type": "object"}, annotations=annotations)
    return McpTool(server, remote, "act")


@pytest.mark.parametrize(
    ("annotations", "effects", "output"),
    [
        (None, "write", "untrusted"),  # the MCP specification's defaults
        (mcp_types.ToolAnnotations(read_only_hint=True), "read", "untrusted"),
        (mcp_types.ToolAnnotations(open_world_hint=False), "write", "trusted"),
        (mcp_types.ToolAnnotations(read_only_hint=True, open_world_hint=False), "read", "trusted"),
        (
            mcp_types.ToolAnnotations(destructive_hint=True, open_world_hint=True),
            "write",
            "untrusted",
        ),
    ],
)
def test_an_mcp_tool_is_what_its_hints_say(
    annotations: mcp_types.ToolAnnotations | None, effects: str, output: str
) -> None:
    tool = mcp_tool(annotations)
    assert (tool.effects, tool.output, tool.label) == (effects, output, "mcp:desk")


@pytest.mark.parametrize(
    ("method", "effects"),
    [("GET", "read"), ("HEAD", "read"), ("POST", "write"), ("DELETE", "write")],
)
def test_an_http_tool_is_what_its_method_says(method: str, effects: str) -> None:
    tool = http_tool("t", method)
    assert (tool.effects, tool.output, tool.side_effects) == (
        effects,
        "trusted",
        effects == "write",
    )


def rule(**fields: Any) -> ToolRule:
    return ToolRule.model_validate(fields)


def test_later_gateway_rules_win_and_tenants_only_tighten() -> None:
    gateway = PolicyConfig(
        tools=[
            rule(tools=["*"], approval="always"),
            rule(tools=["read_*"], approval="never", output="untrusted"),
            rule(tools=["read_log"], source="mcp:*", effects="write"),  # not an HTTP tool's
        ]
    )
    tenant = TenantPolicyConfig(
        tools=[
            rule(tools=["read_log"], output="trusted", approval="after_untrusted"),
            rule(tools=["send"], approval="never", effects="read"),  # loosening: ignored
        ],
        after_untrusted="approve",
        input="trusted",
    )
    policy = TenantPolicy.resolve(
        gateway.model_copy(update={"input": "untrusted"}),
        tenant,
    )
    read_log, send = policy.of(http_tool("read_log")), policy.of(http_tool("send", "POST"))
    assert (read_log.effects, read_log.output, read_log.approval) == (
        "read",
        "untrusted",
        "after_untrusted",
    )
    assert (send.effects, send.output, send.approval) == ("write", "trusted", "always")
    assert (policy.input, policy.after_untrusted) == ("untrusted", "approve")  # tighter of both
    loose = TenantPolicy.resolve(
        PolicyConfig(after_untrusted="refuse"), TenantPolicyConfig(after_untrusted="allow")
    )
    assert loose.after_untrusted == "refuse"


def test_a_policy_version_changes_with_what_decides_a_call() -> None:
    tool = http_tool("send", "POST")
    base = TenantPolicy.resolve(PolicyConfig(), None).of(tool).version
    assert TenantPolicy.resolve(PolicyConfig(), None).of(tool).version == base
    asked = PolicyConfig(tools=[rule(tools=["send"], approval="always")])
    assert TenantPolicy.resolve(asked, None).of(tool).version != base
    assert (
        TenantPolicy.resolve(PolicyConfig(after_untrusted="refuse"), None).of(tool).version != base
    )
    assert TenantPolicy.resolve(PolicyConfig(), None).of(http_tool("send", "PUT")).version != base


def test_rules_that_name_no_tool_are_found() -> None:
    gateway = PolicyConfig(
        tools=[rule(tools=["send"], approval="always"), rule(tools=["nope*"], effects="write")]
    )
    tenants = [
        (
            "acme",
            TenantPolicyConfig(tools=[rule(tools=["send"], source="mcp:*", approval="always")]),
        )
    ]
    assert unmatched_rules(gateway, tenants, [http_tool("send")]) == [
        "policy.tools[1] (nope*) matches no tool",
        "tenant 'acme': policy.tools[0] (send) matches no tool",
    ]


def test_guardrails_that_screen_no_tool_are_found() -> None:
    rules = [
        {"name": "mail", "tools": ["send"], "action": "redact"},
        {"name": "nothing", "tools": ["nope*"], "source": "http", "action": "flag"},
        {"name": "maybe-client", "tools": ["nope*"], "action": "flag"},  # a client's tool?
        {"name": "answers", "screens": "final_answer", "action": "redact"},
    ]
    gateway = PolicyConfig(guardrails={"rules": rules})
    tenants = [("acme", TenantPolicyConfig(guardrails={"rules": [rules[1]]}))]
    assert unmatched_rules(gateway, tenants, [http_tool("send")]) == [
        "policy.guardrails: guardrail 'nothing' screens no tool's results",
        "tenant 'acme': policy.guardrails: guardrail 'nothing' screens no tool's results",
    ]


def test_a_rule_must_say_something() -> None:
    with pytest.raises(ValueError, match="at least one"):
        rule(tools=["x"])


def record(**changes: Any) -> ApprovalRecord:
    arguments = arguments_text('{"title": "refund 42"}')
    desk = ApprovalDesk(None, "acme", "owner-1", ApprovalsConfig(), None)
    desk.approver = "client"
    policy = TenantPolicy.resolve(PolicyConfig(), None).of(http_tool("create_ticket", "POST"))
    made = desk.record(
        ToolCall("w1", "create_ticket", '{ "title" : "refund 42" }'),
        policy,
        "approval: always",
        None,
    )
    assert made.arguments == arguments
    return dataclasses.replace(made, **changes)


CALL = ToolCall("w1", "create_ticket", '{"title":"refund 42"}')
POLICY = TenantPolicy.resolve(PolicyConfig(), None).of(http_tool("create_ticket", "POST"))


@pytest.mark.parametrize(
    ("changes", "call", "answer", "problem"),
    [
        ({}, CALL, Answer("a", True), None),
        (
            {},
            CALL,
            Answer("a", True, tool="create_ticket", arguments='{"title": "refund 42"}'),
            None,
        ),
        ({"owner": "owner-2"}, CALL, Answer("a", True), "another user"),
        ({"by": "operator"}, CALL, Answer("a", True), "an operator's"),
        ({"expires": 1.0}, CALL, Answer("a", True), "expired"),
        ({}, ToolCall("w2", "create_ticket", CALL.arguments), Answer("a", True), "another call"),
        ({}, ToolCall("w1", "add", CALL.arguments), Answer("a", True), "another call"),
        (
            {},
            ToolCall("w1", "create_ticket", '{"title":"refund 43"}'),
            Answer("a", True),
            "arguments are not",
        ),
        ({}, ToolCall("w1", "create_ticket", "not json"), Answer("a", True), "arguments are not"),
        ({}, CALL, Answer("a", True, tool="add"), "another tool"),
        ({}, CALL, Answer("a", True, arguments='{"title":"refund 4200"}'), "other arguments"),
        ({}, CALL, Answer("a", True, arguments="[1]"), "other arguments"),
        ({"version": "0" * 16}, CALL, Answer("a", True), "policy changed"),
    ],
)
def test_an_answer_binds_to_one_exact_call(
    changes: dict[str, Any], call: ToolCall, answer: Answer, problem: str | None
) -> None:
    found = binding_problem(record(**changes), call, "owner-1", POLICY, answer, now=2.0)
    assert (found is None) if problem is None else (problem in (found or ""))


def approval_call(approval_id: str, arguments: Any) -> dict[str, Any]:
    return {
        "id": approval_id,
        "type": "function",
        "function": {"name": "toolgate_approval", "arguments": arguments},
    }


def test_answers_leave_the_history_and_the_held_call_is_found() -> None:
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "refund"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "w1",
                    "type": "function",
                    "function": {"name": "create_ticket", "arguments": "{}"},
                },
                {"id": "c1", "type": "function", "function": {"name": "ask", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "yes"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [approval_call("mcpr_1", '{"tool":"create_ticket","arguments":{"a":1}}')],
        },
        {"role": "tool", "tool_call_id": "mcpr_1", "content": '{"approve": true, "reason": "ok"}'},
    ]
    asked = asked_in(decode(history))
    assert asked == {"mcpr_1": ("create_ticket", '{"a":1}')}
    kept, answers = take_answers(decode(history), asked)
    assert encode_messages(kept) == history[:3]
    assert answers == {"mcpr_1": Answer("mcpr_1", True, "ok", "create_ticket", '{"a":1}')}
    assert held_calls(kept) == (ToolCall("w1", "create_ticket", "{}"),)
    assert held_calls([*kept, Message("user", "and?")]) == ()
    answer = {"role": "tool", "tool_call_id": "mcpr_1", "content": "sure!"}
    _, said = take_answers(decode([answer]), asked)
    assert said["mcpr_1"].approve is False  # anything but "approve": true is a no


def decode(history: list[dict[str, Any]]) -> list[Message]:
    return list(decode_messages(history))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "tool", 7])},
        optional={
            "content": json_values,
            "tool_call_id": st.sampled_from(["mcpr_1", "w1"]) | json_values,
            "tool_calls": st.lists(
                st.one_of(
                    json_values,
                    st.builds(
                        approval_call,
                        st.sampled_from(["mcpr_1", "w1"]),
                        json_values | st.text(max_size=30),
                    ),
                ),
                max_size=3,
            ),
        },
    ),
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(messages)
def test_reading_answers_never_fails_on_any_history(history: list[dict[str, Any]]) -> None:
    asked = asked_in(decode(history))
    kept, answers = take_answers(decode(history), asked)
    assert set(answers) <= set(asked)
    answering = [m.call_id for m in kept if m.role == "tool"]
    assert not any(isinstance(i, str) and i in asked for i in answering)
    for call in held_calls(kept):
        assert isinstance(call.id, str)
        assert isinstance(call.name, str)


@pytest.mark.anyio
async def test_a_client_answer_never_uses_up_an_operators_approval() -> None:
    store = ApprovalStore(GuardedStore(MemoryStore(), timeout_s=None), Keys("t:"))
    desk = ApprovalDesk(store, "acme", "owner-1", ApprovalsConfig(), "operator")
    tool = http_tool("create_ticket", "POST")
    registry = ToolRegistry([tool])
    point = PolicyPoint(
        effective_limits(LimitsConfig(), Narrowing()),
        ("create_ticket",),
        frozenset(),
        registry,
        desk=desk,
        tenant="acme",
    )
    held = desk.record(CALL, point.rules.of(tool), "approval: always", None)
    await store.create(held)
    decided = await point.resume({held.id: Answer(held.id, True)}, [CALL])
    verdict = point.clearance(Ledger(decided=decided), CALL, tool)
    assert verdict.why is not None
    assert verdict.why["rule"] == "approval missing"  # refused, and...
    assert await store.peek("acme", held.id) == held  # ...the operator's is still there


@pytest.mark.anyio
async def test_an_operators_approval_says_why_it_stopped_waiting_undecided() -> None:
    """Timed out, cut by the request's deadline, or its client gone: each is kept for
    the pages that still show the card (and a decision is not an ending)."""
    import asyncio

    store = ApprovalStore(GuardedStore(MemoryStore(), timeout_s=None), Keys("t:"))
    policy = POLICY
    desk = ApprovalDesk(store, "acme", "owner-1", ApprovalsConfig(timeout_s=0.05), "operator")
    loop = asyncio.get_running_loop()

    expired = desk.record(CALL, policy, "approval: always", None)
    assert await desk.wait(expired, None) is None
    cut = desk.record(CALL, policy, "approval: always", None)
    assert await desk.wait(cut, loop.time() + 0.01) is None
    listed = asyncio.Queue[ApprovalRecord]()

    async def notify(record: ApprovalRecord) -> None:  # told once it waits, listed
        listed.put_nowait(record)

    waiting = ApprovalDesk(
        store, "acme", "owner-1", ApprovalsConfig(timeout_s=60), "operator", notify
    )
    left = waiting.record(CALL, policy, "approval: always", None)
    task = asyncio.ensure_future(waiting.wait(left, None))
    assert (await listed.get()) == left
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    decided = waiting.record(CALL, policy, "approval: always", None)
    task = asyncio.ensure_future(waiting.wait(decided, None))
    assert (await listed.get()) == decided
    assert await store.decide("acme", decided.id, Decision(True, None, "operator:admin"))
    assert (await task) is not None

    assert await store.ended("acme", expired.id) == "expired"
    assert await store.ended("acme", cut.id) == "deadline"
    assert await store.ended("acme", left.id) == "left"
    assert await store.ended("acme", decided.id) is None
    assert await store.pending("acme") == []
