"""The session title rule: the first 40 characters of the first user message, product metadata prefixes stripped."""

from __future__ import annotations

from agenthub.storage.meta import DEFAULT_TITLE, title_from


def test_a_bracket_the_user_typed_stays_in_the_title() -> None:
    assert title_from("[重要] 明天下午三点开会") == "[重要] 明天下午三点开会"
    assert title_from("[TODO] ship it") == "[TODO] ship it"


def test_the_metadata_prefixes_the_product_adds_are_stripped() -> None:
    assert title_from("[channel: wecom] [from: zhangsan]  明天下午三点开会") == "明天下午三点开会"
    assert title_from("  [channel: http] [重要] 开会") == "[重要] 开会"


def test_a_message_of_only_metadata_gets_the_default_title() -> None:
    assert title_from("[channel: cli]") == DEFAULT_TITLE


def test_a_colon_bracket_the_user_typed_stays_too() -> None:
    assert title_from("[todo: 周五] 交报告") == "[todo: 周五] 交报告"
