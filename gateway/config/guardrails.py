"""The configuration of guardrails (docs/design.md §21, docs/guardrails.md): checks on what
a tool returns before the model reads it, on the model's final answer before the client
reads it, and on the client's own input. Part of ``gateway.config`` (which re-exports
every name), kept apart as one subject.

A guardrail is configured under ``policy.guardrails`` (the gateway's, every tenant's) and
``tenants[].policy.guardrails`` (a tenant's, added to the gateway's: a tenant never turns
one of the gateway's off)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from gateway.config.webhook_keys import service_url, signing_secret

# What a guardrail screens: a tool's result as it enters a run, the model's final answer
# as it leaves for the client, or the client's input (its messages, its tools' answers).
GuardrailOn = Literal["tool_result", "final_answer", "input"]
# What a finding does: the text never reaches its reader (a refusal naming the guardrail
# does); the spans found are replaced; it is only recorded; the run is tainted as if the
# text came from an untrusted source (its writes then follow ``after_untrusted``).
GuardrailAction = Literal["block", "redact", "flag", "taint"]
GuardrailKind = Literal["builtin", "model", "http"]
# The built-in detectors: key and token shapes and high-entropy strings; emails, phone,
# card (Luhn) and IBAN (mod 97) numbers; known prompt-injection phrasings; images and
# links that would carry data to a host outside ``hosts`` (asked for by name).
Detector = Literal["secrets", "personal_data", "injection", "links"]
OnError = Literal["allow", "block"]
# A streamed final answer: screened in windows as it goes, or held whole and screened once.
StreamScreening = Literal["window", "buffer"]

DETECTORS: tuple[Detector, ...] = ("secrets", "personal_data", "injection")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GuardrailConfig(_Frozen):
    """One guardrail: what it ``screens`` (for ``tool_result``, the tools it is about:
    ``tools`` globs on tool names, ``source`` a glob on the source's label), how it
    judges (``kind``) and what a finding does (``action``).

    - ``builtin``: the ``detect``ed kinds, found locally with RE2 (linear in the text);
    - ``model``: a configured ``model`` asked with the documented prompt; its answer is
      parsed strictly (anything else is an error);
    - ``http``: the operator's service at ``url``, through the egress guard, each request
      signed with ``secret`` as the approval webhook's are.

    A judge or service that fails (a timeout of ``timeout_s``, an error, a garbled
    answer) is ``on_error``: ``allow`` lets the text pass (flagged as unscreened),
    ``block`` blocks it."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    screens: GuardrailOn = "tool_result"
    tools: list[str] = Field(default_factory=lambda: ["*"], min_length=1)
    source: str = "*"
    kind: GuardrailKind = "builtin"
    detect: list[Detector] = Field(default_factory=lambda: list(DETECTORS), min_length=1)
    # For ``links``: the hosts an image or a data-carrying link may point at (globs).
    hosts: list[str] = Field(default_factory=list, max_length=256)
    action: GuardrailAction = "flag"
    model: str | None = Field(default=None, min_length=1, max_length=256)
    url: str | None = None
    secret: SecretStr | None = None
    timeout_s: float = Field(default=5.0, gt=0, le=120)
    on_error: OnError = "allow"

    _url = field_validator("url")(service_url)
    _secret = field_validator("secret")(signing_secret)

    @model_validator(mode="after")
    def _kind_has_what_it_needs(self) -> GuardrailConfig:
        if self.kind == "model" and self.model is None:
            raise ValueError(f"guardrail {self.name!r}: kind model names the judge's model")
        if self.kind == "http" and self.url is None:
            raise ValueError(f"guardrail {self.name!r}: kind http needs the service's url")
        if self.kind != "model" and self.model is not None:
            raise ValueError(f"guardrail {self.name!r}: model is for kind model")
        if self.hosts and (self.kind != "builtin" or "links" not in self.detect):
            raise ValueError(f"guardrail {self.name!r}: hosts are for a builtin detect: links")
        if self.kind != "http" and (self.url is not None or self.secret is not None):
            raise ValueError(f"guardrail {self.name!r}: url and secret are for kind http")
        if self.kind == "model" and self.action == "redact":
            raise ValueError(
                f"guardrail {self.name!r}: a judge says whether, not where: redact is for "
                "builtin and http guardrails"
            )
        if self.screens != "tool_result" and (self.tools != ["*"] or self.source != "*"):
            raise ValueError(
                f"guardrail {self.name!r}: tools and source are for screens: tool_result"
            )
        if self.screens == "final_answer" and self.action == "taint":
            raise ValueError(
                f"guardrail {self.name!r}: a final answer is read by the client, not the "
                "run: taint is for tool_result and input"
            )
        return self


class GuardrailsConfig(_Frozen):
    """The guardrails of the gateway or of a tenant, and how a streamed final answer is
    screened: in windows of ``window_chars`` as it goes (the text not yet screened is
    held back, at most that much), or ``buffer``ed whole and screened once."""

    rules: list[GuardrailConfig] = Field(default_factory=list)
    stream: StreamScreening = "window"
    window_chars: int = Field(default=512, ge=64, le=65_536)

    @model_validator(mode="after")
    def _names_are_unique(self) -> GuardrailsConfig:
        names = [rule.name for rule in self.rules]
        if len(set(names)) != len(names):
            raise ValueError("guardrails: two have the same name")
        return self
