"""Stored history → the API's message list: refused turns and orphan tool blocks dropped, images placed, old tool
results cut, cache marks; `Memo` keeps what a session's earlier turns already converted."""

from __future__ import annotations

import bisect
import datetime as dt
import itertools
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from agenthub.agent.settled import SettledPrefix
from agenthub.agent.settled import chat_type_of as newest_chat_type
from agenthub.media.loader import LoadedImage
from agenthub.media.refs import image_ref_source, media_text

Message = dict[str, Any]
T = TypeVar("T")
CACHE = {"type": "ephemeral"}
SUMMARY_PREFIX = "[历史摘要]"
EARLIER_PLACEHOLDER = "(The earlier part of this conversation is summarised in the system prompt.)"
INTERRUPTED_PLACEHOLDER = "[no reply: this turn was interrupted]"
"""Sent (never stored) between two user messages: the first turn ended without a reply (/stop, error, …)."""


class Memo:
    """One session's results of pure per-message functions between builds. Histories grow by appends and no
    message is changed in place, so each call site's items are compared by identity with the same call's items in
    the previous build (held, so an id cannot be reused): the common prefix reuses its results at C speed, the rest
    is looked up by identity and only what the previous build did not see is computed (a turn converts what was
    appended; a replace with new messages recomputes). `settle` ends a build."""

    def __init__(self) -> None:
        self._previous: dict[tuple[object, ...], tuple[list[Any], list[Any]]] = {}
        self._current: dict[tuple[object, ...], tuple[list[Any], list[Any]]] = {}
        self._joined_before: dict[tuple[object, ...], tuple[tuple[object, ...], Any]] = {}
        self._joined: dict[tuple[object, ...], tuple[tuple[object, ...], Any]] = {}
        self.computed = 0
        self.settled = SettledPrefix()
        """The session's history converted up to its last settled turn (`ContextBuilder.build`)."""

    def map(self, fn: Callable[..., T], items: list[Any], *args: Any) -> list[T]:
        """`[fn(item, *args) for item in items]`, reusing the previous build's results for the items it saw."""
        name: tuple[object, ...] = (fn, *args)
        site = (*name, sum(1 for known in self._current if known[:-1] == name))
        before, results = self._previous.get(site, ([], []))
        same = list(map(operator.is_, items, before))
        try:
            kept = same.index(False)
        except ValueError:
            kept = len(same)
        seen = {id(item): (item, result) for item, result in zip(before[kept:], results[kept:], strict=True)}
        mapped = results[:kept]
        for item in items[kept:]:
            hit = seen.get(id(item))
            if hit is None or hit[0] is not item:
                self.computed += 1
                hit = (item, fn(item, *args))
            mapped.append(hit[1])
        self._current[site] = (items, mapped)
        return mapped

    def join(self, fn: Callable[..., T], *parts: Any) -> T:
        """`fn(*parts)` for a message made of others (two merged neighbours), the same object while they are."""
        key = (fn, *map(id, parts))
        hit = self._joined.get(key) or self._joined_before.get(key)
        if hit is None or any(a is not b for a, b in zip(hit[0], parts, strict=True)):
            self.computed += 1
            hit = (parts, fn(*parts))
        self._joined[key] = hit
        return hit[1]

    def settle(self) -> int:
        """End of a build: keep what it used for the next one; returns how many results it computed."""
        computed, self.computed = self.computed, 0
        self._previous, self._current = self._current, {}
        self._joined_before, self._joined = self._joined, {}
        return computed


class NoMemo(Memo):
    """The uncached path: every call computes."""

    def map(self, fn: Callable[..., T], items: list[Any], *args: Any) -> list[T]:
        return [fn(item, *args) for item in items]

    def join(self, fn: Callable[..., T], *parts: Any) -> T:
        return fn(*parts)


NO_MEMO = NoMemo()


def chat_type_of(history: list[Message]) -> object:
    """The `chat_type` the newest user message of the chat was stored with (None when none was: a group, for
    the scope rule)."""
    return newest_chat_type(history)


def fold_system_messages(history: list[Message]) -> list[str]:
    """The text of `role: "system"` history messages (summaries), in order."""
    return [str(m["content"]) for m in history if m.get("role") == "system" and isinstance(m.get("content"), str)]


