"""The PostgreSQL schema as numbered migrations, applied in one transaction under an advisory lock."""

from __future__ import annotations

from dataclasses import dataclass

import structlog
from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from agenthub.errors import StorageError
from agenthub.storage.postgres.schema_claim_ride import CLAIM_RIDE_SQL, CLAIM_RIDE_WHAT
from agenthub.storage.postgres.schema_forgotten import USAGE_FORGOTTEN_SQL, USAGE_FORGOTTEN_WHAT
from agenthub.storage.postgres.schema_lease_asked import LEASE_ASKED_SQL, LEASE_ASKED_WHAT
from agenthub.storage.postgres.schema_memory_clock import MEMORY_CLOCK_SQL, MEMORY_CLOCK_WHAT
from agenthub.storage.postgres.schema_reserve_set import RESERVE_SET_SQL, RESERVE_SET_WHAT
from agenthub.storage.postgres.schema_search import SEARCH_PACKED_SQL, SEARCH_PACKED_WHAT
from agenthub.storage.postgres.schema_search_names import SEARCH_NAMES_SQL, SEARCH_NAMES_WHAT
from agenthub.storage.postgres.schema_usage import (
    USAGE_NAMES_SQL,
    USAGE_NAMES_WHAT,
    USAGE_RESERVE_EXCEPT_SQL,
    USAGE_RESERVE_EXCEPT_WHAT,
    USAGE_TOTALS_SQL,
    USAGE_TOTALS_WHAT,
)

log = structlog.get_logger(__name__)

MIGRATION_LOCK = 0x61_67_65_6E_74_68_75_62  # "agenthub": one advisory lock id for every instance of the product
"""Two instances starting together: the second waits for the first's migrations, then finds nothing to do."""


@dataclass(frozen=True)
class Migration:
    version: int
    what: str
    sql: tuple[str, ...]


SESSIONS = Migration(
    1,
    "session histories, archives and meta",
    (
        # one row per session that has a working history (an empty one after a replace with no records);
        # `next_seq` orders its records, `changed_at` is what AutoCompact and L3 pick sessions by
        """CREATE TABLE session_heads (
            agent text NOT NULL,
            channel text NOT NULL,
            chat_id text NOT NULL,
            next_seq bigint NOT NULL,
            changed_at timestamptz NOT NULL,
            PRIMARY KEY (agent, channel, chat_id)
        )""",
        "CREATE INDEX session_heads_by_activity ON session_heads (agent, changed_at DESC)",
        # `json`, not `jsonb`: a record comes back exactly as written (key order too), and a user's "\\u0000"
        # is stored where jsonb would refuse it
        """CREATE TABLE session_records (
            agent text NOT NULL,
            channel text NOT NULL,
            chat_id text NOT NULL,
            seq bigint NOT NULL,
            record json NOT NULL,
            PRIMARY KEY (agent, channel, chat_id, seq)
        )""",
        """CREATE TABLE session_archive (
            agent text NOT NULL,
            channel text NOT NULL,
            chat_id text NOT NULL,
            seq bigint NOT NULL,
            record json NOT NULL,
            archived_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (agent, channel, chat_id, seq)
        )""",
        """CREATE TABLE session_meta (
            agent text NOT NULL,
            channel text NOT NULL,
            chat_id text NOT NULL,
            meta json NOT NULL,
            PRIMARY KEY (agent, channel, chat_id)
        )""",
    ),
)

SHARED_STATE = Migration(
    2,
    "memory files, the inbox, leases, dedup memory and API tokens",
    (
        # one row per memory file (MEMORY.md, USER.md, chat and per-user files, their `.bak`, the L3 watermark);
        # `bytea` holds any text a file can, a NUL included (which `text` refuses)
        """CREATE TABLE memory_files (
            kind text NOT NULL,
            agent text NOT NULL,
            chat text NOT NULL,
            person text NOT NULL,
            backup boolean NOT NULL,
            body bytea NOT NULL,
            changed_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (kind, agent, chat, person, backup)
        )""",
        # accepted, not yet answered messages; a settled one is deleted
        """CREATE TABLE inbox (
            seq bigserial PRIMARY KEY,
            id text NOT NULL UNIQUE,
            source text NOT NULL,
            accepted_at double precision NOT NULL,
            payload json NOT NULL
        )""",
        "CREATE INDEX inbox_by_source ON inbox (source text_pattern_ops, seq)",
        # one row per lease name, kept when released (expired at once), so its fencing token only ever grows
        """CREATE TABLE leases (
            name text PRIMARY KEY,
            holder text NOT NULL,
            token bigint NOT NULL,
            expires_at timestamptz NOT NULL
        )""",
        """CREATE TABLE seen_ids (
            scope text NOT NULL,
            key text NOT NULL,
            expires_at timestamptz NOT NULL,
            PRIMARY KEY (scope, key)
        )""",
        "CREATE INDEX seen_ids_by_expiry ON seen_ids (expires_at)",
        """CREATE TABLE api_tokens (
            name text PRIMARY KEY,
            sha256 text NOT NULL,
            created_at bigint NOT NULL
        )""",
    ),
)

