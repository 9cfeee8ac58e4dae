"""Shared state (docs/design.md §8): rate-limit counters, saved tool turns, tool-result
caches. One interface, two backends: ``memory://`` for one process, Redis for several
replicas. ``open_store`` picks the backend from the URL and bounds every call."""

from gateway.errors import StoreUnavailable
from gateway.store.base import RateDecision, RateMode, Store, gcra
from gateway.store.guard import GuardedStore
from gateway.store.keys import Keys
from gateway.store.open import open_store

__all__ = [
    "GuardedStore",
    "Keys",
    "RateDecision",
    "RateMode",
    "Store",
    "StoreUnavailable",
    "gcra",
    "open_store",
]
