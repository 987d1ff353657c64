"""Migration 26: a session's claim with a budget check and reservation riding in it (one statement, one trip)."""

from __future__ import annotations

CLAIM_RIDE_WHAT = "a session's claim and a turn's budget reservation in one statement"
CLAIM_RIDE_SQL = (
    # `agenthub_session_claim` (migration 19), then, only when the lease was granted and no newer token fenced the
    # session, `usage_reserve_except` (migration 22) in the same transaction: the claim's rows (the head first, then
    # the records) and after them the reservation's (o_scope set). The claim's rows go out in one `RETURN QUERY`
    # (a loop over them cost the server microseconds a record: a long history's claim took several times as
    # long); granted and not fenced out is read back from what the claim wrote (this transaction's): the lease row
    # is the holder's, and the session's fence is at most its token. Locks: the lease row and the session's lock,
    # then the scopes' budget locks in key order; no statement takes a session's lock while it holds a budget
    # lock, so nothing waits in a circle
    """CREATE FUNCTION agenthub_session_claim_reserving(
            p_name text, p_holder text, p_ttl double precision, p_agent text, p_channel text, p_chat_id text,
            p_born bigint, p_since bigint,
            p_id text, p_claims text, p_day date, p_tokens bigint, p_reserve_ttl double precision, p_ignore text[]
        ) RETURNS TABLE (
            o_token bigint, o_fence bigint, o_born bigint, o_next bigint, o_meta text, o_seq bigint, o_record text,
            o_scope text, o_day bigint, o_month bigint, o_reserved boolean
        ) LANGUAGE plpgsql AS $$
        DECLARE
            v_token bigint;
            v_fence bigint;
        BEGIN
            RETURN QUERY SELECT c.o_token, c.o_fence, c.o_born, c.o_next, c.o_meta, c.o_seq, c.o_record,
                    NULL::text, NULL::bigint, NULL::bigint, NULL::boolean
                FROM agenthub_session_claim(p_name, p_holder, p_ttl, p_agent, p_channel, p_chat_id, p_born, p_since) c;
            SELECT l.token INTO v_token FROM leases l WHERE l.name = p_name AND l.holder = p_holder;
            SELECT f.fence INTO v_fence FROM session_fences f
                WHERE f.agent = p_agent AND f.channel = p_channel AND f.chat_id = p_chat_id;
            IF v_token IS NOT NULL AND (v_fence IS NULL OR v_fence <= v_token) THEN
                RETURN QUERY SELECT NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::text, NULL::bigint,
                    NULL::text, r.o_scope, r.o_day, r.o_month, r.o_reserved
                    FROM usage_reserve_except(p_id, p_claims, p_day, p_tokens, p_reserve_ttl, p_ignore) r;
            END IF;
        END $$""",
)
