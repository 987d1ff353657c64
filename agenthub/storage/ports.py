"""Every storage port: what a backend implements (`files_backend`, `postgres.backend`) and the rest of the
product relies on. Adding a backend = one factory returning `Stores` + an implementation of each port here."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from agenthub.session_keys import SessionKey
    from agenthub.storage.idempotency import IdempotencyRecord
    from agenthub.storage.inbox import InboxEntry
    from agenthub.storage.jobs import FireRecord, JobDocument
    from agenthub.storage.lease import Lease
    from agenthub.storage.member_sends import Windows
    from agenthub.storage.memory_files import Change, MemoryName
    from agenthub.storage.meta import SessionMeta
    from agenthub.storage.outbox import OutboxRow, Outcome
    from agenthub.storage.postgres.search import PostgresSearchIndex
    from agenthub.storage.postgres.search_sync import PostgresIndexFeed
    from agenthub.storage.search_index import Passage, SearchDoc, SearchHit, SearchScope, SourceRef
    from agenthub.storage.search_vectors import Stored, Vector
    from agenthub.storage.store import HistoryRecord, SessionActivity
    from agenthub.storage.tokens import StoredToken
    from agenthub.storage.usage import Claim, ClaimRide, Forgotten, Reservation, UsageRow


class SessionStore(Protocol):
    """Durable session histories, their archives and meta. One call is one durable step: when it returns, what it
    wrote survives a crash (meta written with `durable=False` excepted); when it raises `StorageError`, nothing of it
    was written. A malformed record is refused with `MalformedRecordError` before anything is written. Callers
    serialise calls per key (`SessionHistory` does); a backend may still be called for different keys at the same
    time."""

    async def load(self, key: SessionKey) -> list[HistoryRecord]:
        """The working history, oldest first; [] for an unknown session. A torn or corrupt record is skipped."""
        ...

    async def append(self, key: SessionKey, records: Sequence[HistoryRecord]) -> None:
        """Add `records` at the end, all or nothing."""
        ...

    async def replace(
        self, key: SessionKey, records: Sequence[HistoryRecord], *, archive: Sequence[HistoryRecord]
    ) -> None:
        """Append `archive` to the session's archive, then make `records` the working history."""
        ...

    async def clear(self, key: SessionKey, *, archive: Sequence[HistoryRecord]) -> None:
        """Append `archive` to the archive, then remove the working history (the meta stays, design §3)."""
        ...

    async def read_archive(self, key: SessionKey) -> list[HistoryRecord]: ...

    async def rewrite_archive(self, key: SessionKey, records: Sequence[HistoryRecord]) -> None:
        """Replace the whole archive (a redaction), atomically."""
        ...

    async def delete(self, key: SessionKey) -> bool:
        """Remove history, archive and, last, meta (a delete cut short can be repeated). True if anything existed."""
        ...

    async def read_meta(self, key: SessionKey) -> SessionMeta | None:
        """The stored meta; its `updated_at` is never older than the newest record's `timestamp` (a meta written
        behind and lost in a crash is caught up from the history)."""
        ...

    async def write_meta(self, key: SessionKey, meta: SessionMeta, *, durable: bool) -> None:
        """Store `meta`; `durable=False` allows a backend to lose it in a crash (it is rebuilt from the history)."""
        ...

    async def exists(self, key: SessionKey) -> bool:
        """Whether the session has a history or a meta."""
        ...

    async def list_keys(self, agent: str) -> list[SessionKey]:
        """Every session of `agent` that has a history or a meta."""
        ...

    async def keys_with_anything(self, agent: str) -> list[SessionKey]:
        """Every session of `agent` with a history, a meta or an archive (an archive a delete cut short left behind
        included): what "forget me" goes through."""
        ...

    async def activity(self, agent: str) -> list[SessionActivity]:
        """When each of `agent`'s histories last changed, newest first."""
        ...

    async def fence(self, key: SessionKey, token: int | None) -> bool:
        """Write `key` under the fencing token `token` of its session lease from now on (None: under no token, the
        lease was released). A store shared by several instances raises the session's fence to `token` and then
        refuses (`FencedWriteError`, nothing written) every write of this store carrying a token older than the
        fence; `FencedWriteError` here too when `token` is older already. True when the history may have been
        changed by someone else since this store last fenced it (its cached copy must be reloaded). A store only
        one instance writes (files, memory) ignores tokens and returns False."""
        ...


