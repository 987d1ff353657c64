"""Migrations 1-6 and 9: the first tables (session histories, memory files, the inbox, leases, seen ids, API
tokens, session fences, jobs, the outbox, `store migrate`'s copies, member sends, idempotency keys)."""

from __future__ import annotations

SESSIONS_WHAT = "session histories, archives and meta"
SESSIONS_SQL = (
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
)

SHARED_STATE_WHAT = "memory files, the inbox, leases, dedup memory and API tokens"
SHARED_STATE_SQL = (
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
)

TURNS_WHAT = "session fences and the session of each inbox entry"
TURNS_SQL = (
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
)

INBOX_OWNERS_WHAT = "the instance answering each inbox entry"
INBOX_OWNERS_SQL = (
    # the holder of the instance that accepted (or took over) the entry; NULL: none (copied by `store migrate`),
    # so any live instance may claim it. An entry whose owner's `instance:<owner>` lease is gone is claimed
    # by a survivor
    "ALTER TABLE inbox ADD COLUMN owner text",
    "CREATE INDEX inbox_by_owner ON inbox (owner, seq)",
)

JOBS_AND_OUTBOX_WHAT = "scheduled jobs and the outbox of sends for another instance's connection"
JOBS_AND_OUTBOX_SQL = (
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
)

COPIES_AND_SENDS_WHAT = "what store migrate copied, and the per-member send counts (WeCom)"
COPIES_AND_SENDS_SQL = (
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
)

IDEMPOTENCY_KEYS_WHAT = "the HTTP API's idempotency keys"
IDEMPOTENCY_KEYS_SQL = (
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
)
