"""Channels by name, as import strings: a channel's SDK is imported only when that channel is enabled.

`[channels.http]` and `[channels.cli]` are not here: the HTTP API is the core's own surface (`agenthub.api`, built
by the composition root when `[http] enabled`), and the CLI channel is run by `agenthub chat`, not by the daemon."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from agenthub.channel import ChannelFactory
from agenthub.config import Settings
from agenthub.errors import ConfigError

CHANNELS: dict[str, str] = {
    "wecom": "channels.wecom:WeComChannel",
    "feishu": "channels.feishu:FeishuChannel",
}
NOT_SERVED = frozenset({"cli", "http"})
"""Configured under `[channels.*]` but not a channel the daemon loads: `cli` is `agenthub chat`'s, `http` the API's."""


def unknown_channel(name: str) -> str | None:
    """Why `name` is no channel people write on (`agenthub forget --channel wecm`), or None when it is one."""
    known = sorted({*CHANNELS, *NOT_SERVED})
    return None if name in known else f"unknown channel {name!r} (known: {', '.join(known)})"


def load_channel_class(name: str) -> ChannelFactory:
    """Import the channel's module and return its class; `ConfigError` for an unknown name."""
    try:
        target = CHANNELS[name]
    except KeyError:
        raise ConfigError(f"channels.{name}: unknown channel (known: {', '.join(sorted(CHANNELS))})") from None
    module_name, _, attr = target.partition(":")
    factory: ChannelFactory = getattr(importlib.import_module(module_name), attr)
    return factory


def enabled_channels(settings: Settings) -> list[tuple[str, Mapping[str, Any]]]:
    """(name, raw config) of every platform channel to start: those configured and not `enabled = false`."""
    enabled: list[tuple[str, Mapping[str, Any]]] = []
    for name, raw in settings.channels.items():
        if name in NOT_SERVED:
            continue
        if name not in CHANNELS:
            raise ConfigError(f"channels.{name}: unknown channel (known: {', '.join(sorted(CHANNELS))})")
        if raw.get("enabled", True):
            enabled.append((name, raw))
    return enabled
