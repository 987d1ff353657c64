"""Texts the channels write themselves: refusals, placeholders of a streaming reply."""

from __future__ import annotations

TEXTS: dict[str, dict[str, str]] = {
    "channel.submit_failed": {
        "zh-CN": "抱歉，这条消息没能处理，请稍后再发一次。",
        "en": "Sorry, this message could not be handled; please send it again in a moment.",
    },
    "channel.deferred": {
        "zh-CN": "收到，正在重启，稍后回复。",
        "en": "Got it; restarting now, I will answer in a moment.",
    },
    "channel.refusal": {
        "zh-CN": "抱歉，你没有使用这个助手的权限。请联系管理员开通。",
        "en": "Sorry, you are not allowed to use this assistant. Please ask your administrator for access.",
    },
    "channel.empty_prompt": {"zh-CN": "你好，有什么可以帮你？", "en": "Hello, how can I help?"},
    "channel.thinking": {"zh-CN": "正在思考…", "en": "Thinking…"},
    "channel.empty_reply": {"zh-CN": "（没有内容）", "en": "(no content)"},
    "channel.interrupted": {"zh-CN": "回复中断了。", "en": "The reply was interrupted."},
    "channel.generating": {"zh-CN": "[生成中...]", "en": "[writing...]"},
    "wecom.rate_limited": {
        "zh-CN": "（企业微信限制每人每分钟 {per_minute} 条、每小时 {per_hour} 条消息，余下约 {rest} 字节暂未发送。"
        "请稍后让我继续。）",
        "en": "(WeCom allows {per_minute} messages a minute and {per_hour} an hour per person; about {rest} more "
        "bytes were not sent yet. Ask me to go on in a while.)",
    },
    "wecom.too_long": {
        "zh-CN": "（回复过长，余下约 {rest} 字节未发送。请让我分段回答。）",
        "en": "(The reply is too long; about {rest} more bytes were not sent. Ask me to answer in parts.)",
    },
    "http.offline_welcome": {
        "zh-CN": "你好，我是 {agent}。服务器还没有配置模型 API 密钥，现在的回复来自离线占位模型。",
        "en": "Hi, I'm {agent}. No LLM API key is configured on the server yet, so replies come from an offline "
        "placeholder.",
    },
    "http.offline_welcome.about": {
        "zh-CN": "你好，我是 {agent}（{about}）。服务器还没有配置模型 API 密钥，现在的回复来自离线占位模型。",
        "en": "Hi, I'm {agent} ({about}). No LLM API key is configured on the server yet, so replies come from an "
        "offline placeholder.",
    },
}
