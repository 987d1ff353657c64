"""The user's language where none is configured: the console and HTTP chats follow `Accept-Language` (and the
console's `?lang=` switch); error JSON is UTF-8 text, not `\\u` escapes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from agenthub import i18n
from agenthub.config import Settings
from tests.support.harness import RunningApi, running_api
from tests.support.http import AGENT
from tests.support.roots import make_settings

ENGLISH_BROWSER = {"Accept-Language": "en-GB,en;q=0.9,zh-CN;q=0.5"}
CHINESE_BROWSER = {"Accept-Language": "zh-CN,zh;q=0.9,en;q=0.8"}


async def console_lang(api: RunningApi, query: str = "", headers: dict[str, str] | None = None) -> str:
    async with api.client.get(api.base_url + "/" + query, headers=headers or {}) as resp:
        assert resp.status == 200
        page = await resp.text()
    return page.split("<html lang=", 1)[1].split(">", 1)[0].strip('"')


async def test_the_console_follows_the_browser_s_language_and_its_switch(api: RunningApi) -> None:
    assert await console_lang(api) == "zh-CN"  # no header: the HTTP channel's default
    assert await console_lang(api, headers=ENGLISH_BROWSER) == "en"
    assert await console_lang(api, headers=CHINESE_BROWSER) == "zh-CN"
    assert await console_lang(api, "?lang=zh-CN", headers=ENGLISH_BROWSER) == "zh-CN"  # the switch wins
    assert await console_lang(api, "?lang=en") == "en"


async def test_a_configured_locale_wins_over_the_browser(settings_factory: Callable[..., Settings]) -> None:
    settings = settings_factory(channels={"http": {"locale": "zh-CN"}})
    async with running_api(settings) as api:
        assert await console_lang(api, headers=ENGLISH_BROWSER) == "zh-CN"
        status, body = await api.call(
            "POST", AGENT + "/chat", json={"chat_id": "c1", "content": "/help"}, headers=ENGLISH_BROWSER
        )
        assert status == 200 and body["reply"].startswith("命令：")


@pytest.mark.parametrize(("headers", "title"), [(ENGLISH_BROWSER, "Commands:"), (CHINESE_BROWSER, "命令：")])
async def test_an_http_chat_answers_in_the_browser_s_language(
    api: RunningApi, headers: dict[str, str], title: str
) -> None:
    status, body = await api.call("POST", AGENT + "/chat", json={"chat_id": "c1", "content": "/help"}, headers=headers)
    assert status == 200 and body["reply"].startswith(title), body


async def test_error_json_is_utf8_text_not_escapes(api: RunningApi) -> None:
    body = {"chat_id": "会话一"}
    async with api.client.post(api.base_url + AGENT + "/sessions", json=body, headers=api.auth) as resp:
        assert resp.status == 201
    async with api.client.post(api.base_url + AGENT + "/sessions", json=body, headers=api.auth) as resp:
        raw = await resp.read()
        assert resp.status == 409 and resp.charset == "utf-8"
    assert "会话一".encode() in raw and b"\\u" not in raw


async def test_the_offline_reply_keeps_to_a_chosen_lang_and_otherwise_follows_the_words(tmp_path: Path) -> None:
    """`?lang=` is a language chosen (the terminal chat sends its own): even the offline reply keeps to it; a
    browser's Accept-Language is only a default, so the offline reply answers in the language written."""
    async with running_api(make_settings(tmp_path)) as api:  # no model key: the offline stand-in answers
        chat = {"chat_id": "c1", "content": "你好"}
        _, chosen = await api.call("POST", AGENT + "/chat?lang=en", json=chat)
        _, browser = await api.call("POST", AGENT + "/chat", json={**chat, "chat_id": "c2"}, headers=ENGLISH_BROWSER)
    for body, locale in ((chosen, "en"), (browser, "zh-CN")):
        echo = i18n.text("llm.offline.echo", locale, said="你好")
        assert body["reply"] == i18n.text("llm.offline.reply", locale, echo=echo), body
