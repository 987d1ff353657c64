"""Migration 24: a packed block names each posting's source and channel by a small per-agent code (`search_names`)
instead of carrying both texts on every posting; the blocks already packed are given their codes."""

from __future__ import annotations

SEARCH_NAMES_WHAT = (
    "search blocks name each posting's source and channel by a per-agent code (search_names), not by their texts"
)
SEARCH_NAMES_SQL = (
    # one row per (source, channel) an agent's packed postings come from; deleted with the source's last doc
    """CREATE TABLE search_names (
        agent text NOT NULL,
        code integer NOT NULL,
        src text NOT NULL,
        channel text NOT NULL,
        PRIMARY KEY (agent, code),
        UNIQUE (agent, src, channel)
    )""",
    """INSERT INTO search_names (agent, code, src, channel)
    SELECT agent, row_number() OVER (PARTITION BY agent ORDER BY src, channel), src, channel FROM (
        SELECT DISTINCT b.agent, u.src, u.channel FROM search_blocks b
        CROSS JOIN LATERAL unnest(b.srcs, b.channels) AS u(src, channel)
    ) n""",
    "ALTER TABLE search_blocks ADD COLUMN sources integer[]",
    """UPDATE search_blocks b SET sources = ARRAY(
        SELECT n.code FROM unnest(b.srcs, b.channels) WITH ORDINALITY AS u(src, channel, at)
        JOIN search_names n ON n.agent = b.agent AND n.src = u.src AND n.channel = u.channel ORDER BY u.at
    )""",
    "ALTER TABLE search_blocks ALTER COLUMN sources SET NOT NULL, ALTER COLUMN sources SET STORAGE EXTERNAL, "
    "DROP COLUMN srcs, DROP COLUMN channels",
)
