"""Texts of the built-in commands (/restart, /stop, /status, /compact, /help): their help lines and replies."""

from __future__ import annotations

TEXTS: dict[str, dict[str, str]] = {
    "command.failed": {"zh-CN": "/{command} 执行失败，请再试一次。", "en": "/{command} failed; please try again."},
    "command.help.restart": {
        "zh-CN": "清空这个会话的历史（发送两次确认）",
        "en": "clear this chat's history (send twice to confirm)",
    },
    "command.help.stop": {"zh-CN": "停止正在进行的回复", "en": "stop the reply that is running"},
    "command.help.status": {"zh-CN": "查看这个会话的状态和上下文大小", "en": "show this chat's state and context size"},
    "command.help.compact": {
        "zh-CN": "把较早的消息压缩成摘要以腾出上下文；/compact <重点> 说明摘要应保留什么",
        "en": "summarise older messages to free context; /compact <focus> says what the summary should keep",
    },
    "command.help.help": {"zh-CN": "列出所有命令", "en": "list the commands"},
    "command.help.title": {"zh-CN": "命令：", "en": "Commands:"},
    "command.restart.confirm": {
        "zh-CN": "这会清空这个会话的对话历史。请在 {seconds} 秒内再发送一次 /restart 确认。",
        "en": "This clears this chat's conversation history. Send /restart again within {seconds} seconds to confirm.",
    },
    "command.restart.done": {
        "zh-CN": "完成：这个会话已重新开始。（其他会话和长期记忆不受影响。）",
        "en": "Done: this chat starts fresh. (Other chats and long-term memory are untouched.)",
    },
    "command.stop.dropped": {
        "zh-CN": "已丢弃你排队中的 {count} 条消息。",
        "en": "Dropped {count} queued message(s) of yours.",
    },
    "command.stop.not_yours": {
        "zh-CN": "只有提问的人才能停止这条回复。",
        "en": "Only the person who asked can stop this reply.",
    },
    "command.stop.compaction_stopped": {
        "zh-CN": "已停止正在压缩较早消息的任务。",
        "en": "Stopped the compaction that was summarising older messages.",
    },
    "command.stop.stopped": {"zh-CN": "已停止正在进行的回复。", "en": "Stopped the running reply."},
    "command.stop.kept": {"zh-CN": "对话记录保留着。", "en": "The conversation is kept."},
    "command.stop.kept_as_was": {"zh-CN": "对话记录保持原样。", "en": "The conversation is kept as it was."},
    "command.stop.nothing_else": {"zh-CN": "没有其他正在进行的任务。", "en": "Nothing else is running."},
    "command.stop.nothing": {"zh-CN": "这个会话里没有正在进行的任务。", "en": "Nothing is running in this chat."},
    "command.status.agent": {"zh-CN": "助手：{agent}", "en": "agent: {agent}"},
    "command.status.session": {"zh-CN": "会话：{session}", "en": "session: {session}"},
    "command.status.state": {"zh-CN": "状态：{state}", "en": "state: {state}"},
    "command.status.state.idle": {"zh-CN": "空闲", "en": "idle"},
    "command.status.state.processing": {"zh-CN": "处理中", "en": "processing"},
    "command.status.state.error": {"zh-CN": "出错", "en": "error"},
    "command.status.depth": {
        "zh-CN": "，{count} 条消息正在处理或排队",
        "en": ", {count} message(s) in progress or queued",
    },
    "command.status.messages": {
        "zh-CN": "消息：{count} 条（估计约 {tokens} 个 token）",
        "en": "messages: {count} (about {tokens} tokens estimated)",
    },
    "command.status.last_call": {
        "zh-CN": "上一次模型调用：输入 {input} 个、缓存命中 {cached} 个、输出 {output} 个 token",
        "en": "last model call: {input} input, {cached} cached, {output} output tokens",
    },
    "command.status.cache": {
        "zh-CN": "提示缓存命中率（最近的模型调用）：{percent}%（{total} 个输入 token 中 {read} 个读自缓存）",
        "en": "prompt cache hit rate (recent model calls): {percent}% ({read} of {total} input tokens from the cache)",
    },
    "command.status.summarised": {
        "zh-CN": "较早的一部分对话已压缩为摘要",
        "en": "an earlier part of the conversation is summarised",
    },
    "command.compact.unavailable": {"zh-CN": "压缩功能不可用。", "en": "Compaction is not available."},
    "command.compact.busy": {
        "zh-CN": "这个会话正在回答中；等回复完成后再发送 /compact。",
        "en": "This chat is busy answering; try /compact again when the reply is done.",
    },
}