@runtime_checkable
class QuickLookup(Protocol):
    """A backend that can tell without awaiting whether a session exists (the files: one stat). The HTTP routes
    look sessions up synchronously through `SessionHistory.exists`."""

    def exists_now(self, key: SessionKey) -> bool: ...


class MemoryStore(Protocol):
    """The memory text files. A write replaces the whole file atomically and durably (a reader sees the old or the
    new text, never a mix); StorageError when it cannot."""

    async def read(self, name: MemoryName) -> str:
        """The text, "" when the file does not exist."""
        ...

    async def read_many(self, names: Sequence[MemoryName], *, fresh_since: float | None = None) -> list[str]:
        """`read` of each, in one go (one worker-thread hop, one query). `fresh_since` (monotonic clock; None:
        now): the texts may be as of any moment from then on, at least as new as every write that completed
        before it (a store that learns the files' version from statements sent anyway may answer from its copy)."""
        ...

    async def write(self, name: MemoryName, text: str) -> None: ...

    async def update(self, name: MemoryName, change: Change, *, keep_backup: bool = False) -> str:
        """One read-modify-write, atomic against every other writer of the store (on PostgreSQL: of every
        instance): `change(current text)` is written unless it equals the current text; with `keep_backup` a
        non-empty replaced text becomes `name.backup_name()` in the same step. An exception from `change` leaves
        everything as it was. Returns the text stored now."""
        ...

    async def delete(self, name: MemoryName) -> bool:
        """True if it existed."""
        ...

    async def group_profiles(self, person: str) -> list[MemoryName]:
        """The group profiles kept for the person stem `person`: one name (never a backup's) per group chat where
        the profile or its backup exists."""
        ...

    def label(self, name: MemoryName) -> str:
        """How logs, tool results and the L3 state name it (stable, one-to-one; never checks the disk)."""
        ...


class Liveness(Protocol):
    """An instance's liveness lease as its shared inbox sees it (`LeaseKeeper`)."""

    @property
    def held(self) -> bool:
        """Whether the lease is held now (by this instance's conservative clock)."""
        ...

    @property
    def hold(self) -> int | None:
        """The number of the current hold, None while not held: the same number means the lease stayed live in
        the store all along (so no other instance could take this one's entries over meanwhile)."""
        ...