TURNS = Migration(
    3,
    "session fences and the session of each inbox entry",
    (
        # the fencing token of the newest session lease that fenced each session; never deleted (a cleared or
        # deleted session keeps it), so a write under an older lease is refused for ever
        """CREATE TABLE session_fences (
            agent text NOT NULL,
            channel text NOT NULL,
            chat_id text NOT NULL,
            fence bigint NOT NULL,
            PRIMARY KEY (agent, channel, chat_id)
        )""",
        # the session (`agent:channel:chat_id`) an entry belongs to, once known: per-session arrival order
        "ALTER TABLE inbox ADD COLUMN session text",
        "CREATE INDEX inbox_by_session ON inbox (session, seq)",
    ),
)

INBOX_OWNERS = Migration(
    4,
    "the instance answering each inbox entry",
    (
        # the holder of the instance that accepted (or took over) the entry; NULL: none (copied by `store migrate`),
        # so any live instance may claim it. An entry whose owner's `instance:<owner>` lease is gone is claimed
        # by a survivor
        "ALTER TABLE inbox ADD COLUMN owner text",
        "CREATE INDEX inbox_by_owner ON inbox (owner, seq)",
    ),
)

JOBS_AND_OUTBOX = Migration(
    5,
    "scheduled jobs and the outbox of sends for another instance's connection",
    (
        # one row per job; `next_due` (NULL once a one-off has run) guards the record of a fire: the UPDATE or
        # DELETE that records it names the due time it fires, so of several instances exactly one records it
        """CREATE TABLE jobs (
            agent text NOT NULL,
            id text NOT NULL,
            next_due double precision,
            doc json NOT NULL,
            changed_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (agent, id)
        )""",
        # a proactive send that only another instance can make (the holder of a WeCom AI bot's connection):
        # `pending` → `claimed` (by one drainer, until `claimed_until`) → `sent` or `failed` with a fixed reason
        """CREATE TABLE outbox (
            id bigserial PRIMARY KEY,
            target text NOT NULL,
            payload json NOT NULL,
            state text NOT NULL DEFAULT 'pending',
            claimed_by text,
            claimed_until timestamptz,
            reason text,
            created_at timestamptz NOT NULL DEFAULT now(),
            finished_at timestamptz
        )""",
        "CREATE INDEX outbox_open ON outbox (target, id) WHERE state IN ('pending', 'claimed')",
        "CREATE INDEX outbox_finished ON outbox (finished_at) WHERE finished_at IS NOT NULL",
    ),
)

COPIES_AND_SENDS = Migration(
    6,
    "what store migrate copied, and the per-member send counts (WeCom)",
    (
        # one row per item `agenthub store migrate` copied (a session, a memory file, a token, an inbox entry) with
        # a digest of what it wrote: a re-run leaves alone what the database changed since
        """CREATE TABLE store_copies (
            kind text NOT NULL,
            item text NOT NULL,
            digest text NOT NULL,
            copied_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (kind, item)
        )""",
        # one row per message sent to a member (a WeCom app's `message/send`) by any instance, on the database's
        # clock; rows that left every window are deleted as sends are counted
        """CREATE TABLE member_sends (
            scope text NOT NULL,
            member text NOT NULL,
            seq bigserial,
            sent_at double precision NOT NULL,
            PRIMARY KEY (scope, member, seq)
        )""",
        "CREATE INDEX member_sends_by_time ON member_sends (scope, sent_at)",
    ),
)

SEARCH_INDEX = Migration(
    7,
    "the memory_search index every instance shares",
    (
        # one row per searchable passage: a history or archive record (`seq` = its `seq` in the session's table)
        # or a memory file's line (`session` '', `name` the file's index name); `length`: its number of terms
        """CREATE TABLE search_docs (
            id bigserial PRIMARY KEY,
            agent text NOT NULL,
            kind text NOT NULL,
            session text NOT NULL,
            name text NOT NULL,
            seq bigint NOT NULL,
            role text NOT NULL,
            speaker text,
            ts bigint,
            body text NOT NULL,
            length integer NOT NULL,
            UNIQUE (agent, kind, session, name, seq)
        )""",
        "CREATE INDEX search_docs_by_time ON search_docs (agent, ts)",
        # term → passage with its frequency; the passage's length, time, source (`src`: its session, or a memory
        # file's name) and channel ride along in the key's index, so a query is ranked and scoped by index-only
        # scans of its terms' postings
        """CREATE TABLE search_postings (
            agent text NOT NULL,
            term text NOT NULL,
            doc bigint NOT NULL,
            tf integer NOT NULL,
            length integer NOT NULL,
            ts bigint,
            src text NOT NULL,
            channel text NOT NULL,
            PRIMARY KEY (agent, term, doc) INCLUDE (tf, length, ts, src, channel)
        )""",
        "CREATE INDEX search_postings_by_doc ON search_postings (doc)",
        # BM25's N and total length per agent (a term's df is counted over its postings when asked)
        """CREATE TABLE search_stats (
            agent text PRIMARY KEY,
            docs bigint NOT NULL,
            total_length bigint NOT NULL
        )""",
        # how far each source is indexed (the indexer's own watermark text) and, for a history, the session head
        # it was indexed at: a session whose head moved since lags behind and is caught up before a search
        """CREATE TABLE search_sources (
            agent text NOT NULL,
            kind text NOT NULL,
            session text NOT NULL,
            name text NOT NULL,
            watermark text NOT NULL,
            head text,
            PRIMARY KEY (agent, kind, session, name)
        )""",
    ),
)

