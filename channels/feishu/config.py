"""Validated configuration of the Feishu/Lark channel: one `[channels.feishu.apps.<cred_id>]` table per app."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from agenthub.config import LONGEST_INTERVAL_S
from channels.toolkit.config import check_cred_ids, check_locale, parse_table

DOMAINS = {"feishu": "https://open.feishu.cn", "lark": "https://open.larksuite.com"}
_LOCAL_HTTP = re.compile(r"^http://(127\.0\.0\.1|localhost|\[::1\])(:\d+)?$")
_HTTPS_ORIGIN = re.compile(r"^https://[A-Za-z0-9.-]+(:\d+)?$")
MIN_DEDUP_TTL_S = 7 * 3600 + 600
"""Feishu redelivers at about 15 s, 5 min, 1 h and 6 h; the dedup memory must outlive the whole ladder."""

SessionScope = Literal["group", "group_sender", "group_topic", "group_topic_sender"]


class FeishuAppConfig(BaseModel):
    """One Feishu/Lark self-built app (bot)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    app_id: str = Field(min_length=1)
    app_secret: SecretStr
    mode: Literal["websocket", "webhook"] = "websocket"
    encrypt_key: SecretStr | None = None
    verification_token: SecretStr | None = None
    agent: str | None = None
    domain: str = "feishu"
    group_session_scope: SessionScope = "group"
    respond_to_mention_all: bool = False
    allow_from: list[str] = Field(default_factory=list)
    streaming_card: bool = True
    card_update_interval_s: float = Field(0.2, ge=0.1, le=5.0)
    card_updates_per_s: float = Field(14.0, gt=0, le=16.0)
    """App-wide pace of CardKit updates over all cards; Feishu's quota is 50/s and 1000/min (16.6/s)."""
    card_update_burst: int = Field(26, ge=1, le=30)
    """Updates allowed at once before that pace applies; with the pace, at most 40 in any second."""
    ack_reaction: str | None = None
    stale_after_s: float = Field(1800.0, gt=0)
    extra_events: list[str] = Field(default_factory=list)
    request_timeout_s: float = Field(10.0, gt=0, le=120)
    """Bounds every open-apis call, and the long connection's endpoint request (connect and reconnect)."""
    max_retries: int = Field(3, ge=0, le=10)
    sender_names: bool = True
    """Name users by their display name (contact v3, cached a day; needs the contact scopes, see docs/feishu.md)."""
    sender_name_wait_s: float = Field(0.5, ge=0, le=5)
    """How long a message waits for its sender's name lookup before the open_id is used (the lookup goes on)."""
    quote_timeout_s: float = Field(3.0, gt=0, le=30)
    """Bounds fetching the message a reply quotes (`parent_id`); past it the message goes on without the quote."""
    ws_dead_after_s: float = Field(600.0, gt=0, le=86400)
    """A long connection down this long (lark-oapi still reconnecting) counts as lost: the app is restarted
    with a new client. Lost at once when the SDK's reconnecting gives up (a refused secret, "exceed conn limit")."""

    @field_validator("app_secret")
    @classmethod
    def _secret_not_empty(cls, value: SecretStr) -> SecretStr:
        if not value.get_secret_value():
            raise ValueError("must not be empty")
        return value

    @field_validator("domain")
    @classmethod
    def _known_domain(cls, value: str) -> str:
        value = value.rstrip("/")
        if value in DOMAINS or _HTTPS_ORIGIN.match(value) or _LOCAL_HTTP.match(value):
            return value
        raise ValueError('must be "feishu", "lark", an https:// origin, or http:// on localhost')

    @model_validator(mode="after")
    def _card_updates_under_quota(self) -> FeishuAppConfig:
        if self.card_updates_per_s + self.card_update_burst > 40:
            raise ValueError("card_updates_per_s + card_update_burst must be at most 40 (Feishu allows 50/s)")
        return self

    @model_validator(mode="after")
    def _webhook_needs_token(self) -> FeishuAppConfig:
        if self.mode == "webhook" and not (self.verification_token and self.verification_token.get_secret_value()):
            raise ValueError("webhook mode needs verification_token (and preferably encrypt_key)")
        return self

    @property
    def base_url(self) -> str:
        """The open-apis origin (`https://open.feishu.cn` or an override)."""
        return DOMAINS.get(self.domain, self.domain)

    def secret(self, name: Literal["encrypt_key", "verification_token"]) -> str:
        value: SecretStr | None = getattr(self, name)
        return value.get_secret_value() if value is not None else ""


class FeishuConfig(BaseModel):
    """The whole `[channels.feishu]` table."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    apps: dict[str, FeishuAppConfig] = Field(default_factory=dict)
    locale: str | None = Field(None, description="zh-CN or en: the locale of every text written to Feishu users")
    dedup_ttl_s: float = Field(8 * 3600.0, ge=MIN_DEDUP_TTL_S, le=LONGEST_INTERVAL_S)
    start_retry_s: float = Field(5.0, gt=0, le=3600)
    """Delay before an app that failed to start is tried again; it doubles after each failure."""
    start_retry_max_s: float = Field(300.0, gt=0, le=86400)
    """The longest delay between two start attempts of a failed app."""

    _known_locale = field_validator("locale")(check_locale)

    @field_validator("apps")
    @classmethod
    def _cred_ids(cls, value: dict[str, FeishuAppConfig]) -> dict[str, FeishuAppConfig]:
        check_cred_ids(value)
        app_ids = [app.app_id for app in value.values()]
        if len(set(app_ids)) != len(app_ids):
            raise ValueError("two apps share one app_id")
        return value


def parse_config(raw: Mapping[str, Any]) -> FeishuConfig:
    """Validate the raw table; a bad value raises `ConfigError` naming the key, never the value."""
    return parse_table(FeishuConfig, raw, "feishu")
