"""Texts of compaction: the /compact replies and the notice after a compaction the user did not ask for."""

from __future__ import annotations

TEXTS: dict[str, dict[str, str]] = {
    "compaction.done": {
        "zh-CN": "已压缩：较早的 {head} 条消息已变成摘要，最近的 {tail} 条保持原样。原始消息仍保存在归档里。",
        "en": "Compacted: {head} earlier messages are now a summary and the last {tail} are kept as they were. "
        "The original messages stay in the archive.",
    },
    "compaction.truncated": {
        "zh-CN": "已截断：较早的 {head} 条消息已移入归档，最近的 {tail} 条保持原样。",
        "en": "Truncated: {head} earlier messages went to the archive and the last {tail} are kept as they were.",
    },
    "compaction.unavailable": {
        "zh-CN": "压缩需要语言模型，但现在没有配置。",
        "en": "Compaction needs a language model, and none is configured.",
    },
    "compaction.nothing": {
        "zh-CN": "没有可压缩的内容：这段对话只有 {count} 条消息。",
        "en": "Nothing to compact: the conversation has {count} messages.",
    },
    "compaction.failed": {
        "zh-CN": "压缩失败：摘要没有生成，对话保持不变。",
        "en": "Could not compact: the summary failed, so the conversation was left unchanged.",
    },
    "compaction.changed": {
        "zh-CN": "对话在此期间有了变化，这次没有压缩任何内容。",
        "en": "The conversation changed meanwhile; nothing was compacted.",
    },
    "compaction.running": {
        "zh-CN": "这个会话已经有一个压缩在进行，完成后摘要即会生效。",
        "en": "A compaction of this chat is already running; its summary applies when it is done.",
    },
    "compaction.notice.summarised": {
        "zh-CN": "为了让这个会话保持在模型的上下文之内，较早的 {archived} 条消息已被总结；最近的 {kept} 条保持原样，"
        "原始消息仍保存在归档里。",
        "en": "To keep this chat within the model's context, {archived} earlier messages were summarised; "
        "the last {kept} are kept as they were, and the originals stay in the archive.",
    },
    "compaction.notice.set_aside": {
        "zh-CN": "为了让这个会话保持在模型的上下文之内，较早的 {archived} 条消息已被移开；最近的 {kept} 条保持原样，"
        "原始消息仍保存在归档里。",
        "en": "To keep this chat within the model's context, {archived} earlier messages were set aside; "
        "the last {kept} are kept as they were, and the originals stay in the archive.",
    },
}