USAGE_RESERVE = """CREATE FUNCTION usage_reserve(
    p_id text, p_kinds text[], p_channels text[], p_idents text[], p_keys text[],
    p_day_limits bigint[], p_month_limits bigint[], p_day date, p_tokens bigint, p_ttl double precision
) RETURNS TABLE (o_scope text, o_day bigint, o_month bigint, o_reserved boolean) LANGUAGE plpgsql AS $$
DECLARE
    i int;
    d bigint;
    m bigint;
    r bigint;
    refused boolean := false;
    first date := date_trunc('month', p_day)::date;
BEGIN
    -- one budget check at a time per scope, across instances; the caller sorts the keys (no ring of waits)
    FOR i IN 1 .. coalesce(array_length(p_keys, 1), 0) LOOP
        PERFORM pg_advisory_xact_lock(hashtextextended('budget:' || p_keys[i], 0));
    END LOOP;
    -- each query below takes a new snapshot: it sees what was committed while this call waited for a lock
    FOR i IN 1 .. coalesce(array_length(p_keys, 1), 0) LOOP
        SELECT coalesce(sum(u.input + u.output + u.cache_read + u.cache_write) FILTER (WHERE u.day = p_day), 0),
               coalesce(sum(u.input + u.output + u.cache_read + u.cache_write), 0)
          INTO d, m FROM usage_days u
         WHERE u.day >= first AND u.day <= p_day AND CASE p_kinds[i]
               WHEN 'agent' THEN u.agent = p_idents[i]
               WHEN 'user' THEN u.channel = p_channels[i] AND u.sender_id = p_idents[i]
               ELSE u.channel = p_channels[i] AND u.chat_id = p_idents[i] END;
        SELECT coalesce(sum(x.tokens), 0) INTO r FROM usage_reservations x
         WHERE x.scope = p_keys[i] AND x.expires_at > clock_timestamp();
        IF (p_day_limits[i] > 0 AND d + r >= p_day_limits[i]) OR (p_month_limits[i] > 0 AND m + r >= p_month_limits[i])
        THEN
            refused := true;
        END IF;
        o_scope := p_keys[i]; o_day := d + r; o_month := m + r; o_reserved := NOT refused;
        RETURN NEXT;
    END LOOP;
    IF NOT refused THEN
        INSERT INTO usage_reservations (id, scope, tokens, expires_at)
        SELECT p_id, k, p_tokens, clock_timestamp() + make_interval(secs => p_ttl) FROM unnest(p_keys) AS k;
    END IF;
END $$"""

USAGE = Migration(
    8,
    "model usage per call and per day, budget reservations and warnings",
    (
        # the journal: one row per model call, as the vendor reported it (`estimated`: it reported nothing)
        """CREATE TABLE usage_calls (
            id bigserial PRIMARY KEY,
            at timestamptz NOT NULL DEFAULT now(),
            day date NOT NULL,
            purpose text NOT NULL,
            agent text NOT NULL,
            channel text NOT NULL,
            chat_id text NOT NULL,
            sender_id text NOT NULL,
            model text NOT NULL,
            input bigint NOT NULL,
            output bigint NOT NULL,
            cache_read bigint NOT NULL,
            cache_write bigint NOT NULL,
            estimated boolean NOT NULL DEFAULT false
        )""",
        "CREATE INDEX usage_calls_by_day ON usage_calls (day)",
        # the daily roll-up every view and budget check reads (day in `scheduler.timezone`)
        """CREATE TABLE usage_days (
            day date NOT NULL,
            agent text NOT NULL,
            channel text NOT NULL,
            chat_id text NOT NULL,
            sender_id text NOT NULL,
            model text NOT NULL,
            purpose text NOT NULL,
            input bigint NOT NULL DEFAULT 0,
            output bigint NOT NULL DEFAULT 0,
            cache_read bigint NOT NULL DEFAULT 0,
            cache_write bigint NOT NULL DEFAULT 0,
            calls bigint NOT NULL DEFAULT 0,
            estimated bigint NOT NULL DEFAULT 0,
            PRIMARY KEY (day, agent, channel, chat_id, sender_id, model, purpose)
        )""",
        "CREATE INDEX usage_days_by_sender ON usage_days (channel, sender_id, day)",
        "CREATE INDEX usage_days_by_chat ON usage_days (channel, chat_id, day)",
        "CREATE INDEX usage_days_by_agent ON usage_days (agent, day)",
        # what running turns reserved, one row per scope; a dead instance's rows lapse at `expires_at`
        """CREATE TABLE usage_reservations (
            id text NOT NULL,
            scope text NOT NULL,
            tokens bigint NOT NULL,
            expires_at timestamptz NOT NULL,
            PRIMARY KEY (id, scope)
        )""",
        "CREATE INDEX usage_reservations_by_scope ON usage_reservations (scope, expires_at)",
        # the warning notice went out for this scope and period (once per period, whichever instance sent it)
        """CREATE TABLE usage_warnings (
            scope text NOT NULL,
            period text NOT NULL,
            PRIMARY KEY (scope, period)
        )""",
        USAGE_RESERVE,
    ),
)


