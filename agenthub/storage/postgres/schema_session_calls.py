"""Migrations 13 and 19: a session's fenced writes and its claim as functions, one round trip each
(`storage.postgres.sessions`)."""

from __future__ import annotations

SESSION_WRITES_WHAT = "a fenced session write in one round trip: the append, the fence and the meta as functions"
SESSION_WRITES_SQL = (
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
)

SESSION_CLAIMS_WHAT = (
    "a session's lease, fence, new records and meta in one round trip; an append that returns the history's version"
)
SESSION_CLAIMS_SQL = (
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
)
