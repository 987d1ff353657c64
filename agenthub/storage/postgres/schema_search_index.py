"""Migrations 7, 10, 12, 14 and 18: the memory_search index every instance shares, its vectors, and what lets an
instance cache it (`storage.postgres.search`)."""

from __future__ import annotations

SEARCH_INDEX_WHAT = "the memory_search index every instance shares"
SEARCH_INDEX_SQL = (
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
)

SEARCH_VECTORS_WHAT = "[search.embeddings]: one vector per searchable message"
SEARCH_VECTORS_SQL = (
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
)

SEARCH_CACHES_WHAT = "what lets an instance keep search data in memory and rank the top hits only"
SEARCH_CACHES_SQL = (
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
)

SEARCH_REMOVALS_WHAT = "the search docs each removal took away, so an instance takes them out of its cached postings"
SEARCH_REMOVALS_SQL = (
    # per agent and generation (`search_stats.generation`, moved by each write that removes docs): the ids of the
    # docs that write removed (ids only, never text); an instance that holds postings of an older generation
    # takes those docs out of them instead of reading every term again; the oldest are pruned as new ones come
    """CREATE TABLE IF NOT EXISTS search_removed (
            agent text NOT NULL,
            generation bigint NOT NULL,
            docs bigint[] NOT NULL,
            PRIMARY KEY (agent, generation)
        )""",
)

SEARCH_DOC_TERMS_WHAT = (
    "each search doc keeps its distinct terms, so its postings are deleted through their primary key and the "
    "postings need no second index by doc (one b-tree entry per posting written instead of two); df rows updated "
    "in place"
)
SEARCH_DOC_TERMS_SQL = (
    "ALTER TABLE search_docs ADD COLUMN terms text[] NOT NULL DEFAULT '{}'",
    """UPDATE search_docs d SET terms = ARRAY(SELECT p.term FROM search_postings p WHERE p.doc = d.id)""",
    "DROP INDEX search_postings_by_doc",
    # a term's df is updated by every batch that holds it: room left on each page lets the new row version stay
    # on its page (a heap-only update, no new index entry); pages written from now on
    "ALTER TABLE search_terms SET (fillfactor = 80)",
)
