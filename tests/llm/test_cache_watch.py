"""Prompt-cache breaks named (design §15): each cause, no false break on a growing chat, the metric, one log line."""

from __future__ import annotations

from typing import Any

from structlog.testing import capture_logs

from agenthub.clock import ManualClock
from agenthub.llm.cache_watch import (
    LONG_TTL_S,
    MEMORY_HEADER,
    PROFILE_HEADER,
    CacheWatch,
    Fingerprint,
    anthropic_api,
    message_prints,
)
from agenthub.llm.types import LLMRequest, LLMResponse
from agenthub.messages import Usage

CHAT = "default:cli:c1"
MARK = {"type": "ephemeral"}
TOOLS = [{"name": "read_memory", "input_schema": {"type": "object"}, "cache_control": MARK}]
PERSONA = "You are a helpful assistant."
SUMMARY = "[历史摘要] the user builds project X"
MEMORY = MEMORY_HEADER + "\n\n- likes tea"
PROFILE = PROFILE_HEADER + "\n\n- name: Li"


def _system(*texts: str) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": t} for t in texts]
    blocks[-1] = {**blocks[-1], "cache_control": MARK}
    return blocks


def _messages(turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(turns):
        out.append({"role": "user", "content": f"question {i}"})
        out.append({"role": "assistant", "content": f"answer {i}"})
    out.append({"role": "user", "content": [{"type": "text", "text": f"question {turns}", "cache_control": MARK}]})
    return out


def _request(turns: int = 0, **kw: Any) -> LLMRequest:
    fields: dict[str, Any] = {
        "model": "m1",
        "system": _system(PERSONA, SUMMARY, MEMORY, PROFILE),
        "messages": _messages(turns),
        "tools": TOOLS,
        "max_tokens": 100,
        "purpose": "turn",
        "chat": CHAT,
    }
    return LLMRequest(**{**fields, **kw})


def _reply(read: int, write: int, message_id: str = "msg_1") -> LLMResponse:
    usage = Usage(input_tokens=10, output_tokens=5, cache_read_input_tokens=read, cache_creation_input_tokens=write)
    return LLMResponse(content=[], stop_reason="end_turn", usage=usage, message_id=message_id)


def _watch() -> tuple[CacheWatch, ManualClock]:
    clock = ManualClock()
    return CacheWatch(clock=clock), clock


def _break_after(
    second: LLMRequest, *, idle_s: float = 10.0, history: str | None = None, first: LLMRequest | None = None
) -> tuple[str, Any]:
    """The break the second call makes after a first call of 2000 cached tokens (it reads only 900)."""
    watch, clock = _watch()
    assert watch.observe(first or _request(2), _reply(0, 2000)) is None
    if history is not None:
        watch.history_changed(history, CHAT)
    clock.advance(idle_s)
    found = watch.observe(second, _reply(900, 1500))
    assert found is not None
    return found.cause, found


def test_a_growing_chat_never_breaks_and_reports_its_hit_rate() -> None:
    watch, clock = _watch()
    cached = 0
    for turn in range(10):
        clock.advance(60)
        assert watch.observe(_request(turn), _reply(cached, 150)) is None
        cached += 150
    assert sum(watch.breaks.values()) == 0
    read, total = watch.hit_rate(CHAT) or (0, 0)
    assert read == sum(150 * t for t in range(10)) and total == read + 10 * (150 + 10)
    assert watch.hit_rate("default:cli:other") is None


def test_each_cause_is_named() -> None:
    assert _break_after(_request(3, model="m2"))[0] == "model_changed"
    assert _break_after(_request(3, tools=[*TOOLS, {"name": "get_time", "input_schema": {}}]))[0] == "tools_changed"
    assert _break_after(_request(3), idle_s=301)[0] == "ttl_expired"
    assert _break_after(_request(3))[0] == "unknown"  # the same prefix, read short: the vendor evicted it


def test_a_system_change_names_its_block() -> None:
    cases = {
        "persona": _system("You are terse.", SUMMARY, MEMORY, PROFILE),
        "summary": _system(PERSONA, SUMMARY + " and Y", MEMORY, PROFILE),
        "memory": _system(PERSONA, SUMMARY, MEMORY + "\n- likes green tea", PROFILE),
        "profile": _system(PERSONA, SUMMARY, MEMORY, PROFILE_HEADER + "\n\n- name: Wang"),
    }
    for block, system in cases.items():
        cause, found = _break_after(_request(3, system=system))
        assert (cause, found.block) == ("system_changed", block)
    _, added = _break_after(_request(3, system=_system(PERSONA, "[历史摘要] new", SUMMARY, MEMORY, PROFILE)))
    assert added.block == "summary"
    _, dropped = _break_after(_request(3, system=_system(PERSONA, SUMMARY, PROFILE)))
    assert dropped.block == "memory"


def test_changed_messages_say_how_far_they_matched_and_why() -> None:
    edited = _messages(3)
    edited[1] = {"role": "assistant", "content": "a different answer 0"}
    cause, found = _break_after(_request(3, messages=edited))
    assert (cause, found.reason, found.matched_messages) == ("messages_changed", "edit", 1)
    compacted = _system(PERSONA, "[历史摘要] all of it", MEMORY, PROFILE)
    recent = [{"role": "user", "content": "question 1"}, {"role": "assistant", "content": "answer 1"}]
    cause, found = _break_after(_request(0, system=compacted, messages=recent), history="replace")
    assert (cause, found.reason, found.matched_messages) == ("messages_changed", "compaction", 0)
    cause, found = _break_after(_request(0, messages=[{"role": "user", "content": "hi"}]), history="clear")
    assert (cause, found.reason) == ("messages_changed", "restart")
    cause, found = _break_after(_request(1, messages=edited[:3]), history="reload")  # another instance wrote it
    assert (cause, found.reason) == ("messages_changed", "other_instance")


def test_a_moving_breakpoint_is_no_change() -> None:
    first, second = Fingerprint.of(_request(2)), Fingerprint.of(_request(3))
    assert second.common_messages(first) == first.message_count == 5


def test_the_ttl_is_an_hour_when_the_request_asks_for_it() -> None:
    hour = {"type": "ephemeral", "ttl": "1h"}
    tools = [{**TOOLS[0], "cache_control": hour}]
    cause, _ = _break_after(_request(3, tools=tools), idle_s=1800, first=_request(2, tools=tools))  # within the hour
    assert cause == "unknown"
    watch, clock = _watch()
    watch.observe(_request(2, tools=tools), _reply(0, 2000))
    assert watch.warm(CHAT)
    clock.advance(3601)
    assert not watch.warm(CHAT)
    found = watch.observe(_request(3, tools=tools), _reply(0, 2100))
    assert found is not None and found.cause == "ttl_expired"


def test_a_break_is_counted_and_logged_once() -> None:
    watch, clock = _watch()
    watch.observe(_request(2), _reply(0, 2000, "msg_a"))
    clock.advance(5)
    with capture_logs() as logs:
        watch.observe(_request(3, model="m2"), _reply(0, 2100, "msg_b"))
        watch.observe(_request(4, model="m2"), _reply(2100, 100, "msg_c"))  # reads what m2 left: fine
    breaks = [e for e in logs if e["event"] == "prompt_cache_break"]
    assert len(breaks) == 1
    assert breaks[0]["cause"] == "model_changed" and breaks[0]["expected_read"] == 2000 and breaks[0]["read"] == 0
    assert 'agenthub_prompt_cache_breaks_total{cause="model_changed"} 1' in watch.metrics()
    assert 'agenthub_prompt_cache_breaks_total{cause="ttl_expired"} 0' in watch.metrics()


def test_nothing_cached_means_nothing_to_break() -> None:
    watch, clock = _watch()
    watch.observe(_request(2), _reply(0, 0))  # a vendor without a prompt cache, or a prompt too short for one
    clock.advance(5)
    assert watch.observe(_request(3, model="m2"), _reply(0, 0)) is None


def test_only_a_chats_own_calls_are_compared() -> None:
    watch, clock = _watch()
    watch.observe(_request(2), _reply(0, 2000))
    summary = _request(2, purpose="summary", system=_system("Summarise."))
    assert not watch.watched(summary) and watch.observe(summary, _reply(0, 500)) is None
    assert watch.observe(_request(3, chat="default:cli:c2"), _reply(0, 2000)) is None  # another chat
    clock.advance(5)
    assert watch.observe(_request(3), _reply(2000, 100)) is None


def test_the_chats_kept_are_bounded() -> None:
    watch = CacheWatch(chats=2)
    for chat in ("a", "b", "c"):
        watch.observe(_request(1, chat=chat), _reply(0, 2000, f"msg_{chat}"))
    assert watch.previous_message_id(_request(2, chat="a")) is None
    assert watch.previous_message_id(_request(2, chat="c")) == "msg_c"


def test_only_anthropics_own_api_gets_the_diagnostics() -> None:
    assert anthropic_api("https://api.anthropic.com")
    assert anthropic_api("https://API.anthropic.com/")
    assert not anthropic_api("https://api.deepseek.com/anthropic")
    assert not anthropic_api("http://127.0.0.1:8080")
    assert not anthropic_api("http://api.anthropic.com")
    assert not anthropic_api("https://api.anthropic.com.example.org")


def test_repeated_messages_reuse_their_digests_and_a_changed_one_is_seen() -> None:
    """A chat's next request repeats its earlier messages (the same objects): their prints are reused, and the
    fingerprint is the one computed from scratch; a message replaced by a new object (an edit) is digested anew."""
    first = _request(3)
    known = message_prints()
    assert Fingerprint.of(first, known) == Fingerprint.of(first)
    grown = _request(4, messages=[*first.messages[:-1], *_messages(4)[-3:]])
    computed: list[dict[str, Any]] = []
    digests_before = dict(zip(map(id, known.items), known.results, strict=True))
    fingerprint = Fingerprint.of(grown, known)
    assert fingerprint == Fingerprint.of(grown)
    for message, printed in zip(known.items, known.results, strict=True):
        if id(message) not in digests_before:
            computed.append(message)
        else:
            assert digests_before[id(message)] is printed  # reused, not recomputed
    assert computed == grown.messages[-3:]
    edited = [*grown.messages[:2], {"role": "assistant", "content": "answer 0, edited"}, *grown.messages[3:]]
    changed = Fingerprint.of(_request(4, messages=edited), known)
    assert changed.common_messages(fingerprint) == 2


def test_a_one_hour_mark_on_a_message_gives_the_long_lifetime() -> None:
    long_mark = {"type": "ephemeral", "ttl": "1h"}
    messages = [
        *_messages(1)[:-1],
        {"role": "user", "content": [{"type": "text", "text": "q", "cache_control": long_mark}]},
    ]
    assert Fingerprint.of(_request(messages=messages), message_prints()).ttl_s == LONG_TTL_S
    assert Fingerprint.of(_request(1)).ttl_s < LONG_TTL_S


def test_a_chats_fingerprints_kept_from_call_to_call_are_the_ones_computed_afresh() -> None:
    """The joined digests and the 1-hour mark carried from call to call: a mark that comes, moves back into the
    conversation, and goes (an edit replacing its message) gives what a fingerprint from scratch gives."""
    long_mark = {"type": "ephemeral", "ttl": "1h"}
    known, messages = message_prints(), _messages(2)
    marked = {"role": "user", "content": [{"type": "text", "text": "q", "cache_control": long_mark}]}
    steps = [
        messages,
        [*messages[:-1], marked],
        [*messages[:-1], marked, {"role": "assistant", "content": "a"}, {"role": "user", "content": "q2"}],
        [*messages[:-1], {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
        [*messages[:2], marked],
    ]
    for step in steps:
        request = _request(messages=step)
        assert Fingerprint.of(request, known) == Fingerprint.of(request), step
    known(steps[0])  # the memo used directly: the next fingerprint does not trust what it kept
    request = _request(messages=steps[2])
    assert Fingerprint.of(request, known) == Fingerprint.of(request)
