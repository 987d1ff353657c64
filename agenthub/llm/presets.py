"""Named base URLs of Anthropic-compatible vendors (documented values; models stay in user config)."""

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
    "lkeap": "https://api.lkeap.cloud.tencent.com/anthropic",
}


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