IDEMPOTENCY_KEYS = Migration(
    9,
    "the HTTP API's idempotency keys",
    (
        # one row per (token/agent/chat, Idempotency-Key) taken by a chat request: its body's digest, whether its
        # message was stored, and its final reply once answered; rows out of the window are deleted now and then
        """CREATE TABLE idempotency_keys (
            scope text NOT NULL,
            key text NOT NULL,
            fingerprint text NOT NULL,
            accepted boolean NOT NULL DEFAULT false,
            final json,
            created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (scope, key)
        )""",
        "CREATE INDEX idempotency_keys_by_age ON idempotency_keys (created_at)",
    ),
)


SEARCH_VECTORS = Migration(
    10,
    "[search.embeddings]: one vector per searchable message",
    (
        # keyed by the session and the digest of the passage's identity (role, time, text); the passage is kept for
        # a hit only the vectors found; vec: float32 little-endian, unit length. Removed with the session's text.
        """CREATE TABLE search_vectors (
            agent text NOT NULL,
            session text NOT NULL,
            digest text NOT NULL,
            kind text NOT NULL,
            seq bigint NOT NULL,
            role text NOT NULL,
            speaker text,
            ts bigint,
            text text NOT NULL,
            model text NOT NULL,
            vec bytea NOT NULL,
            PRIMARY KEY (agent, session, digest)
        )""",
        "CREATE INDEX search_vectors_by_model ON search_vectors (agent, model)",
    ),
)

USAGE_RESERVE_FORGOTTEN = Migration(
    11,
    "a sender's budget also counts their usage rows redacted by a forget (named by their tag)",
    (
        USAGE_RESERVE.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1).replace(
            "WHEN 'user' THEN u.channel = p_channels[i] AND u.sender_id = p_idents[i]",
            "WHEN 'user' THEN u.channel = p_channels[i] AND u.sender_id IN (p_idents[i], 'forgotten-' || "
            "left(encode(sha256(convert_to(p_channels[i] || E'\\n' || p_idents[i], 'UTF8')), 'hex'), 16))",
            1,
        ),
    ),
)
"""`usage_reserve` again, its `user` scope matching the sender's id or their forget tag (`Person.tag`): a forget
leaves their day's and month's usage counted against their own budget."""


SEARCH_CACHES = Migration(
    12,
    "what lets an instance keep search data in memory and rank the top hits only",
    (
        # per agent: `generation` moves with every removal of a vector, `appended` with every put (its row lock
        # makes an agent's puts commit in the order of their `added` numbers): an instance's cached vectors are
        # brought level by the rows added since it last read, or read again whole when the generation moved
        """CREATE TABLE IF NOT EXISTS search_vector_state (
            agent text PRIMARY KEY,
            generation bigint NOT NULL,
            appended bigint NOT NULL
        )""",
        "CREATE SEQUENCE IF NOT EXISTS search_vectors_added_seq",
        "ALTER TABLE search_vectors ADD COLUMN IF NOT EXISTS added bigint NOT NULL "
        "DEFAULT nextval('search_vectors_added_seq')",
        "CREATE INDEX IF NOT EXISTS search_vectors_by_added ON search_vectors (agent, model, added)",
        # per agent and term: how many docs hold it (BM25's df, kept by every write, so a search never counts it); a
        # term no doc holds any more is deleted with its last doc
        """CREATE TABLE IF NOT EXISTS search_terms (
            agent text NOT NULL,
            term text NOT NULL,
            df bigint NOT NULL,
            PRIMARY KEY (agent, term)
        )""",
        """INSERT INTO search_terms (agent, term, df)
        SELECT agent, term, count(*) FROM search_postings GROUP BY agent, term
        ON CONFLICT (agent, term) DO NOTHING""",
        # moves whenever a write removes docs of the agent: what an instance holds of its postings in memory is
        # read again (added docs are read by id: an agent's writers take its row first, so ids grow in commit order)
        "ALTER TABLE search_stats ADD COLUMN IF NOT EXISTS generation bigint NOT NULL DEFAULT 0",
    ),
)

