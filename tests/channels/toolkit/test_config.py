"""The channel config helpers: one cred_id rule, one locale rule, one error format naming keys, never values."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, SecretStr, field_validator

from agenthub.errors import ConfigError
from channels.toolkit.config import check_cred_ids, check_locale, parse_table, texts_locale


class _Cred(BaseModel):
    model_config = ConfigDict(extra="forbid")
    secret: SecretStr
    port: int = 1


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid")
    locale: str | None = None
    creds: dict[str, _Cred] = {}

    _locale = field_validator("locale")(check_locale)
    _ids = field_validator("creds")(check_cred_ids)


def _parse(raw: dict[str, Any]) -> _Table:
    return parse_table(_Table, raw, "demo")


def test_good_ids_pass_and_bad_ones_are_refused_by_one_rule() -> None:
    assert list(_parse({"creds": {"main-bot_2": {"secret": "s"}, "0": {"secret": "s"}}}).creds) == ["main-bot_2", "0"]
    for bad in ("MyBot", "-lead", "_x", "a/b", "../x", "a:b", "", "x" * 65):
        with pytest.raises(ConfigError, match=r"cred_id .* lowercase"):
            _parse({"creds": {bad: {"secret": "s"}}})


def test_errors_name_the_full_key_and_never_the_value() -> None:
    with pytest.raises(ConfigError) as err:
        _parse({"creds": {"main": {"secret": "TOPSECRET", "port": "TOPSECRET"}}, "typo": "TOPSECRET"})
    text = str(err.value)
    assert text.startswith("invalid configuration: ")
    assert "channels.demo.creds.main.port" in text and "channels.demo.typo" in text
    assert "TOPSECRET" not in text


def test_locale_is_checked() -> None:
    assert _parse({"locale": "en"}).locale == "en"
    with pytest.raises(ConfigError, match=r"channels\.demo\.locale"):
        _parse({"locale": "fr"})


def test_the_texts_locale_is_the_configured_one_else_the_channel_s_default() -> None:
    assert texts_locale("en_US.UTF-8", "wecom") == "en"
    assert texts_locale(None, "wecom") == "zh-CN"
    assert texts_locale(None, "feishu") == "zh-CN"
    assert texts_locale("zh", "cli") == "zh-CN"