class Inbox(Protocol):
    """Accepted-but-unanswered messages. `accept` returns once the message is durable; `settle` marks it answered
    (after its answer is stored); `unsettled` lists what a restart must still answer, in acceptance order."""

    async def accept(self, source: str, payload: dict[str, Any], *, session: str | None = None) -> InboxEntry: ...

    async def assign(self, entry_id: str, session: str) -> None:
        """Name the session of an entry accepted without one (a push channel's, once routed); an entry that has one
        keeps it."""
        ...

    async def earlier_unsettled(self, session: str, entry_id: str) -> list[str]:
        """The ids of `session`'s unsettled entries accepted before `entry_id` (acceptance order); [] when
        `entry_id` is settled or unknown."""
        ...

    async def owners_alive(self, entry_ids: Collection[str]) -> bool | None:
        """Whether an instance that is alive (its liveness lease live) owns one of these unsettled entries: it will
        answer it, so a later entry of the session waits. False: none has (gone, or given up: the next takeover
        pass claims them). None: this inbox cannot tell (one inbox per instance: no other instance has them)."""
        ...

    async def settle(self, entry_id: str) -> None:
        """Mark the entry answered. A refused write raises StorageError and is retried by the inbox itself (bounded
        backoff, and at every `retry_settles`) until the store takes it; meanwhile the entry is not listed again."""
        ...

    async def release(self, entry_id: str) -> None:
        """Give up an entry this instance cannot answer now (its turn lost the session's lease): not settled, it
        is no longer this instance's, so the next takeover pass (any instance's) answers it. One inbox per
        instance: nothing to do (it stays unsettled, answered after the restart)."""
        ...

    async def still_mine(self, entry_id: str) -> bool:
        """Whether this instance may still answer the entry: False once another instance has claimed it (or it was
        settled). One inbox per instance: always True."""
        ...

    def accept_only_while(self, liveness: Liveness) -> None:
        """From now on `accept` refuses (StorageError) while `liveness.held` is False: a shared inbox's instance
        whose liveness lease lapsed would own entries the others see as orphans at once; and an entry seen to be
        this instance's stays so, without asking, for as long as the same hold lasts. One inbox per instance:
        no-op."""
        ...

    async def unsettled(self) -> list[InboxEntry]:
        """What this instance must still answer (its own entries), in acceptance order."""
        ...

    async def orphan_sources(self) -> set[str]:
        """The sources of unsettled entries whose instance is gone (a shared inbox; none for one of its own)."""
        ...

    async def claim_orphans(self, sources: Collection[str]) -> list[InboxEntry]:
        """Make this instance the owner of the unsettled entries of `sources` whose instance is gone, and return
        them in acceptance order; two instances claiming at once never get the same entry."""
        ...

    async def retry_settles(self) -> None:
        """Write the settles that were refused now (StorageError while the store still refuses)."""
        ...

    async def count(self) -> int:
        """How many accepted messages are not answered yet, on every instance (the store is asked)."""
        ...

    async def drop_settled(self) -> None:
        """Keep nothing of answered messages (a forget, a deleted session): StorageError when refused."""
        ...

    def depth(self) -> int:
        """How many accepted messages are not answered yet (for /metrics)."""
        ...

    async def aclose(self) -> None: ...


class LeaseStore(Protocol):
    async def acquire(self, name: str, holder: str, ttl_s: float) -> Lease | None:
        """The lease of `name` for `holder`: granted when free, expired or already `holder`'s (then renewed, same
        token); None while another holder's lease is live."""
        ...

    async def renew(self, lease: Lease, ttl_s: float) -> Lease | None:
        """The lease extended by `ttl_s`; None when it was lost (expired and granted to another holder)."""
        ...

    async def release(self, lease: Lease) -> None:
        """Give the lease up (a no-op when it was lost already)."""
        ...


@runtime_checkable
class BatchRenewal(Protocol):
    """A lease store that renews many leases in one request."""

    async def renew_many(self, leases: list[Lease], ttl_s: float) -> list[Lease | None]:
        """Each lease extended by `ttl_s` (None: lost), in one request to the store: what an instance holding
        many session leases renews them with, so their renewals do not queue behind each other."""
        ...


@runtime_checkable
class LeaseSignals(Protocol):
    """A store whose holders can be asked for a lease: a session lease is then kept while its instance has no
    more work for it (no acquire, fence and release per turn) and given up the moment another instance asks."""

    async def acquire_or_ask(self, name: str, holder: str, ttl_s: float) -> Lease | None:
        """`acquire`; when another holder's lease is live, that holder is signalled (`WANTED`, `name`) in the same
        request."""
        ...

    async def listen(self, on_signal: Callable[[str, str], None]) -> None:
        """Call `on_signal(kind, name)` for every `WANTED` and `FREED` signal of every holder until cancelled
        (reconnecting after a failure: signals sent meanwhile are missed, so they only ever hasten things)."""
        ...