def _user_suffix(message: Message, zone: dt.tzinfo) -> str:
    """Per-message volatile context derived only from the stored message (its time on the clock of `zone`, one zone
    for every build), so it renders identically every turn."""
    parts = []
    stamp = message.get("timestamp")
    if isinstance(stamp, int | float):
        when = dt.datetime.fromtimestamp(stamp / 1000, tz=zone)
        parts.append(when.strftime("%Y-%m-%d %H:%M %Z").strip())
    if isinstance(message.get("channel"), str):
        parts.append(f"via {message['channel']}")
    return f"\n\n[{', '.join(parts)}]" if parts else ""


def _api_message(message: Message, zone: dt.tzinfo) -> Message:
    """User text is always sent as content blocks, so a message renders the same whether or not it carries
    the newest-message cache breakpoint (the cached prefix stays byte-identical from turn to turn)."""
    content = message.get("content")
    if message["role"] == "user" and isinstance(content, str):
        content = _as_blocks(content + _user_suffix(message, zone))
    elif message["role"] == "user" and isinstance(content, list) and _opens_turn(message):
        suffix = _user_suffix(message, zone).lstrip("\n")  # a message with media: text, images, file lines
        content = [*content, {"type": "text", "text": suffix}] if suffix else list(content)
    api = {"role": message["role"], "content": content}
    if message.get("together"):
        api["together"] = True  # read (and dropped) by `to_api_messages`
    return api


def _as_blocks(content: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _is_empty(message: Message) -> bool:
    content = message.get("content")
    if isinstance(content, str):
        return not content.strip()
    return not content


def _opens_turn(message: Message) -> bool:
    """A user message someone typed (not one that only carries tool results)."""
    content = message.get("content")
    if message.get("role") != "user":
        return False
    return not isinstance(content, list) or any(isinstance(b, dict) and b.get("type") != "tool_result" for b in content)


def drop_refused_turns(history: list[Message]) -> list[Message]:
    """Leave out each turn the model refused (its assistant message is flagged `refusal`): the API asks for the
    refused turn to be removed before going on, or it keeps refusing. The stored history keeps it."""
    kept: list[Message] = []
    for message in history:
        if message.get("role") == "assistant" and message.get("refusal"):
            while kept and kept[-1].get("role") != "system" and not _opens_turn(kept[-1]):
                kept.pop()
            if kept and _opens_turn(kept[-1]):
                kept.pop()
            continue
        kept.append(message)
    return kept


def _tool_ids(message: Message, block_type: str, id_field: str) -> set[str]:
    content = message.get("content")
    if not isinstance(content, list):
        return set()
    return {str(b.get(id_field)) for b in content if isinstance(b, dict) and b.get("type") == block_type}


def _has_tool_blocks(message: Message) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result") for b in content
    )


def drop_orphan_tool_blocks(messages: list[Message], memo: Memo = NO_MEMO) -> list[Message]:
    """Remove `tool_use` blocks with no result right after them and `tool_result` blocks with no `tool_use`."""
    cleaned: list[Message] = []
    with_tools = memo.map(_has_tool_blocks, messages)
    for i, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, list):
            cleaned.append(message)
            continue
        if not with_tools[i]:  # nothing to drop: kept as it is, unless it is empty
            if content:
                cleaned.append(message)
            continue
        after = messages[i + 1] if i + 1 < len(messages) else _NO_MESSAGE
        before = messages[i - 1] if i > 0 else _NO_MESSAGE
        kept = memo.join(_paired_blocks_only, before, message, after)
        if kept is not None:
            cleaned.append(kept)
    return cleaned


_NO_MESSAGE: Message = {}
"""The neighbour of the first and the last message (never changed)."""


