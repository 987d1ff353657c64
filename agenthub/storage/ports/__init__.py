"""Every storage port by area: what a backend (`files_backend`, `postgres.backend`) implements, importable here."""

from __future__ import annotations

from agenthub.storage.ports.api import IdempotencyStore, TokenCheck, Tokens
from agenthub.storage.ports.channel_state import MemberSends, Outbox, SeenIds
from agenthub.storage.ports.inbox import AnswerSettles, Inbox, Liveness
from agenthub.storage.ports.jobs import JobDocuments
from agenthub.storage.ports.leases import BatchRenewal, LeaseSignals, LeaseStore, LiveHolders
from agenthub.storage.ports.memory import MemoryStore
from agenthub.storage.ports.search import Built, SearchIndexStore, SearchKit, SearchPort, VectorStore
from agenthub.storage.ports.sessions import AppendsSettling, QuickLookup, SessionStore
from agenthub.storage.ports.usage import RidingReserves, UsageStore

__all__ = [
    "AnswerSettles",
    "AppendsSettling",
    "BatchRenewal",
    "Built",
    "IdempotencyStore",
    "Inbox",
    "JobDocuments",
    "LeaseSignals",
    "LeaseStore",
    "LiveHolders",
    "Liveness",
    "MemberSends",
    "MemoryStore",
    "Outbox",
    "QuickLookup",
    "RidingReserves",
    "SearchIndexStore",
    "SearchKit",
    "SearchPort",
    "SeenIds",
    "SessionStore",
    "TokenCheck",
    "Tokens",
    "UsageStore",
    "VectorStore",
]