SESSION_WRITES = Migration(
    13,
    "a fenced session write in one round trip: the append, the fence and the meta as functions",
    (
        # the session's advisory lock, then (each statement of a function sees what committed before it) the fence
        # check and the write: what `_lock_fenced` + the write did in a transaction of four round trips
        """CREATE FUNCTION agenthub_session_append(
            p_agent text, p_channel text, p_chat_id text, p_token bigint, p_records text[]
        ) RETURNS boolean LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_advisory_xact_lock(hashtextextended(p_agent || ':' || p_channel || ':' || p_chat_id, 0));
            IF EXISTS (
                SELECT 1 FROM session_fences
                WHERE agent = p_agent AND channel = p_channel AND chat_id = p_chat_id AND fence > p_token
            ) THEN
                RETURN false;
            END IF;
            WITH head AS (
                INSERT INTO session_heads AS h (agent, channel, chat_id, next_seq, changed_at)
                VALUES (p_agent, p_channel, p_chat_id, cardinality(p_records), now())
                ON CONFLICT (agent, channel, chat_id)
                DO UPDATE SET next_seq = h.next_seq + EXCLUDED.next_seq, changed_at = EXCLUDED.changed_at
                RETURNING next_seq
            )
            INSERT INTO session_records (agent, channel, chat_id, seq, record)
            SELECT p_agent, p_channel, p_chat_id, head.next_seq - cardinality(p_records) + t.ord - 1, t.record::json
            FROM head, unnest(p_records) WITH ORDINALITY AS t(record, ord);
            RETURN true;
        END $$""",
        # the fence before this call (NULL: none); raised to p_token unless a newer one is there
        """CREATE FUNCTION agenthub_session_fence(
            p_agent text, p_channel text, p_chat_id text, p_token bigint
        ) RETURNS bigint LANGUAGE plpgsql AS $$
        DECLARE
            previous bigint;
        BEGIN
            PERFORM pg_advisory_xact_lock(hashtextextended(p_agent || ':' || p_channel || ':' || p_chat_id, 0));
            SELECT fence INTO previous FROM session_fences
            WHERE agent = p_agent AND channel = p_channel AND chat_id = p_chat_id;
            INSERT INTO session_fences AS f (agent, channel, chat_id, fence)
            VALUES (p_agent, p_channel, p_chat_id, p_token)
            ON CONFLICT (agent, channel, chat_id) DO UPDATE SET fence = EXCLUDED.fence WHERE f.fence < EXCLUDED.fence;
            RETURN previous;
        END $$""",
        # the meta, under the lease's token when there is one (false: a newer lease fenced it); one that may be
        # lost in a server crash does not wait for the WAL flush
        """CREATE FUNCTION agenthub_session_write_meta(
            p_agent text, p_channel text, p_chat_id text, p_token bigint, p_meta text, p_durable boolean
        ) RETURNS boolean LANGUAGE plpgsql AS $$
        BEGIN
            IF NOT p_durable THEN
                PERFORM set_config('synchronous_commit', 'off', true);
            END IF;
            IF p_token IS NOT NULL THEN
                PERFORM pg_advisory_xact_lock(hashtextextended(p_agent || ':' || p_channel || ':' || p_chat_id, 0));
                IF EXISTS (
                    SELECT 1 FROM session_fences
                    WHERE agent = p_agent AND channel = p_channel AND chat_id = p_chat_id AND fence > p_token
                ) THEN
                    RETURN false;
                END IF;
            END IF;
            INSERT INTO session_meta (agent, channel, chat_id, meta)
            VALUES (p_agent, p_channel, p_chat_id, p_meta::json)
            ON CONFLICT (agent, channel, chat_id) DO UPDATE SET meta = EXCLUDED.meta;
            RETURN true;
        END $$""",
    ),
)

