"""`settled_conversation`: the whole history's conversion from the kept prefix plus what was appended, the prefix
dropped when the history no longer starts with it (compaction, redaction) and the whole converted when a refused turn
reaches across the cut."""

from __future__ import annotations

import copy
import json
from typing import Any

from agenthub.agent.conversion import chat_type_of, drop_refused_turns, fold_system_messages, to_conversation
from agenthub.agent.settled import SettledPrefix, settled_conversation, settles

Message = dict[str, Any]


def _turns(n: int) -> list[Message]:
    history: list[Message] = []
    for i in range(n):
        history += [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]
    return history


def _convert(prefix: SettledPrefix, history: list[Message]) -> tuple[list[Message], int]:
    conversation, folded, converted = settled_conversation(prefix, history, to_conversation, drop_refused_turns)
    assert conversation == to_conversation(history)
    assert folded == fold_system_messages(history)
    assert prefix.chat_type_of(history) == chat_type_of(history)
    return conversation, converted


def test_a_turn_converts_only_what_follows_the_settled_prefix() -> None:
    prefix, history = SettledPrefix(), [{"role": "system", "content": "summary"}, *_turns(500)]
    _, first = _convert(prefix, [*history, {"role": "user", "content": "new"}])
    history = [*history, {"role": "user", "content": "new"}, {"role": "assistant", "content": "reply"}]
    _, second = _convert(prefix, [*history, {"role": "user", "content": "newer"}])
    assert first > 1000
    assert second <= 6
    assert len(prefix.items) == len(history)  # the prefix moved to the newest cut


def test_a_compacted_history_is_converted_afresh() -> None:
    prefix, history = SettledPrefix(), _turns(50)
    _convert(prefix, [*history, {"role": "user", "content": "q"}])
    compacted = [{"role": "system", "content": "what came before"}, *history[-4:], {"role": "user", "content": "q"}]
    conversation, converted = _convert(prefix, compacted)
    assert converted >= len(compacted)
    assert len(conversation) == 5  # two turns and the new question (the summary goes to the system prompt)


def test_a_redacted_history_is_converted_afresh() -> None:
    prefix, history = SettledPrefix(), _turns(20)
    _convert(prefix, [*history, {"role": "user", "content": "q"}])
    redacted = copy.deepcopy(history)
    redacted[2]["content"] = "[redacted]"
    conversation, _ = _convert(prefix, [*redacted, {"role": "user", "content": "q"}])
    assert '"question 1"' not in json.dumps(conversation) and '"[redacted]"' in json.dumps(conversation)


def test_a_refused_turn_that_reaches_across_the_cut_converts_the_whole_history() -> None:
    prefix, history = SettledPrefix(), _turns(10)
    _convert(prefix, [*history, {"role": "user", "content": "q"}])
    refused = {"role": "assistant", "content": "no", "refusal": True}
    # the refusal takes the question after the cut away: the answer before it now meets the next assistant message
    _, converted = _convert(prefix, [*history, {"role": "user", "content": "q"}, refused, refused])
    assert converted >= len(history)
    _convert(prefix, [*history, {"role": "user", "content": "q"}, refused, {"role": "assistant", "content": "more"}])


def test_no_cut_before_a_message_that_may_not_be_sent() -> None:
    answer = {"role": "assistant", "content": "answer"}
    assert settles(answer, {"role": "user", "content": "question"})
    assert not settles(answer, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]})
    assert not settles({"role": "assistant", "content": " "}, {"role": "user", "content": "question"})
    assert not settles({**answer, "refusal": True}, {"role": "user", "content": "question"})
    calling = {"role": "assistant", "content": [{"type": "tool_use", "id": "x", "name": "n", "input": {}}]}
    assert not settles(calling, {"role": "user", "content": "question"})
    history = [*_turns(3), {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "stray"}]}]
    _convert(SettledPrefix(), [*history, {"role": "assistant", "content": "merged with answer 2"}])


def test_the_chat_type_comes_from_the_newest_user_message_that_has_one_without_reading_the_prefix_again() -> None:
    prefix, history = SettledPrefix(), _turns(30)
    history[0]["chat_type"] = "group"
    history[40]["chat_type"] = "private"
    _convert(prefix, [*history, {"role": "user", "content": "q"}])
    assert prefix.chat_type == "private"  # kept with the prefix: the next turn reads only what follows it
    history = [*history, {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    _convert(prefix, [*history, {"role": "user", "content": "r"}])
    later = [*history, {"role": "user", "content": "r", "chat_type": "group"}]
    assert prefix.chat_type_of(later) == "group"
    compacted = [{"role": "system", "content": "before"}, *history[-4:], {"role": "user", "content": "s"}]
    _convert(prefix, compacted)
    assert prefix.chat_type_of(compacted) is None  # the prefix was dropped with the messages that said private


def test_positions_in_a_growing_conversation_test_each_settled_message_once() -> None:
    prefix, history, tested = SettledPrefix(), _turns(200), list[Message]()

    def asks(message: Message) -> bool:
        tested.append(message)
        return "7" in json.dumps(message)

    def fresh(conversation: list[Message]) -> list[int]:
        return [i for i, m in enumerate(conversation) if "7" in json.dumps(m)]

    for n in range(30):
        history = [*history, {"role": "user", "content": f"q{n}"}]
        conversation, _ = _convert(prefix, history)
        tested.clear()
        assert prefix.positions(asks, conversation) == fresh(conversation)
        assert len(tested) <= (len(conversation) if n == 0 else 4), n  # the first: all; then the new ones
        history = [*history, {"role": "assistant", "content": f"a{n}"}]
    copied = list(conversation)  # not the conversation the prefix made: every message tested
    tested.clear()
    assert prefix.positions(asks, copied) == fresh(copied) and len(tested) == len(copied)
    compacted = [{"role": "system", "content": "before"}, *history[-6:], {"role": "user", "content": "7 again"}]
    conversation, _ = _convert(prefix, compacted)
    assert prefix.positions(asks, conversation) == fresh(conversation)