class JobDocuments(Protocol):
    """Every agent's jobs. `shared`: other instances write here too (the scheduler reloads what it holds)."""

    shared: bool

    async def load_all(self, agent: str | None = None) -> list[JobDocument]:
        """Every stored job (of `agent` when given)."""
        ...

    async def put(self, document: JobDocument) -> None:
        """Create or replace one job."""
        ...

    async def put_if(self, document: JobDocument, expected_due: float | None) -> bool:
        """Replace one job only if it is stored with `next_due == expected_due` (the due time the change was made
        from: nobody recorded a fire of it or changed it since); True when replaced, False when it was not stored
        so (nothing written)."""
        ...

    async def remove(self, agent: str, job_ids: Collection[str]) -> None:
        """Remove these jobs of `agent` (an absent one is no error)."""
        ...

    async def record_fires(self, fires: Sequence[FireRecord]) -> list[bool]:
        """Record each fire only if its job is still stored with `next_due == due` (nobody recorded that fire or
        changed the job meanwhile); one bool per fire: True when this call recorded it (so it is to be run)."""
        ...


class Outbox(Protocol):
    async def put(self, target: str, payload: dict[str, Any]) -> int:
        """Store a send for `target`'s holder; its row id."""
        ...

    async def claim(self, target: str, holder: str, claim_s: float) -> OutboxRow | None:
        """The oldest pending row of `target`, now claimed by `holder` for `claim_s`; None when there is none."""
        ...

    async def finish(self, row_id: int, holder: str, reason: str | None) -> None:
        """Record the outcome of a row `holder` claimed: sent (`reason` None) or failed with `reason`."""
        ...

    async def outcome(self, row_id: int) -> Outcome | None:
        """Where the row stands; None when it is gone."""
        ...

    async def withdraw(self, row_id: int, reason: str) -> bool:
        """The sender gives up: a still pending row fails with `reason` (True); False once it was claimed."""
        ...

    async def expire_claims(self, target: str) -> int:
        """Claims of `target` past their time fail with `UNKNOWN_OUTCOME` (never sent again); how many."""
        ...

    async def discard(self, row_id: int) -> None:
        """The sender has read the final outcome: the row (and the text it holds) goes."""
        ...


class SeenIds(Protocol):
    """A durable TTL set of ids shared by a channel's credentials: `DedupStore`'s JSONL file (files) or
    `PostgresSeenIds` (postgres, shared by every instance)."""

    @property
    def ttl_s(self) -> float: ...

    def __len__(self) -> int: ...

    async def check_and_add(self, key: str) -> bool: ...

    async def forget(self, key: str) -> None:
        """Take `key` back (it was seen but the message was not kept): its next delivery is new, durably."""
        ...


class MemberSends(Protocol):
    """One sender's (a WeCom app's) sends per member in its sliding windows."""

    @property
    def windows(self) -> Windows: ...

    async def waits(self, member: str, count: int) -> list[float]:
        """The seconds from now until each of `count` further sends to `member` may go (nothing is counted)."""
        ...

    async def take(self, member: str) -> float:
        """Count one send to `member` now if every window has room for it, and return 0; otherwise count nothing
        and return the seconds until one has. Atomic across everyone sharing these counts."""
        ...


class IdempotencyStore(Protocol):
    """Keys are `(scope, key)`; a record older than `window_s` counts as absent (and is removed now and then)."""

    async def claim(self, scope: str, key: str, fingerprint: str) -> IdempotencyRecord | None:
        """Take the key for a new request: None when it is now this request's; else the live record of the
        request that has it (a taken key whose message was never stored is free again after `ACCEPT_GRACE_S`)."""
        ...

    async def get(self, scope: str, key: str) -> IdempotencyRecord | None: ...

    async def accepted(self, scope: str, key: str) -> None:
        """The request's message is stored: it will be answered, the key stays taken."""
        ...

    async def finish(self, scope: str, key: str, final: dict[str, Any]) -> None:
        """Keep the request's final reply event (JSON-ready) for the retries."""
        ...

    async def release(self, scope: str, key: str) -> None:
        """Free a key whose message was not stored (refused): a retry runs it."""
        ...


