"""The Approvals page's cards (docs/design.md §19): each waiting call with its run and
a countdown that moves, and — for the cards a page already shows — what became of
those that no longer wait (who decided and why, or why it ended undecided), so a page
never offers Approve and Deny for a call nobody waits on."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.policy.tenants import Tenant
from gateway.store.approval_records import ApprovalRecord, Decided, Ended
from gateway.surfaces.console.shapes import pretty, when
from gateway.surfaces.operator.approvals import decided_for, pending_for

if TYPE_CHECKING:
    from gateway.runtime.services import Gateway

MAX_SHOWN = 50  # cards a page asks about when it looks again
# What a page says it shows: ``<approval id>.<tenant>``, comma-separated. Hostile:
# only ids of the shape approvals have, of a tenant the key may see, are looked up.
_SHOWN = re.compile(r"^([A-Za-z0-9_-]{1,64})\.(.{1,128})$")
ENDED_WORDS: dict[Ended | None, str] = {
    "expired": "No longer waits: nobody decided in time, so the call was refused and not made.",
    "deadline": "No longer waits: the request's own deadline came first; the call was not made.",
    "left": "No longer waits: the client went away before a decision; the call was not made.",
    None: "No longer waits: it was decided or ended elsewhere; there is nothing to do here.",
}


@dataclass(frozen=True)
class Cards:
    cards: list[dict[str, Any]]  # what the page shows: waiting ones, and shown ones gone
    shown: list[str]  # ``<id>.<tenant>`` of the cards, for the page's next look
    waiting: int  # every call waiting now
    more: int  # waiting ones the page does not show yet
    decided: list[dict[str, Any]]  # the newest decisions, newest first


def _card(record: ApprovalRecord, now: float) -> dict[str, Any]:
    return record.public() | {
        "state": "waiting",
        "arguments_text": pretty(record.arguments),
        "waiting_s": max(0, int(now - record.created)),
        "left_s": max(0, int(record.expires - now)),
    }


def decided_words(decided: Decided) -> str:
    verb = "Approved" if decided.approve else "Denied"
    reason = f": “{decided.reason}”" if decided.reason else " (no reason given)"
    return f"{verb} by {decided.decider} at {when(decided.decided_at)}{reason}."


def _shown(asked: str, tenants: Sequence[Tenant]) -> list[tuple[str, str]]:
    """The ``(id, tenant)`` pairs a page says it shows, of tenants the key may see."""
    ids = {t.id for t in tenants}
    found = []
    for part in asked.split(",")[:MAX_SHOWN]:
        match = _SHOWN.match(part)
        if match is not None and match.group(2) in ids:
            found.append((match.group(1), match.group(2)))
    return found


async def approval_cards(gateway: Gateway, tenants: Sequence[Tenant], shown: str) -> Cards:
    """The page's cards: with ``shown`` (the cards a page drew), those same cards as
    they are now; without it, every call waiting."""
    now = time.time()
    pending = await pending_for(gateway, tenants)
    decided = await decided_for(gateway, tenants)
    by_id = {record.id: record for record in pending}
    asked = _shown(shown, tenants)
    if not asked:
        cards = [_card(record, now) for record in pending]
    else:
        decisions = {d.id: d for d in decided}
        cards = []
        for approval_id, tenant in asked:
            record = by_id.get(approval_id)
            if record is not None:
                cards.append(_card(record, now))
                continue
            decision = decisions.get(approval_id)
            if decision is not None:
                text = decided_words(decision)
            else:
                text = ENDED_WORDS[await gateway.approvals.ended(tenant, approval_id)]
            cards.append({"id": approval_id, "tenant": tenant, "state": "gone", "said": text})
    drawn = {card["id"] for card in cards}
    return Cards(
        cards=cards,
        shown=[f"{card['id']}.{card['tenant']}" for card in cards],
        waiting=len(pending),
        more=sum(1 for record in pending if record.id not in drawn),
        decided=[
            {**d.public(), "arguments_text": pretty(d.arguments), "said": decided_words(d)}
            for d in decided
        ],
    )
