"""The offline stand-in answers in the language the user wrote in, whatever the chat's default locale."""

from __future__ import annotations

import pytest

from agenthub import i18n
from agenthub.llm.offline import offline_reply


@pytest.mark.parametrize(
    ("said", "locale", "expected"),
    [
        ("hello there", "zh-CN", "en"),
        ("你好", "en", "zh-CN"),
        ("hi, 你好", "en", "zh-CN"),
        ("12345 !!", "zh-CN", "zh-CN"),  # nothing to tell by: the chat's locale
        ("12345 !!", "en", "en"),
    ],
)
def test_the_offline_reply_follows_the_language_the_user_wrote_in(said: str, locale: str, expected: str) -> None:
    reply = offline_reply([{"role": "user", "content": said}], locale)
    assert reply.startswith(i18n.text("llm.offline.reply", expected, echo="")[:8])


def test_a_configured_locale_keeps_the_offline_reply_in_it() -> None:
    reply = offline_reply([{"role": "user", "content": "hello"}], "zh-CN", configured=True)
    assert reply.startswith(i18n.text("llm.offline.reply", "zh-CN", echo="")[:8])


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("en-US,en;q=0.9", "en"),
        ("zh-CN,zh;q=0.9,en;q=0.8", "zh-CN"),
        ("fr-FR,fr;q=0.9,en;q=0.5,zh;q=0.4", "en"),
        ("zh;q=0.2,en;q=0.7", "en"),
        ("fr", None),
        ("", None),
        ("en;q=0", None),
    ],
)
def test_accept_language_picks_the_best_locale_we_have(header: str, expected: str | None) -> None:
    assert i18n.accept_language(header) == expected