def _paired_blocks_only(before: Message, message: Message, after: Message) -> Message | None:
    """`message` without its `tool_use` blocks that `after` does not answer and its `tool_result` blocks that
    `before` did not ask for; the same message when nothing is dropped, None when nothing is left."""
    content = message["content"]
    answered = _tool_ids(after, "tool_result", "tool_use_id")
    asked = _tool_ids(before, "tool_use", "id")
    blocks = [
        b
        for b in content
        if not (isinstance(b, dict) and b.get("type") == "tool_use" and str(b.get("id")) not in answered)
        and not (isinstance(b, dict) and b.get("type") == "tool_result" and str(b.get("tool_use_id")) not in asked)
    ]
    if len(blocks) == len(content):
        return message  # every pair intact: the same message (a memoised one stays memoised)
    return {**message, "content": blocks} if blocks else None


def to_api_messages(
    history: list[Message], images: Mapping[str, LoadedImage] | None = None, zone: dt.tzinfo = dt.UTC
) -> list[Message]:
    """History → API messages: no system role, no refused turns, tool pairs intact, no empty assistant text,
    user first (a placeholder user message when the kept history opens with the assistant).

    Two assistant neighbours are merged; two user neighbours (a turn that ended without a reply) get an
    `INTERRUPTED_PLACEHOLDER` assistant message between them, so separate requests never read as one, unless
    the later one is flagged `together` (messages that waited and went to the model as one turn): then their
    blocks are joined into one user message.

    Stored image references become base64 image blocks from `images` (path → loaded file, see `images_to_send`)
    in the recent turns, `[image: <path>]` text elsewhere and everywhere when `images` is None (see
    `place_images`). A user message's time is told on the clock of `zone` (`scheduler.timezone`).
    """
    return place_images(to_conversation(history, zone=zone), images)


def _without_together(message: Message) -> Message:
    return {k: v for k, v in message.items() if k != "together"}


def to_conversation(history: list[Message], memo: Memo = NO_MEMO, zone: dt.tzinfo = dt.UTC) -> list[Message]:
    conversation = [m for m in drop_refused_turns(history) if m.get("role") in ("user", "assistant")]
    kept = [m for m in conversation if not (m["role"] == "assistant" and _is_empty(m))]
    plain = memo.map(_api_message, kept, zone)
    plain = drop_orphan_tool_blocks(plain, memo)
    merged: list[Message] = []
    for message in plain:
        if merged and merged[-1]["role"] == message["role"] == "assistant":
            merged[-1] = memo.join(_assistants_merged, merged[-1], message)
            continue
        together = message.get("together", False)  # never popped: `message` may be a memoised conversion
        if merged and merged[-1]["role"] == message["role"] == "user":
            if together:  # sent while the previous turn ran: one turn with the messages before it
                merged[-1] = memo.join(_users_joined, merged[-1], message)
                continue
            merged.append(_INTERRUPTED_MESSAGE)
        merged.append(memo.join(_without_together, message) if "together" in message else message)
    if merged and merged[0]["role"] != "user":  # a compaction cut before an assistant message: keep it
        merged.insert(0, _EARLIER_MESSAGE)
    return merged


_INTERRUPTED_MESSAGE: Message = {"role": "assistant", "content": INTERRUPTED_PLACEHOLDER}
_EARLIER_MESSAGE: Message = {"role": "user", "content": _as_blocks(EARLIER_PLACEHOLDER)}
"""Placeholders sent as they are in every request (never changed)."""


def _assistants_merged(first: Message, second: Message) -> Message:
    return {"role": "assistant", "content": _as_blocks(first["content"]) + _as_blocks(second["content"])}


def _users_joined(first: Message, second: Message) -> Message:
    return {"role": "user", "content": _as_blocks(first["content"]) + second["content"]}


IMAGE_RECENT_TURNS = 4
IMAGE_STEP_TURNS = 4
"""Images of at least the newest `IMAGE_RECENT_TURNS` user turns go as image blocks; the cut-off moves
`IMAGE_STEP_TURNS` turns at a time (as for old tool results), so the request stays a byte-identical prefix of the
next one in between and the prompt cache misses once per step."""
MAX_REQUEST_IMAGES = 100
"""The Messages API takes at most 100 images per request."""
MAX_REQUEST_IMAGE_CHARS = 20_000_000
"""Base64 characters of all image blocks of one request; the API refuses requests over 32 MB."""
MISSING_IMAGE = "[image no longer available: {path}]"


