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
}
