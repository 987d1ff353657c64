"""The text of this app's recent answers by the ids of the messages that carried them, for quoting them back."""

from __future__ import annotations

from collections import OrderedDict

REMEMBERED = 1000
KEPT_CHARS = 600
"""Only the start of an answer is kept: a quote shows at most 500 characters of it."""


class RecentAnswers:
    """Which message answered which user message, and that answer's final text; bounded, oldest forgotten first.

    Feishu's message API returns a CardKit card answer without its streamed text, so a user quoting the bot's
    answer ("what about point 2?") is resolved from here instead."""

    def __init__(self, limit: int = REMEMBERED) -> None:
        self._limit = limit
        self._answered: OrderedDict[str, str] = OrderedDict()
        """Sent message id → the user message it replied to."""
        self._texts: OrderedDict[str, str] = OrderedDict()
        """User message id → the final text of the answer to it."""

    def sent(self, message_id: str, reply_to: str) -> None:
        if message_id:
            _put(self._answered, message_id, reply_to, self._limit)

    def answered(self, reply_to: str, text: str) -> None:
        _put(self._texts, reply_to, text[: KEPT_CHARS + 1], self._limit)

    def text_of(self, message_id: str) -> str | None:
        """The answer a sent message (any card or part of it) belonged to, if it is still remembered."""
        reply_to = self._answered.get(message_id)
        return self._texts.get(reply_to) if reply_to is not None else None


def _put(store: OrderedDict[str, str], key: str, value: str, limit: int) -> None:
    store[key] = value
    store.move_to_end(key)
    while len(store) > limit:
        store.popitem(last=False)