def _openers(messages: list[Message], memo: Memo) -> list[int]:
    return list(itertools.compress(range(len(messages)), memo.map(_opens_turn, messages)))  # at C speed


def _has_tool_result(message: Message) -> bool:
    content = message.get("content")
    return (
        message.get("role") == "user"
        and isinstance(content, list)
        and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    )


@dataclass(frozen=True, slots=True)
class Positions:
    """Where in a conversation the messages are that open a turn, refer to a stored image and carry tool results,
    the settled prefix's part kept between builds (`SettledPrefix.positions`). Placing images changes none of
    the three, so the positions of a conversation are those of its images placed too."""

    openers: list[int]
    images: list[int]
    results: list[int]

    @classmethod
    def of(cls, conversation: list[Message], settled: SettledPrefix) -> Positions:
        """The positions in `conversation`, from those `settled` keeps where it made `conversation`."""
        return cls(
            settled.positions(_opens_turn, conversation),
            settled.positions(_has_image_ref, conversation),
            settled.positions(_has_tool_result, conversation),
        )


def _image_boundary(messages: list[Message], memo: Memo = NO_MEMO, openers: list[int] | None = None) -> int:
    openers = _openers(messages, memo) if openers is None else openers
    steps = max(0, len(openers) - IMAGE_RECENT_TURNS) // IMAGE_STEP_TURNS
    return openers[steps * IMAGE_STEP_TURNS] if steps else 0


def recent_image_refs(
    messages: list[Message], memo: Memo = NO_MEMO, openers: list[int] | None = None
) -> list[tuple[int, int, tuple[str, str]]]:
    """(message index, block index, (path, media type)) of the image references after the cut-off, newest first
    (`openers`: `Positions.openers` of `messages`, when known)."""
    found = []
    for i in range(len(messages) - 1, _image_boundary(messages, memo, openers) - 1, -1):
        content = messages[i].get("content")
        if messages[i].get("role") != "user" or not isinstance(content, list):
            continue
        for j in range(len(content) - 1, -1, -1):
            ref = image_ref_source(content[j])
            if ref is not None:
                found.append((i, j, ref))
    return found


def images_to_send(history: list[Message]) -> list[tuple[str, str]]:
    """(path, media type) of the stored images the next request may carry as image blocks."""
    return [ref for _, _, ref in recent_image_refs(to_conversation(history))]


def _has_image_ref(message: Message) -> bool:
    content = message.get("content")
    return message.get("role") == "user" and isinstance(content, list) and any(image_ref_source(b) for b in content)


def place_images(
    messages: list[Message],
    images: Mapping[str, LoadedImage] | None,
    memo: Memo = NO_MEMO,
    positions: Positions | None = None,
) -> list[Message]:
    """API messages whose image references are base64 image blocks in the recent turns (newest first, within
    `MAX_REQUEST_IMAGES` and `MAX_REQUEST_IMAGE_CHARS`), `[image: <path>]` text otherwise (all of them when
    `images` is None: a model without image input), and a placeholder for a recent one whose file is gone. Never
    more than the request may hold; the stored history is unchanged. `positions`: those of `messages`, when known."""
    openers = positions.openers if positions is not None else None
    chosen: dict[tuple[int, int], dict[str, Any]] = {}
    missing: set[tuple[int, int]] = set()
    chars = 0
    loadable = images or {}
    for i, j, (path, _) in recent_image_refs(messages, memo, openers) if images is not None else []:
        loaded = loadable.get(path)
        if loaded is None:
            missing.add((i, j))
        elif len(chosen) < MAX_REQUEST_IMAGES and chars + len(loaded.data) <= MAX_REQUEST_IMAGE_CHARS:
            chars += len(loaded.data)
            source = {"type": "base64", "media_type": loaded.media_type, "data": loaded.data}
            chosen[(i, j)] = {"type": "image", "source": source}
    placed = list(messages)
    recent = sorted({i for i, _ in chosen} | {i for i, _ in missing})
    if positions is None:
        referring: Iterable[int] = itertools.compress(range(len(messages)), memo.map(_has_image_ref, messages))
    else:
        referring = positions.images
    old = [i for i in referring if i not in recent]
    for i, as_text in zip(old, memo.map(_images_as_text, [messages[i] for i in old]), strict=True):
        placed[i] = as_text  # every image of it as text: the same each turn
    for i in recent:
        blocks = []
        for j, block in enumerate(messages[i]["content"]):
            ref = image_ref_source(block)
            if ref is None:
                blocks.append(block)
            elif (i, j) in chosen:
                blocks.append(chosen[(i, j)])
            elif (i, j) in missing:
                blocks.append({"type": "text", "text": MISSING_IMAGE.format(path=ref[0])})
            else:
                blocks.append(_image_as_text(block))
        placed[i] = {**messages[i], "content": blocks}
    return placed


