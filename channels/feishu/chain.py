"""A turn's reply as a chain of streaming cards, each under Feishu's card size limit and holding one table."""

from __future__ import annotations

import structlog

from channels.feishu.api import FeishuApi, FeishuApiError
from channels.feishu.card import CardStream
from channels.feishu.format import CARD_SPLIT_BYTES, card_cut, open_fence
from channels.toolkit.notices import with_notices

log = structlog.get_logger(__name__)


class CardChain:
    """Streams one answer into as many cards as it needs, every character in exactly one of them.

    A card is closed, and the answer continues in a new card below it, when its text would pass
    `split_bytes` (Feishu refuses cards over 30 KB) or a second markdown table starts (Feishu allows one
    per card, error 11310). A card closed inside a ``` block gets a closing fence line, and the next card
    reopens the block with the same info string, so code stays code; the closed cards' text minus these
    added lines is the answer, every character once. Notices go above the text of the card that is open
    when they arrive. When a card cannot be used (a new one cannot be created, or one could not show its
    text), the chain stops and `finish()` returns what no card showed, for a normal reply.
    """

    def __init__(
        self,
        api: FeishuApi,
        reply_to: str,
        key: str,
        *,
        interval_s: float,
        locale: str,
        split_bytes: int = CARD_SPLIT_BYTES,
    ) -> None:
        self._api = api
        self._locale = locale
        self._reply_to = reply_to
        self._key = key
        self._interval_s = interval_s
        self._split_bytes = split_bytes
        self.cards: list[CardStream] = []
        self._card: CardStream | None = None
        self._committed = ""
        """The answer text the closed cards show, in order."""
        self._noticed: list[str] = []
        """The notices the closed cards show."""
        self._reopen = ""
        """The fence line (and newline) the open card starts with: the previous card closed inside a block."""
        self.failed = False

    async def open(self) -> None:
        """Create and send the first card; raises `FeishuApiError` (then nothing was sent)."""
        self._card = await self._new_card()

    async def push(self, text: str, notices: list[str]) -> None:
        """Show the answer so far; when it outgrows the open card, close that card and go on in a new one."""
        if await self._fit(text, notices) and self._card is not None:
            self._card.push(self._shown(text, notices))

    async def finish(self, text: str, notices: list[str]) -> str | None:
        """Show the final answer and close the last card; return the part no card shows (None: all shown)."""
        if await self._fit(text, notices) and self._card is not None:
            await self._card.finish(self._shown(text, notices))
            if not self._card.broken:
                return None
        return self._shown(text, notices)

    async def _fit(self, text: str, notices: list[str]) -> bool:
        """Roll over to new cards until the open card can show the rest; False once cards are given up."""
        while not self.failed and self._card is not None:
            cut = card_cut(self._shown(text, notices), self._split_bytes)
            if cut is None:
                return True
            await self._roll(text, notices, cut)
        return False

    def _rest(self, text: str) -> str:
        """The answer text after what the closed cards show."""
        if text.startswith(self._committed):
            return text[len(self._committed) :]
        pairs = enumerate(zip(text, self._committed, strict=False))
        same = next((i for i, (a, b) in pairs if a != b), min(len(text), len(self._committed)))
        log.warning("feishu_card_chain_text_changed", shown_chars=len(self._committed), kept_chars=same)
        return text[same:]  # the final text differs from what streamed: the closed cards cannot change

    def _pending(self, notices: list[str]) -> list[str]:
        return [n for n in notices if n not in self._noticed]

    def _shown(self, text: str, notices: list[str]) -> str:
        """The open card's text: notices not shown yet above the answer text not shown yet."""
        return with_notices(self._reopen + self._rest(text), self._pending(notices))

    async def _roll(self, text: str, notices: list[str], cut: int) -> None:
        """Close the open card with its text up to `cut` and open the next one (or give cards up)."""
        assert self._card is not None
        rest, pending = self._rest(text), self._pending(notices)
        head = len(self._shown(text, notices)) - len(rest)  # the notice and fence lines above the text
        piece = rest[: max(1, cut - head)]
        fence = open_fence(self._committed + piece)
        close = "" if fence is None else ("" if piece.endswith("\n") else "\n") + "```"
        card = self._card
        await card.finish(with_notices(self._reopen + piece + close, pending))
        self._card = None
        if card.broken:
            self.failed = True
            log.warning("feishu_card_chain_stopped", cards=len(self.cards), reason="card could not show its text")
            return
        self._committed += piece
        self._noticed += pending
        self._reopen = "" if fence is None else fence + "\n"
        log.info("feishu_card_continued", cards=len(self.cards) + 1, shown_chars=len(self._committed))
        try:
            self._card = await self._new_card()
        except FeishuApiError as e:
            self.failed = True
            log.warning("feishu_card_chain_stopped", cards=len(self.cards), code=e.code, error=str(e))

    async def _new_card(self) -> CardStream:
        key = self._key if not self.cards else f"{self._key}#card{len(self.cards)}"
        card = CardStream(self._api, self._reply_to, key, interval_s=self._interval_s, locale=self._locale)
        await card.open()
        self.cards.append(card)
        return card
