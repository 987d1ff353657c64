"""Texts the Feishu channel writes: a download stopped at the size limit, and names of message kinds it cannot take."""

from __future__ import annotations

TEXTS: dict[str, dict[str, str]] = {
    "feishu.media_over_limit": {
        "zh-CN": "这个{what}超过了 {limit_mb} MB，太大了，我接收不了。",
        "en": "This {what} is larger than {limit_mb} MB, too large for me to take.",
    },
    "feishu.kind.media": {"zh-CN": "视频", "en": "video"},
    "feishu.kind.sticker": {"zh-CN": "表情包", "en": "sticker"},
}
