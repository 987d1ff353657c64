"""Texts about model usage and budgets a chat user reads: refusals, the warning notice, the /usage command."""

from __future__ import annotations

TEXTS: dict[str, dict[str, str]] = {
    "budget.scope.user": {"zh-CN": "你的", "en": "Your"},
    "budget.scope.member": {"zh-CN": "{sender} 的", "en": "{sender}'s"},
    "budget.scope.chat": {"zh-CN": "本会话的", "en": "This chat's"},
    "budget.scope.agent": {"zh-CN": "本助手的", "en": "This assistant's"},
    "budget.period.day": {"zh-CN": "每日", "en": "daily"},
    "budget.period.month": {"zh-CN": "每月", "en": "monthly"},
    "budget.refused": {
        "zh-CN": "{who}{period}用量额度（{limit} tokens）已用完，这条消息没有发送给模型。额度将于 {resets} 重置。",
        "en": (
            "{who} {period} usage budget ({limit} tokens) is used up, so this message was not sent to the model. "
            "It resets at {resets}."
        ),
    },
    "budget.warning": {
        "zh-CN": "提示：{who}{period}用量已达额度的 {percent}%（额度 {limit} tokens），将于 {resets} 重置。",
        "en": (
            "Note: {who} {period} usage has reached {percent}% of its budget ({limit} tokens); it resets at {resets}."
        ),
    },
    "usage.help": {
        "zh-CN": "查看你和本会话今天、本月的用量和剩余额度",
        "en": "your and this chat's usage today and this month, and what is left",
    },
    "usage.usage": {
        "zh-CN": "用法：/usage（不带参数）查看你和本会话今天、本月的用量和剩余额度。",
        "en": "Usage: /usage (no arguments) shows your and this chat's usage today and this month, and what is left.",
    },
    "usage.title.user": {"zh-CN": "你的用量：", "en": "Your usage:"},
    "usage.title.chat": {"zh-CN": "本会话的用量：", "en": "This chat's usage:"},
    "usage.line": {"zh-CN": "{period}：{tokens} tokens{cost}{left}", "en": "{period}: {tokens} tokens{cost}{left}"},
    "usage.today": {"zh-CN": "今天", "en": "Today"},
    "usage.month": {"zh-CN": "本月", "en": "This month"},
    "usage.cost": {"zh-CN": "，约 {amount}", "en": ", about {amount}"},
    "usage.left": {"zh-CN": "，剩余 {left} / {limit}", "en": ", {left} of {limit} left"},
    "usage.unlimited": {"zh-CN": "（无限额）", "en": " (no limit)"},
    "usage.unavailable": {
        "zh-CN": "暂时无法读取用量，请稍后再试。",
        "en": "Usage cannot be read right now; try again shortly.",
    },
}
