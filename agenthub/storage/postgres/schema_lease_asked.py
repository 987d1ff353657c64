"""Migration 27: a lease's release is announced (NOTIFY agenthub_lease_freed) only to an instance that asked."""

from __future__ import annotations

LEASE_ASKED_WHAT = "a released lease is announced only to an instance that asked for it"
LEASE_ASKED_SQL = (
    # set by a request that was refused the lease (in the same statement, under the row lock its ON CONFLICT took,
    # so a release that comes after it sees it); cleared by every grant. Only such a refused request waits for
    # the announcement: a session that moves between instances is released on every turn, and an announcement
    # goes to every listening instance (and through the server's notify queue) for nobody
    "ALTER TABLE leases ADD COLUMN asked boolean NOT NULL DEFAULT false",
    # `PostgresLeases.acquire_or_ask`, and the session claim's lease: granted (its token; a grant clears `asked`),
    # or refused (NULL): then marked asked before its holder is asked for it, and announced free when it is by now
    # (a let-go that took the row while this request waited for it: its release time is later than this
    # transaction's `now()`, so the request was refused a free lease, and the let-go, which came before the mark,
    # was not announced; the refused requester, listening already, tries again at once). A function, not one
    # statement: a refusal behind another instance's first grant of the lease (the row's insert, committed while
    # this request waited for it) must mark a row the statement's snapshot does not show; each statement of a
    # function takes its own
    """CREATE FUNCTION agenthub_lease_acquire_or_ask(p_name text, p_holder text, p_ttl double precision)
        RETURNS bigint LANGUAGE plpgsql AS $$
        DECLARE
            v_token bigint;
        BEGIN
            INSERT INTO leases AS l (name, holder, token, expires_at)
            VALUES (p_name, p_holder, 1, now() + p_ttl * interval '1 second')
            ON CONFLICT (name) DO UPDATE SET
                holder = EXCLUDED.holder,
                token = CASE WHEN l.holder = EXCLUDED.holder AND l.expires_at > now() THEN l.token
                             ELSE l.token + 1 END,
                expires_at = EXCLUDED.expires_at,
                asked = false
            WHERE l.expires_at <= now() OR l.holder = EXCLUDED.holder
            RETURNING l.token INTO v_token;
            IF v_token IS NULL THEN
                UPDATE leases SET asked = true WHERE name = p_name AND NOT asked;
                PERFORM pg_notify('agenthub_lease_wanted', p_name);
                IF EXISTS (SELECT 1 FROM leases WHERE name = p_name AND expires_at <= clock_timestamp()) THEN
                    PERFORM pg_notify('agenthub_lease_freed', p_name);
                END IF;
            END IF;
            RETURN v_token;
        END $$""",
    # as migration 19, the lease granted or refused by `agenthub_lease_acquire_or_ask` (above)
    """CREATE OR REPLACE FUNCTION agenthub_session_claim(
            p_name text, p_holder text, p_ttl double precision, p_agent text, p_channel text, p_chat_id text,
            p_born bigint, p_since bigint
        ) RETURNS TABLE (
            o_token bigint, o_fence bigint, o_born bigint, o_next bigint, o_meta text, o_seq bigint, o_record text
        ) LANGUAGE plpgsql AS $$
        DECLARE
            v_born bigint;
        BEGIN
            o_token := agenthub_lease_acquire_or_ask(p_name, p_holder, p_ttl);
            IF o_token IS NULL THEN
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
    # as migration 19, and the release announced only when it was asked for
    """CREATE OR REPLACE FUNCTION agenthub_session_let_go(
            p_name text, p_token bigint, p_agent text, p_channel text, p_chat_id text, p_meta text
        ) RETURNS boolean LANGUAGE plpgsql AS $$
        DECLARE
            v_asked boolean;
        BEGIN
            UPDATE leases SET expires_at = now() WHERE name = p_name AND token = p_token AND expires_at > now()
            RETURNING asked INTO v_asked;
            IF v_asked THEN
                PERFORM pg_notify('agenthub_lease_freed', p_name);
            END IF;
            IF p_meta IS NULL THEN
                RETURN true;
            END IF;
            RETURN agenthub_session_write_meta(p_agent, p_channel, p_chat_id, p_token, p_meta, false);
        END $$""",
)
