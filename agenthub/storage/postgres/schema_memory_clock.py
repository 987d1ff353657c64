"""Migration 25: the memory files' version, moved by every change of `memory_files` (`postgres.memory_clock`)."""

from __future__ import annotations

MEMORY_CLOCK_WHAT = "the memory files' version: one counter every change of memory_files moves in its transaction"
MEMORY_CLOCK_SQL = (
    # one row; a statement-level trigger moves it in the writer's transaction (any writer, a hand-made UPDATE too),
    # and its row lock orders the writers, so a snapshot's version counts exactly the changes it sees
    """CREATE TABLE memory_clock (
            one boolean PRIMARY KEY DEFAULT true CHECK (one),
            version bigint NOT NULL
        )""",
    "INSERT INTO memory_clock (version) VALUES (0)",
    """CREATE FUNCTION memory_clock_tick() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE memory_clock SET version = version + 1;
            RETURN NULL;
        END $$""",
    """CREATE TRIGGER memory_files_tick AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON memory_files
        FOR EACH STATEMENT EXECUTE FUNCTION memory_clock_tick()""",
)