@runtime_checkable
class RidingReserves(Protocol):
    """A usage store whose check-and-reserve can ride in a session's claim (`SessionClaims.claim`, PostgreSQL)."""

    def ride(
        self, claims: Sequence[Claim], day: str, tokens: int, ttl_s: float, *, ignore: Collection[str] = ()
    ) -> ClaimRide:
        """`reserve`'s request, to be sent with a claim; its rows are read with `storage.usage.reservation_of`."""
        ...


class UsageStore(Protocol):
    """Where usage and reservations live; every method may raise `StorageError`."""

    async def add(self, rows: Sequence[UsageRow], *, release: Sequence[str] = ()) -> None:
        """Append calls to the journal and the day roll-ups, and end the reservations `release` (one step)."""
        ...

    async def unrecorded(self, rows: Sequence[UsageRow]) -> list[UsageRow]:
        """The calls of `rows` the journal lacks (matched on time, who, model, purpose and tokens; as often as
        they occur): what a killed process's spool still has to write."""
        ...

    async def reserve(
        self, claims: Sequence[Claim], day: str, tokens: int, ttl_s: float, *, ignore: Collection[str] = ()
    ) -> Reservation:
        """Atomically (across instances): refuse when a claim's used + reserved reaches a limit, else reserve
        `tokens` in every claimed scope for at most `ttl_s` (a dead instance's reservations lapse). The reservations
        `ignore` do not count: settled, their turns' usage stored, their release not written yet."""
        ...

    async def release(self, reservation_id: str) -> None:
        """The turn ended (its usage is recorded): its reservation goes."""
        ...

    async def first_warning(self, scope_key: str, period_key: str) -> bool:
        """True exactly once per scope and period (`2026-12-03`, `2026-12`): the warning notice is due."""
        ...

    async def days(self, first: str, last: str) -> list[UsageRow]:
        """The day roll-ups from `first` to `last` (inclusive, `YYYY-MM-DD`)."""
        ...

    async def forget(self, who: Forgotten) -> int:
        """A person's identity out of every usage row naming them (replaced by `who.tag`; the tokens stay, so
        the chats', agents' and models' totals are unchanged), and their display name with it; how many rows
        (lines) changed."""
        ...

    async def name_senders(
        self, names: Mapping[tuple[str, str], str], told: Mapping[tuple[str, str], float] | None = None
    ) -> None:
        """Remember the display name of each (channel, sender id) (the latest given wins): per-person usage rows
        name the sender. A name `told` (epoch seconds) no later than a forget of its sender is not kept."""
        ...

    async def sender_names(self, who: Collection[tuple[str, str]]) -> dict[tuple[str, str], str]:
        """The display names known of `who` ((channel, sender id) pairs; those without one are left out)."""
        ...

    async def prune(self, before_month: str) -> int:
        """Retention: the months before `before_month` (`YYYY-MM`) keep only their month roll-up (the calls summed
        per agent, chat, sender, model and purpose; `days` gives it as rows whose `day` is the month); their
        per-call and per-day records (and day totals, warning marks) go. How many day records were folded."""
        ...


