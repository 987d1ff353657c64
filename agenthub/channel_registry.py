"""Channels by name, as import strings: a channel's SDK is imported only when that channel is enabled."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from agenthub.channel import ChannelFactory
from agenthub.config import Settings
from agenthub.errors import ConfigError

CHANNELS: dict[str, str] = {
    "http": "channels.http:HttpChannel",
    "wecom": "channels.wecom:WeComChannel",
    "feishu": "channels.feishu:FeishuChannel",
}
NOT_SERVED = frozenset({"cli"})
"""Configured under `[channels.*]` but run by `agenthub chat`, not by the daemon."""


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
    """(name, raw config) of every channel to start: `http` unless disabled, others when configured and enabled."""
    enabled: list[tuple[str, Mapping[str, Any]]] = []
    if settings.http.enabled:
        enabled.append(("http", settings.channels.get("http", {})))
    for name, raw in settings.channels.items():
        if name == "http" or name in NOT_SERVED:
            continue
        if name not in CHANNELS:
            raise ConfigError(f"channels.{name}: unknown channel (known: {', '.join(sorted(CHANNELS))})")
        if raw.get("enabled", True):
            enabled.append((name, raw))
    return enabled
