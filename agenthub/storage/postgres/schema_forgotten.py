"""Migration 23: forget marks, so that another instance's usage rows made before a forget never name the person
(`storage.usage_marks`; `storage.postgres.usage` writes and reads them)."""

from __future__ import annotations

USAGE_FORGOTTEN_WHAT = "forget marks: a usage row or name made before a forget and written after it names the tag"
USAGE_FORGOTTEN_SQL = (
    # one row per forget (written in its transaction), naming the person's tag, never their id; `chat_id` NULL: a
    # forget in every chat (a direct chat is named by the tag too)
    """CREATE TABLE usage_forgotten (
            channel text NOT NULL,
            tag text NOT NULL,
            agents text[] NOT NULL,
            chat_id text,
            forgotten_at timestamptz NOT NULL
        )""",
    "CREATE INDEX usage_forgotten_who ON usage_forgotten (channel, tag)",
    # the marks of the (channel, tag) pairs a usage write is about to name, read after a lock a forget's
    # (`SHARE ROW EXCLUSIVE` on `usage_days`) conflicts with, by a statement of its own (READ COMMITTED: a fresh
    # snapshot): either the forget committed before and its mark is read, or it waits for the write and redacts it
    """CREATE FUNCTION usage_forget_marks(p_channels text[], p_tags text[])
        RETURNS TABLE (o_channel text, o_tag text, o_agents text[], o_chat text, o_at double precision)
        LANGUAGE plpgsql AS $$
        BEGIN
            LOCK TABLE usage_days IN ROW EXCLUSIVE MODE;
            RETURN QUERY SELECT f.channel, f.tag, f.agents, f.chat_id, extract(epoch FROM f.forgotten_at)::float8
              FROM usage_forgotten f JOIN unnest(p_channels, p_tags) AS w(channel, tag)
                ON f.channel = w.channel AND f.tag = w.tag;
        END $$""",
)
