"""A streamed answer screened in windows (docs/guardrails.md): whatever the chunking, the
client is shown nothing a guardrail would not pass, the shown text is the screened whole,
and the held text stays bounded. The judges' answers are parsed strictly, whatever they
say."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config import GuardrailConfig, GuardrailsConfig, LimitsConfig
from gateway.errors import GuardrailBlocked
from gateway.policy.answer_screen import OVERLAP, AnswerScreen
from gateway.policy.detectors import Detectors, redacted
from gateway.policy.guardrails import Guard
from gateway.policy.judges import JudgeFailed, parse_answer, parse_verdict
from gateway.policy.ledger import Ledger
from gateway.policy.limits import Narrowing, effective_limits
from gateway.policy.point import PolicyPoint
from gateway.policy.rules import TenantPolicy, guarding_of
from tool_registry import ToolRegistry

WINDOW = 64
SECRET_TEXT = (
    "Here is what I found. " * 6
    + "The card on file is 4111 1111 1111 1111 and the contact is bob@example.com. "
    + "The key AKIAIOSFODNN7EXAMPLE was rotated. "
    + "That is all. " * 8
)
GUARD = Guard()


def screen(action: str = "redact", stream: str = "window") -> AnswerScreen:
    rule = GuardrailConfig(
        name="answers", screens="final_answer", detect=["secrets", "personal_data"], action=action
    )
    guarding = GuardrailsConfig(rules=[rule], window_chars=WINDOW, stream=stream)
    rules = TenantPolicy(guarding=guarding)
    policy = PolicyPoint(
        effective_limits(LimitsConfig(), Narrowing()),
        (),
        frozenset(),
        ToolRegistry([]),
        rules=rules,
        guard=GUARD,
    )
    found = AnswerScreen.of(policy, Ledger())
    assert found is not None
    return found


async def streamed(screen: AnswerScreen, pieces: list[str]) -> tuple[str, int]:
    shown, most_held = [], 0
    for piece in pieces:
        shown.append(await screen.feed(piece))
        most_held = max(most_held, len(screen.pending))
    shown.append(await screen.end_round())
    return "".join(shown), most_held


def chunks(text: str, cuts: list[int]) -> list[str]:
    at = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(at)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=10_000), max_size=60))
def test_any_chunking_shows_the_screened_whole(cuts: list[int]) -> None:
    shown, most_held = asyncio.run(streamed(screen(), chunks(SECRET_TEXT, cuts)))
    whole = redacted(SECRET_TEXT, Detectors().find(SECRET_TEXT, ["secrets", "personal_data"]))
    assert shown == whole
    assert "4111" not in shown
    assert "AKIA" not in shown
    assert most_held < len(SECRET_TEXT)


def test_the_text_flows_before_the_end() -> None:
    text = "A plain sentence with nothing in it. " * 20
    s = screen()

    async def first_shown() -> int:
        for index, word in enumerate(text.split(" ")):
            if await s.feed(word + " "):
                return index
        return -1

    index = asyncio.run(first_shown())
    assert 0 < index < (WINDOW + OVERLAP) // 3  # shown once a window waits, not at the end


def test_a_block_shows_nothing_past_what_passed() -> None:
    s = screen("block")
    clean = "Nothing to see. " * 20

    shown: list[str] = []

    async def rest() -> None:
        for word in ["and", "the", "card", "is", "4111", "1111", "1111", "1111", "ok"]:
            shown.append(await s.feed(word + " "))
        await s.end_round()

    async def run() -> str:
        shown.append(await s.feed(clean))
        with pytest.raises(GuardrailBlocked, match="answers"):
            await rest()
        return "".join(shown)

    text = asyncio.run(run())
    assert "4111" not in text
    assert text == clean[: len(text)]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_a_judges_answer_is_a_verdict_or_a_failure(answer: str) -> None:
    try:
        verdict = parse_verdict(answer)
    except JudgeFailed:
        return
    assert all(len(label) <= 48 or label.startswith("S") for label in verdict.found)
    assert verdict.rewritten is None  # a judge never rewrites


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_a_services_answer_is_a_verdict_or_a_failure(body: bytes) -> None:
    try:
        verdict = parse_answer(body)
    except JudgeFailed:
        return
    assert all(len(label) <= 48 for label in verdict.found)


@pytest.mark.parametrize(
    ("answer", "found"),
    [
        ('{"verdict": "safe"}', ()),
        ('```json\n{"verdict": "unsafe", "categories": ["pii"]}\n```', ("pii",)),
        ("unsafe\nS1, S10", ("S1", "S10")),
        ("safe", ()),
        ('{"verdict": "unsafe"}', ("unsafe",)),
    ],
)
def test_the_shapes_a_judge_may_answer(answer: str, found: tuple[str, ...]) -> None:
    assert parse_verdict(answer).found == found


@pytest.mark.parametrize(
    "answer",
    [
        "Safe.",
        'Sure: {"verdict": "safe"}',
        '{"verdict": "safe", "note": "x"}',
        '{"verdict": "safe", "categories": ["x"]}',
        '{"verdict": "maybe"}',
        "safe\nS1",
        "[]",
    ],
)
def test_anything_else_is_a_failure(answer: str) -> None:
    with pytest.raises(JudgeFailed):
        parse_verdict(answer)


def test_buffer_holds_each_round_whole() -> None:
    s = screen(stream="buffer")
    pieces = chunks(SECRET_TEXT, list(range(0, len(SECRET_TEXT), 7)))

    async def run() -> tuple[list[str], str]:
        early = [await s.feed(piece) for piece in pieces]
        return early, await s.end_round()

    early, rest = asyncio.run(run())
    assert early == [""] * len(pieces)  # nothing before the round ends
    assert "4111" not in rest
    assert rest.endswith("That is all. ")


def test_a_tenants_guardrails_are_added_and_named_apart() -> None:
    gateway = GuardrailsConfig(
        rules=[GuardrailConfig(name="pii", detect=["personal_data"], action="redact")]
    )
    tenant = GuardrailsConfig(
        rules=[GuardrailConfig(name="pii", detect=["secrets"], action="block")], stream="buffer"
    )
    both = guarding_of(gateway, tenant)
    assert [(r.name, r.action) for r in both.rules] == [("pii", "redact"), ("tenant.pii", "block")]
    assert both.stream == "buffer"
    assert both.window_chars == gateway.window_chars  # not set by the tenant: the gateway's
    assert guarding_of(gateway, None) is gateway


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=4000))
def test_binary_read_as_text_is_screened_safely(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    for finding in Detectors().find(text, ["secrets", "personal_data", "injection"]):
        assert 0 <= finding.start < finding.end <= len(text)