SEARCH_REMOVALS = Migration(
    14,
    "the search docs each removal took away, so an instance takes them out of its cached postings",
    (
        # per agent and generation (`search_stats.generation`, moved by each write that removes docs): the ids of the
        # docs that write removed (ids only, never text); an instance that holds postings of an older generation
        # takes those docs out of them instead of reading every term again; the oldest are pruned as new ones come
        """CREATE TABLE IF NOT EXISTS search_removed (
            agent text NOT NULL,
            generation bigint NOT NULL,
            docs bigint[] NOT NULL,
            PRIMARY KEY (agent, generation)
        )""",
    ),
)
USAGE_RESERVE_CLAIMS = Migration(
    16,
    "a budget check in one cheap call: claims as one JSON text, each scope's usage read through its index, a chat "
    "also counting its rows renamed by a forget",
    (
        # the claims in the caller's (sorted) order: [{"kind", "channel", "ident", "key", "day", "month"}, …]; one
        # text parameter instead of six arrays (cheaper to send), and one query per kind instead of a CASE in the
        # WHERE clause, so each reads its scope's rows by index; a user's or a direct chat's rows renamed by a forget
        # (`forgotten-` + the hash of channel and id, as `Person.tag`) still count against their budget
        """CREATE FUNCTION usage_reserve_claims(
            p_id text, p_claims text, p_day date, p_tokens bigint, p_ttl double precision
        ) RETURNS TABLE (o_scope text, o_day bigint, o_month bigint, o_reserved boolean) LANGUAGE plpgsql AS $$
        DECLARE
            c record;
            d bigint;
            m bigint;
            r bigint;
            tag text;
            refused boolean := false;
            first date := date_trunc('month', p_day)::date;
        BEGIN
            FOR c IN SELECT t.e ->> 'key' AS key FROM json_array_elements(p_claims::json) WITH ORDINALITY AS t(e, n)
                     ORDER BY t.n LOOP
                PERFORM pg_advisory_xact_lock(hashtextextended('budget:' || c.key, 0));
            END LOOP;
            FOR c IN SELECT t.e ->> 'kind' AS kind, t.e ->> 'channel' AS channel, t.e ->> 'ident' AS ident,
                            t.e ->> 'key' AS key, (t.e ->> 'day')::bigint AS day, (t.e ->> 'month')::bigint AS month
                       FROM json_array_elements(p_claims::json) WITH ORDINALITY AS t(e, n) ORDER BY t.n LOOP
                tag := 'forgotten-'
                    || left(encode(sha256(convert_to(c.channel || E'\\n' || c.ident, 'UTF8')), 'hex'), 16);
                IF c.kind = 'agent' THEN
                    SELECT coalesce(sum(u.input + u.output + u.cache_read + u.cache_write)
                                    FILTER (WHERE u.day = p_day), 0),
                           coalesce(sum(u.input + u.output + u.cache_read + u.cache_write), 0)
                      INTO d, m FROM usage_days u WHERE u.agent = c.ident AND u.day >= first AND u.day <= p_day;
                ELSIF c.kind = 'user' THEN
                    SELECT coalesce(sum(u.input + u.output + u.cache_read + u.cache_write)
                                    FILTER (WHERE u.day = p_day), 0),
                           coalesce(sum(u.input + u.output + u.cache_read + u.cache_write), 0)
                      INTO d, m FROM usage_days u
                     WHERE u.channel = c.channel AND u.sender_id IN (c.ident, tag)
                       AND u.day >= first AND u.day <= p_day;
                ELSE
                    SELECT coalesce(sum(u.input + u.output + u.cache_read + u.cache_write)
                                    FILTER (WHERE u.day = p_day), 0),
                           coalesce(sum(u.input + u.output + u.cache_read + u.cache_write), 0)
                      INTO d, m FROM usage_days u
                     WHERE u.channel = c.channel AND u.chat_id IN (c.ident, tag)
                       AND u.day >= first AND u.day <= p_day;
                END IF;
                SELECT coalesce(sum(x.tokens), 0) INTO r FROM usage_reservations x
                 WHERE x.scope = c.key AND x.expires_at > clock_timestamp();
                IF (c.day > 0 AND d + r >= c.day) OR (c.month > 0 AND m + r >= c.month) THEN
                    refused := true;
                END IF;
                o_scope := c.key; o_day := d + r; o_month := m + r; o_reserved := NOT refused;
                RETURN NEXT;
            END LOOP;
            IF NOT refused THEN
                INSERT INTO usage_reservations (id, scope, tokens, expires_at)
                SELECT p_id, x.key, p_tokens, clock_timestamp() + make_interval(secs => p_ttl)
                  FROM json_to_recordset(p_claims::json) AS x(key text);
            END IF;
        END $$""",
    ),
)
"""`usage_reserve` (migrations 8 and 11) stays for instances not upgraded yet."""

USAGE_TOTALS = Migration(17, USAGE_TOTALS_WHAT, USAGE_TOTALS_SQL)
"""Migration 17 (`schema_usage`): the running usage totals the budget check reads."""

SEARCH_DOC_TERMS = Migration(
    18,
    "each search doc keeps its distinct terms, so its postings are deleted through their primary key and the "
    "postings need no second index by doc (one b-tree entry per posting written instead of two); df rows updated "
    "in place",
    (
        "ALTER TABLE search_docs ADD COLUMN terms text[] NOT NULL DEFAULT '{}'",
        """UPDATE search_docs d SET terms = ARRAY(SELECT p.term FROM search_postings p WHERE p.doc = d.id)""",
        "DROP INDEX search_postings_by_doc",
        # a term's df is updated by every batch that holds it: room left on each page lets the new row version stay
        # on its page (a heap-only update, no new index entry); pages written from now on
        "ALTER TABLE search_terms SET (fillfactor = 80)",
    ),
)

