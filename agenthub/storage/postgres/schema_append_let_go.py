"""Migration 29: a session let go in the statement that writes its turn's answer (`appends.py` `APPENDS`)."""

from __future__ import annotations

APPEND_LET_GO_WHAT = "a session's answer appended and its lease released in one call"
APPEND_LET_GO_SQL = (
    # `agenthub_session_append_at` (migration 19, unchanged: an instance from before still calls it), then, when
    # the append landed and `p_name` is given, the lease released as `agenthub_session_let_go` does (migration 27:
    # only while still held with `p_token`, announced only when another instance asked for it). The lease's row
    # is taken only when no other transaction holds it (SKIP LOCKED): an append never waits for a lease row (a
    # claim batch of another instance, a renewal in flight), so it takes no lock out of the sessions' one order
    # (lease row, then session lock) and is never held up by one; a row it skips is released by the usual let-go.
    # {born, next_seq, released (1 or 0)}; NULL when a newer lease fenced the session (nothing written, nothing
    # released: a newer token means the lease is not ours any more)
    """CREATE FUNCTION agenthub_session_append_let_go(
            p_agent text, p_channel text, p_chat_id text, p_token bigint, p_records text[], p_name text
        ) RETURNS bigint[] LANGUAGE plpgsql AS $$
        DECLARE
            v_version bigint[];
            v_asked boolean;
        BEGIN
            v_version := agenthub_session_append_at(p_agent, p_channel, p_chat_id, p_token, p_records);
            IF v_version IS NULL OR p_name IS NULL OR p_token IS NULL THEN
                RETURN v_version;
            END IF;
            PERFORM 1 FROM leases WHERE name = p_name AND token = p_token AND expires_at > now()
            FOR UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                RETURN v_version || 0::bigint;
            END IF;
            UPDATE leases SET expires_at = now() WHERE name = p_name RETURNING asked INTO v_asked;
            IF v_asked THEN
                PERFORM pg_notify('agenthub_lease_freed', p_name);
            END IF;
            RETURN v_version || 1::bigint;
        END $$""",
)
