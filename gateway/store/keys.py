"""Store keys: every one prefixed and tenant-scoped."""

from __future__ import annotations

import hashlib

from tool_registry import immutable


@immutable
class Keys:
    prefix: str = "toolgate:"

    def rate(self, tenant: str, kind: str) -> str:
        return f"{self.prefix}t:{tenant}:rate:{kind}"

    def browser_rate(self, address: str, pages: str = "connect") -> str:
        """A browser address's budget on a set of pages (the keyless connect pages, the
        console's), no address in clear."""
        digest = hashlib.sha256(address.encode()).hexdigest()[:32]
        return f"{self.prefix}{pages}:rate:{digest}"

    def audit(self) -> str:
        """What operators did (``store/audit.py``): of the gateway, not of a tenant."""
        return f"{self.prefix}audit"

    def console_session(self, token: str) -> str:
        """An operator's console session, by its token's digest (never the token)."""
        digest = hashlib.sha256(token.encode()).hexdigest()
        return f"{self.prefix}console:session:{digest}"

    def tool_vector(self, model: str, text: str) -> str:
        """A tool's vector from an embeddings model: of the catalog, not of a tenant
        (the text is the tool's name and description; replicas share it)."""
        digest = hashlib.sha256(f"{model}\x00{text}".encode()).hexdigest()[:40]
        return f"{self.prefix}vec:{digest}"

    def saved_turn(self, tenant: str, call_id: str) -> str:
        """A saved turn (``turn_codec`` version 2 and later)."""
        return f"{self.prefix}t:{tenant}:turn2:{call_id}"

    def turn(self, tenant: str, call_id: str) -> str:
        """Where version 1 kept a saved turn: read, never written."""
        return f"{self.prefix}t:{tenant}:turn:{call_id}"

    def tool_result(self, tenant: str, call_key: str) -> str:
        digest = hashlib.sha256(call_key.encode()).hexdigest()
        return f"{self.prefix}t:{tenant}:cache:{digest}"

    def kept_write(self, tenant: str, scope: str, call_key: str) -> str:
        """A write call's result, kept for the retries of the request that made it."""
        digest = hashlib.sha256(call_key.encode()).hexdigest()[:32]
        return f"{self.prefix}t:{tenant}:kept:{scope}:{digest}"

    def kept_body(self, tenant: str, scope: str) -> str:
        """The body an Idempotency-Key was first sent with (its digest)."""
        return f"{self.prefix}t:{tenant}:kept:{scope}:body"

    def trace(self, tenant: str, request_id: str) -> str:
        return f"{self.prefix}t:{tenant}:trace:{request_id}"

    def recordings(self, tenant: str) -> str:
        """The index of a tenant's recorded requests (a hash: request id → when)."""
        return f"{self.prefix}t:{tenant}:recordings"

    def activity(self, tenant: str, hour: int) -> str:
        """A tenant's counts per minute within one hour (a hash: minute and measure →
        count), ``hour`` counted from the epoch."""
        return f"{self.prefix}t:{tenant}:activity:{hour}"

    def decisions(self, tenant: str) -> str:
        """A tenant's operator decisions (a capped list, newest first)."""
        return f"{self.prefix}t:{tenant}:decisions"

    def runs(self, tenant: str) -> str:
        """A tenant's newest runs (a capped list, newest first)."""
        return f"{self.prefix}t:{tenant}:runs"

    def stored_response(self, tenant: str, response_id: str) -> str:
        """A stored response (version 2 and later)."""
        return f"{self.prefix}t:{tenant}:response2:{response_id}"

    def response(self, tenant: str, response_id: str) -> str:
        """Where version 1 kept a stored response: read and deleted, never written."""
        return f"{self.prefix}t:{tenant}:response:{response_id}"

    def stored_conversation(self, tenant: str, conversation_id: str) -> str:
        """A conversation (version 2 and later)."""
        return f"{self.prefix}t:{tenant}:conversation2:{conversation_id}"

    def conversation(self, tenant: str, conversation_id: str) -> str:
        """Where version 1 kept a conversation: read and deleted, never written."""
        return f"{self.prefix}t:{tenant}:conversation:{conversation_id}"

    def approval(self, tenant: str, approval_id: str) -> str:
        return f"{self.prefix}t:{tenant}:approval:{approval_id}"

    def approvals_pending(self, tenant: str) -> str:
        return f"{self.prefix}t:{tenant}:approvals"

    def budget(self, tenant: str, window: str, period: str) -> str:
        """A tenant's spend in one window: every window of a tenant in one hash slot
        (``{tenant}``), so one script settles and reserves on all of them at once."""
        return f"{self.prefix}t:{{{tenant}}}:budget:{window}:{period}"
