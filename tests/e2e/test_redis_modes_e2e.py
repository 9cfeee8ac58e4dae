"""The store's end-to-end tier on a real 3-node Redis Cluster and behind a real
Sentinel (both started for the test run on loopback): rate limits, saved turns,
stored responses and conversations, approvals, budgets and the tool-result cache,
each by an end-to-end test of its own feature, run again with ``store.url`` pointing
at the cluster or the sentinel. Every Lua script and multi-key call of the store
keeps its keys in one hash slot, or the cluster refuses it (CROSSSLOT): these pass."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.conftest import StackFactory
from tests.e2e.test_budget_e2e import (
    test_a_spent_day_is_429_insufficient_quota_until_midnight,
    test_the_usage_route_reads_a_tenants_own_spend_and_the_admin_reads_all,
)
from tests.e2e.test_mixed_turns_e2e import (
    test_a_hidden_round_before_a_hand_back_is_put_back,
    test_a_mixed_turn_on_one_gateway,
    test_cached_results_are_per_tenant,
)
from tests.e2e.test_policy_e2e import (
    test_an_operator_approves_while_the_stream_waits,
    test_chat_approves_through_the_toolgate_approval_tool,
    test_taint_survives_a_previous_response_id_chain,
)
from tests.e2e.test_rate_limits_e2e import (
    test_requests_per_minute,
    test_tokens_per_minute_are_charged_after_the_request,
)
from tests.e2e.test_responses_e2e import (
    test_a_client_call_is_handed_back_and_continued,
    test_a_conversation_keeps_the_thread_and_its_hidden_rounds,
    test_stored_responses_are_the_tenants_own,
)
from tests.support.scripted import Harness

__all__ = [  # collected here again, each on the cluster and behind the sentinel
    "test_a_client_call_is_handed_back_and_continued",
    "test_a_conversation_keeps_the_thread_and_its_hidden_rounds",
    "test_a_hidden_round_before_a_hand_back_is_put_back",
    "test_a_mixed_turn_on_one_gateway",
    "test_a_spent_day_is_429_insufficient_quota_until_midnight",
    "test_an_operator_approves_while_the_stream_waits",
    "test_cached_results_are_per_tenant",
    "test_chat_approves_through_the_toolgate_approval_tool",
    "test_requests_per_minute",
    "test_stored_responses_are_the_tenants_own",
    "test_taint_survives_a_previous_response_id_chain",
    "test_the_usage_route_reads_a_tenants_own_spend_and_the_admin_reads_all",
    "test_tokens_per_minute_are_charged_after_the_request",
]

URLS = {"cluster": "redis_cluster_url", "sentinel": "redis_sentinel_url"}


@pytest.fixture(params=["cluster", "sentinel"])
def shared_store(request: pytest.FixtureRequest) -> dict[str, Any]:
    """``store:`` for one test: the run's cluster or sentinel, a prefix of its own."""
    url = request.getfixturevalue(URLS[request.param])
    return {"url": url, "prefix": f"t-{uuid.uuid4().hex[:8]}:", "timeout_s": 2.0}


@pytest.fixture
def stack(stack: StackFactory, shared_store: dict[str, Any]) -> StackFactory:
    """The end-to-end stack, its gateway on the shared store."""

    def start(*args: Any, config: Callable[[Any], Any] = lambda c: c, **options: Any) -> Any:
        def on_the_store(data: dict[str, Any]) -> dict[str, Any]:
            data = config(data)
            data["store"] = shared_store
            return data

        return stack(*args, config=on_the_store, **options)

    return start


@pytest.fixture
def harness(harness: Harness, shared_store: dict[str, Any]) -> Harness:
    harness.store = shared_store
    return harness