SESSION_CLAIMS = Migration(
    19,
    "a session's lease, fence, new records and meta in one round trip; an append that returns the history's version",
    (
        # `born` changes whenever a history is rewritten or started again (a replace draws a new one; a clear
        # deletes the head, the next append creates it with a new one): an instance's cached copy of a history
        # is current while (born, next_seq) is what it last saw, and otherwise needs only the records after it
        "CREATE SEQUENCE session_born",
        "ALTER TABLE session_heads ADD COLUMN born bigint NOT NULL DEFAULT nextval('session_born')",
        # any records deleted start a new generation, whoever deletes them: an instance not upgraded yet replaces a
        # history (a compaction, a forget) by deleting its records and appending with the seqs going on, which
        # would otherwise leave the copies of upgraded instances current and bring the removed records back
        """CREATE FUNCTION agenthub_session_records_gone() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE session_heads h SET born = nextval('session_born')
            FROM (SELECT DISTINCT agent, channel, chat_id FROM gone) g
            WHERE h.agent = g.agent AND h.channel = g.channel AND h.chat_id = g.chat_id;
            RETURN NULL;
        END $$""",
        "CREATE TRIGGER session_records_gone AFTER DELETE ON session_records REFERENCING OLD TABLE AS gone "
        "FOR EACH STATEMENT EXECUTE FUNCTION agenthub_session_records_gone()",
        # the lease `p_name` for `p_holder` (as `PostgresLeases.acquire`); refused: the holder is asked for it
        # (NOTIFY agenthub_lease_wanted) and o_token is NULL; granted: the session fenced with its token
        # (o_fence: the fence before, as `agenthub_session_fence`) and, unless a newer token fenced it already,
        # read after the fence (each statement its own snapshot): the history's version, its meta, then one row per
        # record from seq `p_since` on, or every record when its generation is not `p_born`
        """CREATE FUNCTION agenthub_session_claim(
            p_name text, p_holder text, p_ttl double precision, p_agent text, p_channel text, p_chat_id text,
            p_born bigint, p_since bigint
        ) RETURNS TABLE (
            o_token bigint, o_fence bigint, o_born bigint, o_next bigint, o_meta text, o_seq bigint, o_record text
        ) LANGUAGE plpgsql AS $$
        DECLARE
            v_born bigint;
        BEGIN
            INSERT INTO leases AS l (name, holder, token, expires_at)
            VALUES (p_name, p_holder, 1, now() + p_ttl * interval '1 second')
            ON CONFLICT (name) DO UPDATE SET
                holder = EXCLUDED.holder,
                token = CASE WHEN l.holder = EXCLUDED.holder AND l.expires_at > now() THEN l.token
                             ELSE l.token + 1 END,
                expires_at = EXCLUDED.expires_at
            WHERE l.expires_at <= now() OR l.holder = EXCLUDED.holder
            RETURNING l.token INTO o_token;
            IF o_token IS NULL THEN
                PERFORM pg_notify('agenthub_lease_wanted', p_name);
                RETURN NEXT;
                RETURN;
            END IF;
            o_fence := agenthub_session_fence(p_agent, p_channel, p_chat_id, o_token);
            IF o_fence IS NOT NULL AND o_fence > o_token THEN
                RETURN NEXT;
                RETURN;
            END IF;
            SELECT h.born, h.next_seq INTO o_born, o_next FROM session_heads h
            WHERE h.agent = p_agent AND h.channel = p_channel AND h.chat_id = p_chat_id;
            SELECT m.meta::text INTO o_meta FROM session_meta m
            WHERE m.agent = p_agent AND m.channel = p_channel AND m.chat_id = p_chat_id;
            RETURN NEXT;
            v_born := o_born;
            RETURN QUERY
                SELECT NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::text, r.seq, r.record::text
                FROM session_records r
                WHERE r.agent = p_agent AND r.channel = p_channel AND r.chat_id = p_chat_id
                  AND (r.seq >= p_since OR v_born IS DISTINCT FROM p_born)
                ORDER BY r.seq;
        END $$""",
        # a session let go: its lease released (NOTIFY agenthub_lease_freed) and, in the same transaction, the meta
        # written behind under the lease's token (as `agenthub_session_write_meta`, refused when a newer lease
        # fenced the session); the lease row first, then the session's lock, the order of `agenthub_session_claim`
        """CREATE FUNCTION agenthub_session_let_go(
            p_name text, p_token bigint, p_agent text, p_channel text, p_chat_id text, p_meta text
        ) RETURNS boolean LANGUAGE plpgsql AS $$
        DECLARE
            v_freed text;
        BEGIN
            UPDATE leases SET expires_at = now() WHERE name = p_name AND token = p_token AND expires_at > now()
            RETURNING name INTO v_freed;
            IF v_freed IS NOT NULL THEN
                PERFORM pg_notify('agenthub_lease_freed', v_freed);
            END IF;
            IF p_meta IS NULL THEN
                RETURN true;
            END IF;
            RETURN agenthub_session_write_meta(p_agent, p_channel, p_chat_id, p_token, p_meta, false);
        END $$""",
        # `agenthub_session_append` (a NULL token: unfenced) returning the history's version after it,
        # {born, next_seq}; NULL when a newer lease fenced the session
        """CREATE FUNCTION agenthub_session_append_at(
            p_agent text, p_channel text, p_chat_id text, p_token bigint, p_records text[]
        ) RETURNS bigint[] LANGUAGE plpgsql AS $$
        DECLARE
            v_born bigint;
            v_next bigint;
        BEGIN
            IF p_token IS NOT NULL THEN
                PERFORM pg_advisory_xact_lock(hashtextextended(p_agent || ':' || p_channel || ':' || p_chat_id, 0));
                IF EXISTS (
                    SELECT 1 FROM session_fences
                    WHERE agent = p_agent AND channel = p_channel AND chat_id = p_chat_id AND fence > p_token
                ) THEN
                    RETURN NULL;
                END IF;
            END IF;
            INSERT INTO session_heads AS h (agent, channel, chat_id, next_seq, changed_at)
            VALUES (p_agent, p_channel, p_chat_id, cardinality(p_records), now())
            ON CONFLICT (agent, channel, chat_id)
            DO UPDATE SET next_seq = h.next_seq + EXCLUDED.next_seq, changed_at = EXCLUDED.changed_at
            RETURNING h.born, h.next_seq INTO v_born, v_next;
            INSERT INTO session_records (agent, channel, chat_id, seq, record)
            SELECT p_agent, p_channel, p_chat_id, v_next - cardinality(p_records) + t.ord - 1, t.record::json
            FROM unnest(p_records) WITH ORDINALITY AS t(record, ord);
            RETURN ARRAY[v_born, v_next];
        END $$""",
    ),
)
"""`agenthub_session_append` (migration 13) stays for instances not upgraded yet."""

