"""`stored_messages`: which of a turn's inbox entries the history already holds, and what was answered after each."""

from __future__ import annotations

from agenthub.gateway.inbox_replay import INBOX_ID, StoredMessage, stored_messages


def test_the_last_user_record_of_an_entry_counts_and_other_records_do_not() -> None:
    history = [
        {"role": "user", "content": "first", "channel": "http", INBOX_ID: "a"},
        {"role": "assistant", "content": "old answer"},
        {"role": "user", "content": "again", "channel": "http", INBOX_ID: "a"},  # replayed after a crash
        {"role": "assistant", "content": "new answer", INBOX_ID: "b"},  # not a user record: no match
        {"role": "user", "content": "unanswered", "channel": "http", INBOX_ID: "c"},
    ]
    found = stored_messages(history, ["a", "b", "c", "missing", "a"])
    assert found == {"a": StoredMessage("new answer"), "c": StoredMessage(None)}
    assert list(found) == ["a", "c"]
    assert stored_messages(history * 500, ["missing"]) == {}
