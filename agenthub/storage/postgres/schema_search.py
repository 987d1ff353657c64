"""Migration 21: the search index's postings packed per term in blocks by a background packer (`search_pack`); a
write stores only its docs (each with its terms and their counts), which wait as pending docs until packed."""

from __future__ import annotations

SEARCH_PACKED_WHAT = (
    "search postings packed per term in blocks in the background; a write stores its docs with their terms' counts "
    "(pending until packed), not one row per posting and a df update per term"
)
SEARCH_PACKED_SQL = (
    # each doc's terms' counts, in the order of its `terms` (a pending doc's postings; a one-session search ranks
    # from them); filled for the docs already stored from their postings
    "ALTER TABLE search_docs ADD COLUMN tfs integer[]",
    """UPDATE search_docs d SET tfs = ARRAY(
        SELECT coalesce(p.tf, 1) FROM unnest(d.terms) WITH ORDINALITY AS t(term, at)
        LEFT JOIN search_postings p ON p.agent = d.agent AND p.term = t.term AND p.doc = d.id ORDER BY t.at
    )""",
    "ALTER TABLE search_docs ALTER COLUMN tfs SET DEFAULT '{}', ALTER COLUMN tfs SET NOT NULL",
    # an agent's pending docs (id above `search_stats.packed`) read by id range
    "CREATE INDEX search_docs_by_agent ON search_docs (agent, id)",
    # one row per term and block: the postings of the docs packed in one run (ids `first` .. `last`, kept as bounds
    # when a removal takes docs out), as parallel arrays in doc order; a block emptied by a removal is deleted
    """CREATE TABLE search_blocks (
        agent text NOT NULL,
        term text NOT NULL,
        first bigint NOT NULL,
        last bigint NOT NULL,
        docs bigint[] NOT NULL,
        tfs integer[] NOT NULL,
        lengths integer[] NOT NULL,
        ts bigint[] NOT NULL,
        srcs text[] NOT NULL,
        channels text[] NOT NULL,
        PRIMARY KEY (agent, term, first)
    )""",
    # a block's arrays stored out of line uncompressed: a pack writes them a third faster than compressing them
    "ALTER TABLE search_blocks ALTER COLUMN docs SET STORAGE EXTERNAL, ALTER COLUMN tfs SET STORAGE EXTERNAL, "
    "ALTER COLUMN lengths SET STORAGE EXTERNAL, ALTER COLUMN ts SET STORAGE EXTERNAL, "
    "ALTER COLUMN srcs SET STORAGE EXTERNAL, ALTER COLUMN channels SET STORAGE EXTERNAL",
    """INSERT INTO search_blocks (agent, term, first, last, docs, tfs, lengths, ts, srcs, channels)
    SELECT agent, term, min(doc), max(doc), array_agg(doc ORDER BY doc), array_agg(tf ORDER BY doc),
           array_agg(length ORDER BY doc), array_agg(ts ORDER BY doc), array_agg(src ORDER BY doc),
           array_agg(channel ORDER BY doc)
    FROM search_postings GROUP BY agent, term""",
    # `packed`: every doc of the agent up to this id is in blocks (and counted in `search_terms`); `pending`: how
    # many of its docs are above it (the packer runs when they are many)
    "ALTER TABLE search_stats ADD COLUMN packed bigint NOT NULL DEFAULT 0, "
    "ADD COLUMN pending bigint NOT NULL DEFAULT 0",
    "UPDATE search_stats s SET packed = coalesce((SELECT max(id) FROM search_docs d WHERE d.agent = s.agent), 0)",
    # emptied, no longer written (kept for the statements of older migrations); its files go with the truncate
    "TRUNCATE search_postings",
)