class SearchIndexStore(Protocol):
    """One deployment's search index (files: SQLite per agent under `data/<agent>/index/`; PostgreSQL: tables
    shared by every instance). Every write is one atomic step together with its source's watermark, so an indexer
    that crashes resumes from the watermark and loses nothing (the history is the queue: re-reading it from the
    watermark is always safe)."""

    async def add(self, agent: str, source: SourceRef, docs: Sequence[SearchDoc], watermark: str) -> None:
        """Append docs to `source` (their seq above any stored in it; a doc whose seq is stored replaces it) and
        set the source's watermark, atomically."""
        ...

    async def replace_source(self, agent: str, source: SourceRef, docs: Sequence[SearchDoc], watermark: str) -> None:
        """Make `docs` the whole content of `source` (compaction rewrote the history, a memory file was
        rewritten, a redaction), with its watermark, atomically."""
        ...

    async def drop_source(self, agent: str, source: SourceRef) -> None:
        """Remove the source, its docs and its watermark."""
        ...

    async def drop_session(self, agent: str, session: str) -> None:
        """Remove the session's history and archive sources (a deleted session)."""
        ...

    async def watermarks(self, agent: str) -> dict[SourceRef, str]:
        """Every stored source of the agent with its watermark (what an indexer catches up from)."""
        ...

    async def purge(self, agent: str) -> None:
        """After drops or replaces that removed text ("forget me", a deleted session): make sure no copy of removed
        text is left anywhere in the store's files or tables (SQLite: VACUUM and a WAL checkpoint)."""
        ...

    async def search(self, agent: str, terms: Sequence[str], scope: SearchScope, limit: int) -> list[SearchHit]:
        """The best `limit` hits for these distinct query terms within `scope`, in the order of the module
        docstring, each with its neighbours; [] for no terms."""
        ...


class VectorStore(Protocol):
    """One deployment's vectors. Every method may raise `StorageError` (PostgreSQL) like any store call."""

    async def stored(self, agent: str, session: str) -> dict[str, Stored]:
        """digest → what is stored, for every vector of the session."""
        ...

    async def put(self, agent: str, model: str, items: Sequence[tuple[Passage, Vector]]) -> None:
        """Store (or overwrite) the vectors of these passages, each under `digest_of(passage)`."""
        ...

    async def relabel(self, agent: str, session: str, kinds: Mapping[str, str]) -> None:
        """digest → the kind (`history`/`archive`) its passage is of now."""
        ...

    async def remove(self, agent: str, session: str, digests: Collection[str]) -> None: ...

    async def drop_session(self, agent: str, session: str) -> None: ...

    async def nearest(
        self, agent: str, model: str, query: Vector, scope: SearchScope, limit: int
    ) -> list[tuple[Passage, float]]:
        """The `limit` passages of `scope` (histories and archives; vectors are not kept of memory files) whose
        vectors (of `model`) are nearest to `query`, best first, with their cosine similarity."""
        ...

    async def purge(self, agent: str) -> None:
        """After removals ("forget me"): no copy of removed text left in the store's files."""
        ...

    async def close(self) -> None: ...


class TokenCheck(Protocol):
    """What the API's auth guard asks: `TokenStore` over `auth/tokens.json` (files) or `PostgresTokens`."""

    async def identify(self, token: str) -> str | None: ...

    async def has_tokens(self) -> bool: ...


class Tokens(TokenCheck, Protocol):
    """The HTTP API's tokens: `auth/tokens.json` (files) or the table every instance reads (PostgreSQL)."""

    async def stored(self) -> list[StoredToken]:
        """Every stored token (names and hashes, never a token)."""
        ...

    async def create(self, name: str) -> str:
        """A new token named `name`, returned once (ValueError for a bad or taken name)."""
        ...

    async def revoke(self, name: str) -> bool:
        """Delete the token `name`; False when there was none."""
        ...


Built = TypeVar("Built", covariant=True)


class SearchKit(Protocol[Built]):
    """What the search package builds over a backend's index (a searcher, a forget hook, a reindex): the backend
    picks the method that fits the index it keeps, so nobody asks for the backend's name."""

    def beside_files(self, data_dir: Path) -> Built:
        """An index per agent kept beside the data files (`data/<agent>/index/`), built from those files."""
        ...

    def shared_index(self, index: PostgresSearchIndex, feed: PostgresIndexFeed) -> Built:
        """One index every instance shares, `feed` reading the store's histories and memory files into it."""
        ...


class SearchPort(Protocol):
    """Which memory_search index a backend keeps: `open(kit)` has the kit build its product over it."""

    def open(self, kit: SearchKit[Built]) -> Built: ...