def _image_as_text(block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "text", "text": media_text(block) or "[image]"}


def _images_as_text(message: Message) -> Message:
    blocks = [block if image_ref_source(block) is None else _image_as_text(block) for block in message["content"]]
    return {**message, "content": blocks}


RECENT_TURNS = 2
CUT_STEP_TURNS = 8
"""The cut-off moves in steps of this many turns, not every turn: each move changes the request from the first
newly cut result on, so the prompt cache misses once per step instead of on every tool-using turn."""
"""Tool results of the newest this many user turns are always sent whole."""


def cut_middle(text: str, limit: int) -> str:
    """`text` within `limit` characters: its first three quarters and last quarter of the limit around a marker
    that says how much was cut; deterministic, so an old block renders identically every turn."""
    if limit <= 0 or len(text) <= limit:
        return text
    head = limit * 3 // 4
    tail = limit - head
    return f"{text[:head]}\n[… {len(text) - limit} characters cut …]\n{text[len(text) - tail :]}"


def _cut_result(block: dict[str, Any], limit: int) -> dict[str, Any]:
    """A copy of a `tool_result` block with its text cut (the stored block is never changed)."""
    inner = block.get("content")
    if isinstance(inner, str):
        return {**block, "content": cut_middle(inner, limit)} if len(inner) > limit else block
    if not isinstance(inner, list):
        return block
    parts = [
        {**b, "text": cut_middle(b["text"], limit)}
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        else b
        for b in inner
    ]
    return {**block, "content": parts}


def _with_results_cut(message: Message, limit: int) -> Message:
    content = message.get("content")
    if message.get("role") != "user" or not isinstance(content, list):
        return message
    blocks = [_cut_result(b, limit) if isinstance(b, dict) and b.get("type") == "tool_result" else b for b in content]
    return {**message, "content": blocks}


def cut_old_tool_results(
    messages: list[Message], limit: int, memo: Memo = NO_MEMO, positions: Positions | None = None
) -> list[Message]:
    """API messages whose `tool_result` texts are cut to about `limit` characters (0: none are) in the turns
    before the cut-off. The cut-off keeps at least the newest `RECENT_TURNS` user turns whole and advances
    `CUT_STEP_TURNS` turns at a time, so requests stay byte-identical prefixes of each other in between.
    Blocks are never removed, so every `tool_use` keeps its result. With `positions` (those of `messages`), only
    the messages with tool results are looked at."""
    if limit <= 0:
        return messages
    openers = _openers(messages, memo) if positions is None else positions.openers
    steps = max(0, len(openers) - RECENT_TURNS) // CUT_STEP_TURNS
    boundary = openers[steps * CUT_STEP_TURNS] if steps else 0
    if positions is None:
        return [*memo.map(_with_results_cut, messages[:boundary], limit), *messages[boundary:]]
    cut = list(messages)
    before = positions.results[: bisect.bisect_left(positions.results, boundary)]
    for i, message in zip(before, memo.map(_with_results_cut, [messages[i] for i in before], limit), strict=True):
        cut[i] = message
    return cut


def mark_newest_message(messages: list[Message]) -> list[Message]:
    """A copy whose newest message's last content block carries `cache_control` (the third breakpoint, after
    the system prompt and the tools; the API allows four), so the conversation so far is cached too."""
    if not messages:
        return messages
    newest = messages[-1]
    blocks = _as_blocks(newest["content"])
    if not blocks:
        return messages
    blocks[-1] = {**blocks[-1], "cache_control": CACHE}
    return [*messages[:-1], {**newest, "content": blocks}]
