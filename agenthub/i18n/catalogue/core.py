"""Texts the core writes to chat users: turn errors and aborts, queue notices, command replies."""

from __future__ import annotations

TEXTS: dict[str, dict[str, str]] = {
    "error.storage_unavailable": {
        "zh-CN": "服务器的存储暂时不可用（例如磁盘已满），你的消息没有保存，因此也没有回答。请稍后再试。",
        "en": "The server's storage is unavailable (the disk may be full), so your message was not saved and not "
        "answered. Please try again later.",
    },
    "error.path_refused": {
        "zh-CN": "这个会话的文件被服务器拒绝访问（数据目录里有不安全的链接），消息没有处理。请联系管理员。",
        "en": "The server refused this chat's files (an unsafe link inside its data directory), so the message was "
        "not handled. Please tell your administrator.",
    },
    "notice.reply_not_saved": {
        "zh-CN": "这条回答没能保存（服务器存储不可用），之后的对话里不会有它。",
        "en": "This reply could not be saved (the server's storage is unavailable); later turns will not see it.",
    },
    "error.internal": {
        "zh-CN": "抱歉，回答时我们这边出了问题。请再试一次（参考编号 {ref}）。",
        "en": "Sorry, something went wrong on our side while answering. Please try again (ref {ref}).",
    },
    "abort.stopped": {
        "zh-CN": "已停止。对话记录保留着，发新消息即可继续。",
        "en": "Stopped. The conversation is kept; send a new message to go on.",
    },
    "abort.restart": {"zh-CN": "已为 /restart 停止。", "en": "Stopped for /restart."},
    "abort.timeout": {
        "zh-CN": "这个请求耗时太久，已被停止。请再试一次。",
        "en": "This request took too long and was stopped. Please try again.",
    },
    "abort.shutdown": {
        "zh-CN": "服务正在重启，请稍后重新发送你的消息。",
        "en": "The service is restarting; please send your message again in a moment.",
    },
    "abort.shutdown_stored": {
        "zh-CN": "服务正在重启。你的消息已收到，重启后会回复，无需重新发送。",
        "en": "The service is restarting. Your message is saved and will be answered after the restart; there is no "
        "need to send it again.",
    },
    "abort.other": {"zh-CN": "已停止。", "en": "Stopped."},
    "abort.lease_lost": {
        "zh-CN": "收到，这个会话已转到另一台服务器处理，稍后回复。",
        "en": "Got it; this chat moved to another server, which will answer in a moment.",
    },
    "error.overflow_after_retry": {
        "zh-CN": "即使压缩之后，这段对话对模型来说仍然太长。发送 /compact 再试一次，或发送 /restart 重新开始。",
        "en": "This conversation is too long for the model even after compacting it. Send /compact to try again, "
        "or /restart to start over.",
    },
    "error.message_too_long": {
        "zh-CN": "这条消息超出了模型的上下文窗口，而这个会话里也没有更早的内容可以压缩。请缩短它，或分几次发送。",
        "en": "This message is too long for the model's context window, and there is nothing earlier in this chat to "
        "compact. Please shorten it or send it in smaller parts.",
    },
    "notice.overflow_compacting": {
        "zh-CN": "对话太长了，正在压缩后重试……",
        "en": "The conversation got too long; compacting it and retrying…",
    },
    "notice.model_fallback": {
        "zh-CN": "模型 {model} 不可用，改用 {fallback}。",
        "en": "Model {model} is not available; using {fallback}.",
    },
    "error.queue_full": {
        "zh-CN": "这个会话已有 {limit} 条消息在等待，请等回复完成，或发送 /stop。",
        "en": "This chat already has {limit} messages waiting; please wait for the replies or send /stop.",
    },
    "notice.queued": {
        "zh-CN": "排在这个会话里之前的 {count} 条消息后面。",
        "en": "Queued behind {count} earlier message(s) in this chat.",
    },
    "done.answered_together": {
        "zh-CN": "（已与后面几条消息一起回答，回复见下方。）",
        "en": "(Answered together with the messages that followed; the reply is below.)",
    },
    "error.invalid_id": {
        "zh-CN": "这条消息的助手、渠道、会话或发送者标识不可用，消息没有处理。",
        "en": "The agent, channel, chat or sender id of this message is not acceptable, so it was not handled.",
    },
    "error.unknown_agent": {
        "zh-CN": "没有名为 {agent} 的助手。",
        "en": "There is no agent called {agent}.",
    },
}
