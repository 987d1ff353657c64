"""Memory additions as notes: the system prompt keeps the memory it was cached with while the cache is warm; an
addition rides on the message of the turn that first saw it, in every later request; anything else shows the file."""

from __future__ import annotations

from typing import Any

from agenthub.agent.memory_notes import NOTE_HEADER, MemoryNotes

OLD = "# Long-term memory (MEMORY.md)\n\n- likes tea"
NEW = OLD + "\n- prefers green tea"
NOTE = f"{NOTE_HEADER}\n\n- prefers green tea"


def _chat(turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(turns):
        out += [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]
    return [*out, {"role": "user", "content": f"q{turns}"}]


def _texts(message: dict[str, Any]) -> list[str]:
    content = message["content"]
    return [content] if isinstance(content, str) else [b["text"] for b in content]


def test_an_addition_rides_on_its_turns_message_in_every_later_request() -> None:
    notes = MemoryNotes()
    assert notes.apply("k", OLD, _chat(1), warm=True) == (OLD, _chat(1))
    shown, placed = notes.apply("k", NEW, _chat(2), warm=True)
    assert shown == OLD and _texts(placed[4]) == ["q2", NOTE]
    shown, later = notes.apply("k", NEW, _chat(3), warm=True)
    assert shown == OLD and later[:5] == placed and _texts(later[6]) == ["q3"]
    newer = NEW + "\n- walks at noon"
    shown, third = notes.apply("k", newer, _chat(4), warm=True)  # a second addition: a second note
    assert shown == OLD and third[:5] == placed and _texts(third[8])[-1] == f"{NOTE_HEADER}\n\n- walks at noon"


def test_a_rewrite_a_cold_cache_or_a_moved_message_shows_the_file() -> None:
    notes = MemoryNotes()
    notes.apply("k", OLD, _chat(1), warm=True)
    assert notes.apply("k", "# Long-term memory (MEMORY.md)\n\n- likes coffee", _chat(2), warm=True)[0].endswith(
        "coffee"
    )
    notes.apply("k", OLD, _chat(3), warm=True)
    notes.apply("k", NEW, _chat(4), warm=True)
    assert notes.apply("k", NEW, _chat(5), warm=False) == (NEW, _chat(5))
    notes.apply("k", OLD, _chat(1), warm=True)
    notes.apply("k", NEW, _chat(2), warm=True)
    edited = _chat(3)
    edited[4] = {"role": "user", "content": "q2 (edited)"}
    assert notes.apply("k", NEW, edited, warm=True) == (NEW, edited)


def test_the_first_memory_rides_whole_and_a_dropped_chat_starts_again() -> None:
    notes = MemoryNotes(chats=1)
    notes.apply("k", "", _chat(1), warm=True)
    shown, placed = notes.apply("k", OLD, _chat(2), warm=True)
    assert shown == "" and _texts(placed[4]) == ["q2", OLD]
    notes.apply("other", OLD, _chat(1), warm=True)  # one chat kept: "k" is dropped
    assert notes.apply("k", NEW, _chat(3), warm=True) == (NEW, _chat(3))
    notes.drop("k")
    assert notes.apply("k", NEW, _chat(4), warm=True) == (NEW, _chat(4))


def test_an_addition_waits_for_a_users_message() -> None:
    notes = MemoryNotes()
    notes.apply("k", OLD, _chat(1), warm=True)
    ending_with_reply = [*_chat(1), {"role": "assistant", "content": "a1"}]
    assert notes.apply("k", NEW, ending_with_reply, warm=True) == (NEW, ending_with_reply)
