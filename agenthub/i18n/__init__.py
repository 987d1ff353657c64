"""User-facing texts in zh-CN and en: one catalogue (split by area), one lookup, where a chat's locale comes from."""

from __future__ import annotations

import locale as _system
import os
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

from agenthub.i18n import catalogue

Locale = Literal["zh-CN", "en"]
LOCALES: Final[tuple[Locale, ...]] = ("zh-CN", "en")
CHANNEL_DEFAULTS: Final[Mapping[str, Locale]] = {"wecom": "zh-CN", "feishu": "zh-CN", "http": "zh-CN"}


class LocaleSettings(Protocol):
    """What the locale rules read of the settings (`config.Settings`): the `[channels.<name>]` tables."""

    @property
    def channels(self) -> Mapping[str, Mapping[str, Any]]: ...


class LocaleAgent(Protocol):
    """What the locale rules read of an agent (`agent.definition.AgentDefinition`): its agent.json, with `locale`."""

    @property
    def config(self) -> object: ...


"""Channels whose users are Chinese teams by default; any other channel (the CLI) follows the system locale."""

LOCALE_CHOSEN: Final = "locale_chosen"
"""`InboundMessage.metadata` flag: the sender chose the `locale` it carries (the terminal's own locale; an API
caller's `?lang=`), so it counts as set: the offline reply keeps to it instead of following the user's words."""

TEXTS: Final[Mapping[str, Mapping[str, str]]] = catalogue.merged()


class UnknownTextError(KeyError):
    """A text key that the catalogue does not have (a bug: every key is checked by the catalogue test)."""


def normalise_locale(raw: object) -> Locale | None:
    """`zh`, `zh_CN.UTF-8`, `zh-Hans`, `ZH-cn` → zh-CN; `en`, `en_US`, `C`, `POSIX` → en; anything else → None."""
    if not isinstance(raw, str) or not raw.strip():
        return None
    tag = raw.strip().split(".")[0].replace("_", "-").lower()
    if tag == "zh" or tag.startswith("zh-"):
        return "zh-CN"
    if tag in ("en", "c", "posix") or tag.startswith("en-"):
        return "en"
    return None


def system_locale() -> Locale:
    """The locale of the environment the process runs in (LC_ALL, LC_MESSAGES, LANG), en when unknown."""
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        found = normalise_locale(os.environ.get(name))
        if found is not None:
            return found
    return normalise_locale(_system.getlocale()[0]) or "en"


def configured_locale(settings: LocaleSettings, channel: str) -> Locale | None:
    """`locale` in `[channels.<channel>]`, or None when it is not set."""
    return normalise_locale(settings.channels.get(channel, {}).get("locale"))


def channel_locale(settings: LocaleSettings, channel: str, asked: object = None) -> Locale:
    """`locale` in `[channels.<channel>]`, else what the user `asked` for (a browser's Accept-Language), else the
    channel's default (zh-CN: WeCom, Feishu, HTTP; CLI: system)."""
    configured = configured_locale(settings, channel)
    if configured is not None:
        return configured
    return normalise_locale(asked) or CHANNEL_DEFAULTS.get(channel) or system_locale()


def locale_for(
    settings: LocaleSettings, channel: str, agent: LocaleAgent | None = None, asked: object = None
) -> Locale:
    """The locale of a chat: the agent's `locale` in agent.json when set, else the channel's (see `channel_locale`)."""
    if agent is not None:
        chosen = normalise_locale(getattr(agent.config, "locale", None))
        if chosen is not None:
            return chosen
    return channel_locale(settings, channel, asked)


def locale_is_configured(settings: LocaleSettings, channel: str, agent: LocaleAgent | None = None) -> bool:
    """A locale is set for the chat: the agent's in agent.json, `[channels.<channel>] locale`, or, in the terminal,
    the system's (LANG: the terminal's texts are in it, and its replies with them)."""
    if agent is not None and normalise_locale(getattr(agent.config, "locale", None)) is not None:
        return True
    return channel not in CHANNEL_DEFAULTS or configured_locale(settings, channel) is not None


def accept_language(header: str | None) -> Locale | None:
    """The best of our locales in an `Accept-Language` header by its q-values (`en-GB,zh;q=0.5` → en), else None."""
    ranked: list[tuple[float, int, Locale]] = []
    for position, part in enumerate((header or "").split(",")):
        tag, _, params = part.strip().partition(";")
        quality = 1.0
        for param in params.split(";"):
            name, _, value = param.strip().partition("=")
            if name.strip() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        found = normalise_locale(tag) if tag.strip() not in ("c", "C", "posix") else None
        if found is not None and quality > 0:
            ranked.append((-quality, position, found))
    return min(ranked)[2] if ranked else None


def written_in(text: str) -> Locale | None:
    """The language a message is written in, as far as the two locales go: Chinese characters → zh-CN, Latin
    letters without any → en, else None."""
    if any("\u4e00" <= c <= "\u9fff" or "\u3400" <= c <= "\u4dbf" for c in text):
        return "zh-CN"
    if any(c.isascii() and c.isalpha() for c in text):
        return "en"
    return None


def text(key: str, locale: str, **params: Any) -> str:
    """The text `key` in `locale` (en when the locale is unknown), with `{placeholders}` filled from `params`."""
    try:
        entry = TEXTS[key]
    except KeyError:
        raise UnknownTextError(key) from None
    chosen: Locale = normalise_locale(locale) or "en"
    return entry[chosen].format(**params) if params else entry[chosen]


@dataclass(frozen=True)
class Text:
    """A catalogue text not yet put into a locale: made where the words are chosen, rendered where the chat is known."""

    key: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def render(self, locale: str) -> str:
        return text(self.key, locale, **self.params)


def placeholders(template: str) -> set[str]:
    """The `{names}` a template expects."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}
