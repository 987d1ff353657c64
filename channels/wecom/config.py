"""Configuration models of the WeCom channel: self-built apps and AI bots, each under its own cred_id."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SecretStr, field_validator

from agenthub import i18n
from agenthub.errors import ConfigError
from channels.toolkit.config import check_cred_ids, check_locale, parse_table, texts_locale


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class _Credential(_Model):
    agent: str | None = Field(None, description="the agent this credential's messages go to")
    allow_users: list[str] | None = Field(None, description="user ids allowed to talk; None lets everyone in")
    refusal: str | None = Field(None, description="the reply to a user not allowed; default: the catalogue's")
    unsupported: str | None = Field(None, description="the reply to a message type not taken; default: catalogue's")
    welcome: str | None = Field(None, description="sent when a user opens the app / enters the bot chat")
    _locale: i18n.Locale = PrivateAttr("zh-CN")

    def allows(self, user_id: str) -> bool:
        return self.allow_users is None or user_id in self.allow_users

    @property
    def locale(self) -> i18n.Locale:
        """The locale of the texts this credential writes (`[channels.wecom] locale`, else zh-CN)."""
        return self._locale

    def text(self, key: str, **params: object) -> str:
        """The catalogue text `key` in this credential's locale."""
        return i18n.text(key, self._locale, **params)


class AppConfig(_Credential):
    """One self-built app (自建应用): callback crypto plus the `message/send` credentials."""

    corp_id: str = Field(min_length=1)
    agent_id: int = Field(ge=0)
    secret: SecretStr
    token: SecretStr
    encoding_aes_key: SecretStr
    markdown: bool = Field(False, description="send replies as markdown (rendered only in the WeCom client)")
    strip_markdown: bool = Field(True, description="remove markdown symbols from text replies")
    api_base: str = "https://qyapi.weixin.qq.com"
    request_timeout_s: float = Field(10.0, gt=0)
    max_parts: int = Field(10, ge=1, description="cap on messages per answer (WeCom drops > 30/min/member)")
    part_gap_s: float = Field(0.5, ge=0, le=10, description="pause between the parts of one answer (keeps order)")
    rate_limit_retries: int = Field(3, ge=0)
    rate_limit_backoff_s: float = Field(2.0, ge=0, description="first backoff after 45009, doubled per retry")
    member_per_minute: int = Field(30, ge=1, description="messages per member per minute (WeCom drops more)")
    member_per_hour: int = Field(1000, ge=1, description="messages per member per hour (WeCom drops more)")
    member_wait_max_s: float = Field(
        60.0, ge=0, le=3600, description="how long one answer may wait for the member's budget before it is cut"
    )
    sender_names: bool = Field(True, description="name members by their display name (`user/get`, cached a day)")
    sender_name_wait_s: float = Field(
        0.5, ge=0, le=5, description="how long a message waits for its sender's name lookup before the userid is used"
    )

    @field_validator("encoding_aes_key")
    @classmethod
    def _check_aes_key(cls, value: SecretStr) -> SecretStr:
        raw = value.get_secret_value()
        try:
            key = base64.b64decode(raw + "=", validate=True)
        except (binascii.Error, ValueError):
            key = b""
        if len(raw) != 43 or len(key) != 32:
            raise ValueError("must be the 43-character EncodingAESKey from the admin console")
        return value


class BotConfig(_Credential):
    """One AI bot (智能机器人) on the long connection."""

    bot_id: str = Field(min_length=1)
    secret: SecretStr
    ws_url: str = "wss://openws.work.weixin.qq.com"
    session_per_member: bool = Field(False, description="in groups, one session per member instead of one")
    bot_name: str | None = Field(None, description="the bot's display name, stripped as @name from messages")
    names_from_app: str | None = Field(
        None, description="cred_id of a self-built app of the same corp whose `user/get` names the bot's senders"
    )
    ping_interval_s: float = Field(30.0, gt=0)
    ack_timeout_s: float = Field(5.0, gt=0, description="how long a command waits for its ack (the SDKs: 5 s)")
    send_wait_s: float = Field(30.0, gt=0, description="how long a reply waits for a (re)connection")
    connect_timeout_s: float = Field(10.0, gt=0)
    reconnect_min_s: float = Field(1.0, gt=0)
    reconnect_max_s: float = Field(30.0, gt=0)
    reconnect_stable_s: float = Field(
        60.0, gt=0, description="a connection must stay up this long before the reconnect backoff resets"
    )
    throttle_s: float = Field(0.5, ge=0, description="minimum gap between stream updates")
    keepalive_s: float = Field(180.0, gt=0, description="refresh a silent stream this often (expiry ~6 min)")
    stream_cap_bytes: int = Field(20480, ge=1024, le=20480)
    thinking_text: str | None = Field(None, description="shown until the first words; default: the catalogue's")


class WeComConfig(_Model):
    """The `[channels.wecom]` table."""

    enabled: bool = True
    locale: str | None = Field(None, description="zh-CN or en: the locale of every text written to WeCom users")
    dedup_ttl_s: float = Field(6 * 3600.0, gt=0, le=7 * 86400, description="how long message ids are remembered")
    stop_grace_s: float = Field(5.0, ge=0, description="on stop, how long replies in flight may finish")
    apps: dict[str, AppConfig] = Field(default_factory=dict)
    bots: dict[str, BotConfig] = Field(default_factory=dict)

    @property
    def texts_locale(self) -> i18n.Locale:
        """The locale of every text the channel writes: `locale`, else WeCom's default (zh-CN)."""
        return texts_locale(self.locale, "wecom")

    _known_locale = field_validator("locale")(check_locale)
    _check_ids = field_validator("apps", "bots")(check_cred_ids)


def load_config(raw: Mapping[str, Any]) -> WeComConfig:
    """Validate the raw table; raise `ConfigError` naming the key (never the value)."""
    config = parse_table(WeComConfig, raw, "wecom")
    clash = set(config.apps) & set(config.bots)
    if clash:
        raise ConfigError(f"invalid configuration: channels.wecom: cred_id used twice: {sorted(clash)}")
    for cred_id, bot in config.bots.items():
        if bot.names_from_app is not None and bot.names_from_app not in config.apps:
            raise ConfigError(
                f"invalid configuration: channels.wecom.bots.{cred_id}.names_from_app: no app with this cred_id"
            )
    for credential in [*config.apps.values(), *config.bots.values()]:
        credential._locale = config.texts_locale
    return config