USAGE_NAMES = Migration(20, USAGE_NAMES_WHAT, USAGE_NAMES_SQL)
"""Migration 20 (`schema_usage`): the senders' display names of the usage views."""

SEARCH_PACKED = Migration(21, SEARCH_PACKED_WHAT, SEARCH_PACKED_SQL)
"""Migration 21 (`schema_search`): postings packed per term in blocks, docs pending until packed."""

USAGE_RESERVE_EXCEPT = Migration(22, USAGE_RESERVE_EXCEPT_WHAT, USAGE_RESERVE_EXCEPT_SQL)
"""Migration 22 (`schema_usage`): the budget check leaving out an instance's settled reservations whose usage it
stored (instead of writing their release first)."""

USAGE_FORGOTTEN = Migration(23, USAGE_FORGOTTEN_WHAT, USAGE_FORGOTTEN_SQL)
"""Migration 23 (`schema_forgotten`): forget marks every usage write checks."""

SEARCH_NAMES = Migration(24, SEARCH_NAMES_WHAT, SEARCH_NAMES_SQL)
"""Migration 24 (`schema_search_names`): a block's postings name their source and channel by a per-agent code."""

MEMORY_CLOCK = Migration(25, MEMORY_CLOCK_WHAT, MEMORY_CLOCK_SQL)
"""Migration 25 (`schema_memory_clock`): the memory files' version, which a turn learns with its history append."""

CLAIM_RIDE = Migration(26, CLAIM_RIDE_WHAT, CLAIM_RIDE_SQL)
"""Migration 26 (`schema_claim_ride`): a session's claim with a turn's budget reservation riding in it."""

LEASE_ASKED = Migration(27, LEASE_ASKED_WHAT, LEASE_ASKED_SQL)
"""Migration 27 (`schema_lease_asked`): a lease's release announced only when another instance asked for it."""

RESERVE_SET = Migration(30, RESERVE_SET_WHAT, RESERVE_SET_SQL)
"""Migration 30 (`schema_reserve_set`): the budget check and reservation in two statements (beside migration 22's)."""

MIGRATIONS: tuple[Migration, ...] = (
    SESSIONS,
    SHARED_STATE,
    TURNS,
    INBOX_OWNERS,
    JOBS_AND_OUTBOX,
    COPIES_AND_SENDS,
    SEARCH_INDEX,
    USAGE,
    IDEMPOTENCY_KEYS,
    SEARCH_VECTORS,
    USAGE_RESERVE_FORGOTTEN,
    SEARCH_CACHES,
    SESSION_WRITES,
    SEARCH_REMOVALS,
    USAGE_RESERVE_CLAIMS,
    USAGE_TOTALS,
    SEARCH_DOC_TERMS,
    SESSION_CLAIMS,
    USAGE_NAMES,
    SEARCH_PACKED,
    USAGE_RESERVE_EXCEPT,
    USAGE_FORGOTTEN,
    SEARCH_NAMES,
    MEMORY_CLOCK,
    CLAIM_RIDE,
    LEASE_ASKED,
    RESERVE_SET,
)
"""Append only, never edit a released one."""
SCHEMA_VERSION = MIGRATIONS[-1].version

_VERSION_TABLE = """CREATE TABLE IF NOT EXISTS schema_version (
    version integer PRIMARY KEY,
    what text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""


class SchemaTooNewError(StorageError):
    """The database was migrated by a newer AgentHub than this one."""


async def apply_migrations(conn: AsyncConnection[TupleRow]) -> list[int]:
    """Bring the schema to `SCHEMA_VERSION` in one transaction; the versions applied ([] when it was current)."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        await conn.execute(_VERSION_TABLE)
        current = await _current_version(conn)
        if current > SCHEMA_VERSION:
            raise SchemaTooNewError(
                f"the database schema is version {current}, newer than this AgentHub's {SCHEMA_VERSION}: upgrade it"
            )
        applied = []
        for migration in MIGRATIONS:
            if migration.version > current:
                for statement in migration.sql:
                    await conn.execute(statement)
                await conn.execute(
                    "INSERT INTO schema_version (version, what) VALUES (%s, %s)", (migration.version, migration.what)
                )
                applied.append(migration.version)
    if applied:
        log.info("store_schema_migrated", from_version=current, to_version=SCHEMA_VERSION)
    return applied


async def _current_version(conn: AsyncConnection[TupleRow]) -> int:
    cursor = await conn.execute("SELECT coalesce(max(version), 0) FROM schema_version")
    row = await cursor.fetchone()
    return int(row[0]) if row is not None else 0
