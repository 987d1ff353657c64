"""Named Anthropic-compatible vendors: each preset's base URL and the model it uses unless `model` is set (values from
the vendors' own Anthropic-compatibility pages, re-checked 2026-12; see docs/configuration.md)."""

from __future__ import annotations

from agenthub.errors import ConfigError

ANTHROPIC_BASE_URL = "https://api.anthropic.com"

PRESETS: dict[str, str] = {
    "anthropic": ANTHROPIC_BASE_URL,
    "deepseek": "https://api.deepseek.com/anthropic",
    "moonshot": "https://api.moonshot.cn/anthropic",
    "moonshot-global": "https://api.moonshot.ai/anthropic",
    "zhipu": "https://open.bigmodel.cn/api/anthropic",
    "zai": "https://api.z.ai/api/anthropic",
    "minimax": "https://api.minimaxi.com/anthropic",
    "minimax-global": "https://api.minimax.io/anthropic",
    "qwen": "https://dashscope.aliyuncs.com/apps/anthropic",
    "qwen-intl": "https://dashscope-intl.aliyuncs.com/apps/anthropic",
    "qwen-coding": "https://coding.dashscope.aliyuncs.com/apps/anthropic",
    "qianfan": "https://qianfan.baidubce.com/anthropic",
    "lkeap": "https://api.lkeap.cloud.tencent.com/api/anthropic",
}

PRESET_MODELS: dict[str, str] = {
    "anthropic": "claude-sonnet-4-6",
    "deepseek": "deepseek-flash",
    "moonshot": "kimi-k2.5",
    "moonshot-global": "kimi-k2.5",
    "zhipu": "glm-5.1",  # not on a vendor page we could read; reference/anthropic.md and Zhipu's own recipes
    "zai": "glm-5.1",
    "minimax": "MiniMax-M2.7",
    "minimax-global": "MiniMax-M2.7",
    "qwen": "qwen-plus",
    "qwen-intl": "qwen-plus",
    "qwen-coding": "qwen3-coder-plus",  # served pay-as-you-go; the Coding Plan's own list not confirmed
    "qianfan": "deepseek-v3.2",  # the model of Qianfan's own Anthropic-compatibility example
    "lkeap": "glm-5",
}
"""The model a preset uses when `model` is not set: one the vendor serves on that endpoint (a Claude name fails at
most of them)."""


def preset_model(preset: str) -> str | None:
    """The default model of a preset, None for a name that is not one."""
    return PRESET_MODELS.get(preset.strip().lower())


def preset_base_url(preset: str, *, key: str = "llm.preset") -> str:
    """The base URL of a named preset; `ConfigError` naming `key` for an unknown one."""
    try:
        return PRESETS[preset.strip().lower()]
    except KeyError:
        known = ", ".join(sorted(PRESETS))
        raise ConfigError(f"{key}: unknown preset {preset!r} (known: {known})") from None


def normalise_base_url(url: str) -> str:
    """Strip whitespace, trailing slashes and a trailing `/v1` (the SDK appends `/v1/messages` itself)."""
    url = url.strip().rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")].rstrip("/")
    return url
