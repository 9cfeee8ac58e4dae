"""A connect link reaches the user whatever the model says (issue 52 §11): the gateway
adds it, whole, as the answer's last words — streamed or not, on chat completions,
Responses, Claude's Messages and Ollama's chat alike — where the model's words left it
out, and once only where the model repeated it. The pages of the round trip name the
connection as its users know it."""

from __future__ import annotations

from typing import Any

import anthropic
import ollama
import openai
import pytest

from tests.e2e.test_connect_e2e import ToolStack
from tests.support.scripted import MODEL, Harness, asks, call, says


def vague(body: dict[str, Any]) -> dict[str, Any]:
    """Calls ``my_repos``, then answers without the link it read."""
    if body["messages"][-1]["role"] == "tool":
        return says("I cannot see your repositories yet.")
    return asks(call("my_repos", {}, "c_repos"))


class VagueStack(ToolStack):
    def __init__(self, harness: Harness) -> None:
        super().__init__(harness, display_name="GitHub")
        self.model.script = [vague]


WORDS = "GitHub needs your permission first. Connect it here, then ask again: "


def _said(harness: Harness, stack: VagueStack, surface: str, stream: bool) -> tuple[str, str]:
    """What the user read on ``surface``, and the one link in it."""
    headers, base = stack.headers(), stack.gateway.url
    ask: Any = [{"role": "user", "content": "my repos?"}]
    text = ""
    if surface in ("chat", "responses"):
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", default_headers=headers)
        harness.on_close(client.close)
        if surface == "chat" and stream:
            chunks = client.chat.completions.create(model=MODEL, messages=ask, stream=True)
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        elif surface == "chat":
            answer = client.chat.completions.create(model=MODEL, messages=ask)
            text = answer.choices[0].message.content or ""
        elif stream:
            events = list(client.responses.create(model=MODEL, input="my repos?", stream=True))
            text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
            [done] = [e for e in events if e.type == "response.completed"]
            assert done.response.output_text == text  # the kept answer is what was shown
        else:
            text = client.responses.create(model=MODEL, input="my repos?").output_text
    elif surface == "messages":
        claude = anthropic.Anthropic(base_url=base, api_key="x", default_headers=headers)
        harness.on_close(claude.close)
        if stream:
            with claude.messages.stream(model=MODEL, max_tokens=100, messages=ask) as flow:
                text = "".join(flow.text_stream)
        else:
            said = claude.messages.create(model=MODEL, max_tokens=100, messages=ask)
            text = "".join(b.text for b in said.content if b.type == "text")
    else:
        local = ollama.Client(host=base, headers=headers)
        harness.on_close(local._client.close)
        if stream:
            text = "".join(p.message.content or "" for p in local.chat(MODEL, ask, stream=True))
        else:
            text = local.chat(MODEL, ask).message.content or ""
    links = [part for part in text.split() if "/v1/toolgate/connect/" in part]
    assert len(links) == 1, text
    return text, links[0]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("surface", ["chat", "responses", "messages", "ollama"])
def test_the_link_is_the_answers_last_words_on_every_surface(
    harness: Harness, surface: str, stream: bool
) -> None:
    stack = VagueStack(harness)
    text, link = _said(harness, stack, surface, stream)
    assert text.startswith("I cannot see your repositories yet.\n\n")
    assert text.endswith(WORDS + link)
    assert link.startswith(f"{stack.public}/v1/toolgate/connect/")
    opened = stack.browse(link)  # the link works, and the pages say the name users know
    assert "GitHub is connected" in opened.text
    assert "github is" not in opened.text


def test_a_link_the_model_repeated_is_not_added_again(harness: Harness) -> None:
    stack = ToolStack(harness)  # its model quotes what it read: the link with it
    answer = stack.ask()
    link = answer.headers["x-toolgate-connect"]
    said = answer.json()["choices"][0]["message"]["content"]
    assert said.count(link) == 1
    assert "needs your permission first" not in said


def test_a_providers_refusal_is_said_in_words_a_user_can_act_on() -> None:
    from gateway.surfaces.connect.links import provider_words

    assert "You chose not to allow it" in provider_words("GitHub", "access_denied")
    assert "Wait a few minutes" in provider_words("GitHub", "temporarily_unavailable")
    wrong = provider_words("GitHub", "invalid_scope")
    assert "Tell the people who run this service" in wrong
    assert "(invalid_scope)" in wrong
    hostile = provider_words("GitHub", "<script>x</script> please call +1 555")
    assert "<" not in hostile
    assert " " not in hostile.split("(")[1].split(")")[0]
    assert "sent you back without an answer" in provider_words("GitHub", "")


def test_streamed_or_not_a_connect_free_answer_is_untouched(harness: Harness) -> None:
    stack = VagueStack(harness)
    stack.browse(stack.link())  # alice connects first
    client = openai.OpenAI(
        base_url=f"{stack.gateway.url}/v1", api_key="x", default_headers=stack.headers()
    )
    said = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "my repos?"}]
    )
    assert said.choices[0].message.content == "I cannot see your repositories yet."
    client.close()
