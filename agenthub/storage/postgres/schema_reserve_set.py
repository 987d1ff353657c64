"""Migration 28: the budget check and reservation in two statements (`usage_reserve_set`), alone or riding in a
session's claim (`agenthub_session_claim_reserve_set`)."""

from __future__ import annotations

RESERVE_SET_WHAT = "the budget check and reservation in two statements, alone or riding in a session's claim"
RESERVE_SET_SQL = (
    # `usage_reserve_except` (migration 22) without its loops: the same arguments, rows, locks and rule, in two
    # statements instead of one per scope and step (each with its own executor start, snapshot and plan look-up),
    # the claims' JSON read once as typed rows. First the scopes' budget locks, in the claims' order (the caller
    # sorts them by key); then, with a snapshot taken after them (each statement of a function takes its own),
    # every scope's day and month totals (its own row and its forget tag's, as migration 17) plus what running
    # turns hold of it (but `p_ignore`), and the reservation, in that same statement, unless a limit is reached.
    # Every row says whether the reservation was made (the old function's rows said it cumulatively;
    # `usage.used_of` reads them all alike). Old instances keep calling `usage_reserve_except`: both take the same
    # locks, so the guarantee holds across them
    """CREATE FUNCTION usage_reserve_set(
            p_id text, p_claims text, p_day date, p_tokens bigint, p_ttl double precision, p_ignore text[]
        ) RETURNS TABLE (o_scope text, o_day bigint, o_month bigint, o_reserved boolean) LANGUAGE plpgsql AS $$
        DECLARE
            day_key text := to_char(p_day, 'YYYY-MM-DD');
            month_key text := to_char(p_day, 'YYYY-MM');
        BEGIN
            PERFORM pg_advisory_xact_lock(hashtextextended('budget:' || c.key, 0))
               FROM ROWS FROM (json_to_recordset(p_claims::json) AS (key text)) WITH ORDINALITY AS c(key, n)
              ORDER BY c.n;
            RETURN QUERY WITH u AS MATERIALIZED (
                SELECT c.n, c.key, c.day AS day_limit, c.month AS month_limit,
                       (coalesce(s.d, 0) + h.held)::bigint AS d, (coalesce(s.m, 0) + h.held)::bigint AS m
                  FROM ROWS FROM (json_to_recordset(p_claims::json) AS (kind text, channel text, ident text, key text,
                        day bigint, month bigint)) WITH ORDINALITY AS c(kind, channel, ident, key, day, month, n)
                  CROSS JOIN LATERAL (SELECT coalesce(sum(x.tokens), 0) AS held FROM usage_reservations x
                        WHERE x.scope = c.key AND x.expires_at > clock_timestamp() AND x.id <> ALL(p_ignore)) h
                  CROSS JOIN LATERAL (
                        SELECT sum(t.tokens) FILTER (WHERE t.period = day_key) AS d,
                               sum(t.tokens) FILTER (WHERE t.period = month_key) AS m
                          FROM usage_totals t WHERE t.scope IN (c.key, CASE WHEN c.kind <> 'agent' THEN c.kind || ':'
                               || c.channel || ':forgotten-' || left(encode(sha256(convert_to(c.channel || E'\\n'
                               || c.ident, 'UTF8')), 'hex'), 16) END)
                           AND t.period IN (day_key, month_key)) s
            ), v AS (
                SELECT NOT coalesce(bool_or((u.day_limit > 0 AND u.d >= u.day_limit)
                    OR (u.month_limit > 0 AND u.m >= u.month_limit)), false) AS ok FROM u
            ), ins AS (
                INSERT INTO usage_reservations (id, scope, tokens, expires_at)
                SELECT p_id, u.key, p_tokens, clock_timestamp() + make_interval(secs => p_ttl) FROM u, v WHERE v.ok
            )
            SELECT u.key, u.d, u.m, v.ok FROM u, v ORDER BY u.n;
        END $$""",
    # `agenthub_session_claim_reserving` (migration 26) with `usage_reserve_set`, granted and not fenced out read
    # in one statement (the rows, locks and their order as there)
    """CREATE FUNCTION agenthub_session_claim_reserve_set(
            p_name text, p_holder text, p_ttl double precision, p_agent text, p_channel text, p_chat_id text,
            p_born bigint, p_since bigint,
            p_id text, p_claims text, p_day date, p_tokens bigint, p_reserve_ttl double precision, p_ignore text[]
        ) RETURNS TABLE (
            o_token bigint, o_fence bigint, o_born bigint, o_next bigint, o_meta text, o_seq bigint, o_record text,
            o_scope text, o_day bigint, o_month bigint, o_reserved boolean
        ) LANGUAGE plpgsql AS $$
        BEGIN
            RETURN QUERY SELECT c.o_token, c.o_fence, c.o_born, c.o_next, c.o_meta, c.o_seq, c.o_record,
                    NULL::text, NULL::bigint, NULL::bigint, NULL::boolean
                FROM agenthub_session_claim(p_name, p_holder, p_ttl, p_agent, p_channel, p_chat_id, p_born, p_since) c;
            IF EXISTS (SELECT 1 FROM leases l
                    LEFT JOIN session_fences f ON f.agent = p_agent AND f.channel = p_channel AND f.chat_id = p_chat_id
                    WHERE l.name = p_name AND l.holder = p_holder AND (f.fence IS NULL OR f.fence <= l.token)) THEN
                RETURN QUERY SELECT NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::text, NULL::bigint,
                    NULL::text, r.o_scope, r.o_day, r.o_month, r.o_reserved
                    FROM usage_reserve_set(p_id, p_claims, p_day, p_tokens, p_reserve_ttl, p_ignore) r;
            END IF;
        END $$""",
)
