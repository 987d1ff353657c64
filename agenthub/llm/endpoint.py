"""Resolve one provider's endpoint (base URL, key, model) from settings, presets and `ANTHROPIC_*` variables."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from agenthub.config import LLMSettings, ProviderSettings
from agenthub.errors import ConfigError
from agenthub.llm.presets import ANTHROPIC_BASE_URL, normalise_base_url, preset_base_url, preset_model


@dataclass(frozen=True)
class Endpoint:
    """Where and how to call one Anthropic-compatible API; `api_key` is None when no key is configured."""

    base_url: str
    api_key: str | None = field(repr=False)
    model: str
    custom_base_url: bool

    @property
    def has_key(self) -> bool:
        return bool(self.api_key)

    @property
    def host(self) -> str:
        """`host:port` of the base URL (the port its scheme implies when none is written)."""
        parts = urlsplit(self.base_url)
        return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


def _clean(value: str | None) -> str | None:
    value = (value or "").strip()
    return value or None


def _base_url(explicit: str | None, preset: str | None, key: str, env_url: str | None) -> tuple[str, bool]:
    if (url := _clean(explicit)) is None and preset:
        url = preset_base_url(preset, key=f"{key}.preset")
    if url is None:
        url = _clean(env_url)
    if url is None:
        return ANTHROPIC_BASE_URL, False
    url = normalise_base_url(url)
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"{key}.base_url: must start with http:// or https://")
    return url, url != ANTHROPIC_BASE_URL


def default_endpoint(llm: LLMSettings, env: Mapping[str, str] | None = None) -> Endpoint:
    """The `[llm]` endpoint; unset base URL / key fall back to `ANTHROPIC_BASE_URL` and
    `ANTHROPIC_API_KEY` / `ANTHROPIC_AUTH_TOKEN`."""
    env = os.environ if env is None else env
    url, custom = _base_url(llm.base_url, llm.preset, "llm", env.get("ANTHROPIC_BASE_URL"))
    key = _clean(llm.api_key.get_secret_value() if llm.api_key else None)
    key = key or _clean(env.get("ANTHROPIC_API_KEY")) or _clean(env.get("ANTHROPIC_AUTH_TOKEN"))
    model = _clean(llm.model)
    if llm.preset and "model" not in llm.model_fields_set:  # the vendor's own model, not a Claude name
        model = preset_model(llm.preset) or model
    if model is None:
        raise ConfigError("llm.model: must not be empty")
    return Endpoint(url, key, model, custom)


def named_endpoint(name: str, provider: ProviderSettings, llm: LLMSettings) -> Endpoint:
    """An `[llm.providers.<name>]` endpoint; it needs its own key, and its model defaults to its preset's model,
    else `llm.model`."""
    key_path = f"llm.providers.{name}"
    if provider.base_url is None and provider.preset is None:
        raise ConfigError(f"{key_path}: set base_url or preset")
    url, custom = _base_url(provider.base_url, provider.preset, key_path, None)
    key = _clean(provider.api_key.get_secret_value() if provider.api_key else None)
    default = (preset_model(provider.preset) if provider.preset else None) or llm.model
    model = _clean(provider.model) or _clean(default) or ""
    return Endpoint(url, key, model, custom)
