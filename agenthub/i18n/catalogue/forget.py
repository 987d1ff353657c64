"""Texts of "forget me": the /forget command, the markers left in redacted histories, `agenthub forget`."""

from __future__ import annotations

TEXTS: dict[str, dict[str, str]] = {
    "forget.help": {
        "zh-CN": "删除你在本会话中的消息和你的个人资料（发送两次以确认）",
        "en": "delete your messages in this chat and your profile (send twice to confirm)",
    },
    "forget.confirm": {
        "zh-CN": (
            "这会删除你在本会话中发送的所有消息、我对它们的回复，以及我记住的关于你的个人资料，无法恢复。"
            "请在 {seconds} 秒内再发送一次 /forget 确认。"
        ),
        "en": (
            "This deletes every message you sent in this chat, my replies to them and the profile I keep about "
            "you, for good. Send /forget again within {seconds} seconds to confirm."
        ),
    },
    "forget.done": {
        "zh-CN": "已完成：删除了你的 {messages} 条消息和 {replies} 条回复；你的个人资料已删除。其他人的消息保持不变。",
        "en": (
            "Done: {messages} message(s) of yours and {replies} reply record(s) are deleted, and so is your "
            "profile. Other people's messages are kept."
        ),
    },
    "forget.no_sender": {
        "zh-CN": "这条消息没有发送者信息，无法确定要删除谁的消息，因此未做任何更改。",
        "en": "This message carries no sender, so there is nobody whose messages I could delete; nothing was changed.",
    },
    "forget.redacted_message": {
        "zh-CN": "[此消息已应发送者要求删除]",
        "en": "[deleted at the sender's request]",
    },
    "forget.redacted_reply": {
        "zh-CN": "[此回复已随所回答的消息一起删除]",
        "en": "[deleted together with the message it answered]",
    },
    "forget.cli_ask": {
        "zh-CN": (
            "将删除 {channel} 上的 {sender} 在 {agents} 的所有会话中的消息、对其的回复、引用它们的摘要、"
            "其个人资料，以及记忆文件中引用其消息的行。输入 yes 继续："
        ),
        "en": (
            "This deletes, for {sender} on {channel} in every chat of {agents}: their messages, the replies to "
            "them, the summaries that may quote them, their profile, and the memory lines that quote them. "
            "Type yes to go on: "
        ),
    },
    "forget.cli_all_agents": {"zh-CN": "所有智能体", "en": "every agent"},
    "forget.cli_cancelled": {"zh-CN": "已取消，未做任何更改。", "en": "Cancelled; nothing was changed."},
    "forget.cli_done": {
        "zh-CN": (
            "完成：{sessions} 个会话，删除 {messages} 条消息、{replies} 条回复记录、{summaries} 条摘要、"
            "{profiles} 个个人资料文件、{memory_files} 个会话记忆文件、{memory_lines} 行记忆。"
        ),
        "en": (
            "Done: {sessions} chat(s); deleted {messages} message(s), {replies} reply record(s), {summaries} "
            "summary(ies), {profiles} profile file(s), {memory_files} chat memory file(s), {memory_lines} memory "
            "line(s)."
        ),
    },
    "forget.cli_needs_token": {
        "zh-CN": (
            "守护进程正在 {data_dir} 上运行（{address}）；请用 --token 或 AGENTHUB_TOKEN 提供令牌（创建：{command}）。"
        ),
        "en": (
            "a daemon is running on {data_dir} ({address}); pass --token or set AGENTHUB_TOKEN (make one with: "
            "{command})"
        ),
    },
    "forget.cli_instances_running": {
        "zh-CN": (
            "此部署有 {count} 个实例正在运行（{hosts}），未做任何删除：请在其中一台主机上运行本命令，"
            "或用令牌调用任一实例的 POST /api/forget。"
        ),
        "en": (
            "{count} instance(s) of this deployment are running ({hosts}); nothing was done: run this command on "
            "one of those hosts, or call POST /api/forget on any instance with a token"
        ),
    },
    "forget.cli_daemon_failed": {
        "zh-CN": "守护进程拒绝了请求（{status}）：{message}",
        "en": "the daemon refused the request ({status}): {message}",
    },
    "forget.cli_unreachable": {
        "zh-CN": "无法连接 {address} 上的守护进程（{error}）；请再运行一次，以确保删除已完成。",
        "en": "cannot reach the daemon at {address} ({error}); run the command again to be sure it is done",
    },
}
