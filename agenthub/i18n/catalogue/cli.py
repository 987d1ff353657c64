"""Texts the terminal chat writes when it talks to a running daemon and that goes wrong."""

from __future__ import annotations

TEXTS: dict[str, dict[str, str]] = {
    "remote.daemon_error": {"zh-CN": "守护进程报告了一个错误", "en": "the daemon reported an error"},
    "remote.truncated": {
        "zh-CN": "回复还没结束，守护进程就关闭了数据流",
        "en": "the daemon closed the stream before the reply finished",
    },
    "remote.bad_stream": {
        "zh-CN": "守护进程发来的事件不是合法的 JSON",
        "en": "the daemon sent an event that is not valid JSON",
    },
    "remote.unreachable": {
        "zh-CN": "无法连接 {url} 上的守护进程：{error}",
        "en": "cannot reach the daemon at {url}: {error}",
    },
    "remote.token_refused": {
        "zh-CN": "守护进程拒绝了令牌（{message}）；请用 --token 传入，或设置 AGENTHUB_TOKEN",
        "en": "the daemon refused the token ({message}); pass --token or set AGENTHUB_TOKEN",
    },
    "remote.refused": {
        "zh-CN": "守护进程回答 {status}：{message}",
        "en": "the daemon answered {status}: {message}",
    },
    "cli.toolbar": {
        "zh-CN": " Enter 发送 · Esc+Enter 或行尾 \\：换行 · Ctrl-C 停止 · Ctrl-D 退出 ",
        "en": " Enter send · Esc+Enter or \\ at end: newline · Ctrl-C stop · Ctrl-D quit ",
    },
    "cli.help_line": {
        "zh-CN": "Enter 发送 · Esc+Enter 或行尾的 \\ 换行 · Ctrl-C 停止回复 · Ctrl-D 退出 · /help",
        "en": "Enter sends · Esc+Enter or a trailing \\ adds a line · Ctrl-C stops a reply · Ctrl-D quits · /help",
    },
    "cli.banner.local": {
        "zh-CN": "AgentHub chat · 会话 {session}（没有运行中的守护进程：本终端直接打开 {data_dir}）",
        "en": "AgentHub chat · session {session} (no daemon running: this terminal opens {data_dir} itself)",
    },
    "cli.banner.remote": {
        "zh-CN": "AgentHub chat · 会话 {session}，经由 {address} 上运行的守护进程",
        "en": "AgentHub chat · session {session} via the daemon on {address}",
    },
    "cli.data_dir_busy": {
        "zh-CN": "{data_dir} 正被 agenthub {role} 使用（{holder}）：请等它结束后再试；"
        "要在它运行时聊天，请用 agenthub serve，再让 agenthub chat 连接它",
        "en": "{data_dir} is in use by agenthub {role} ({holder}): try again when it has ended; to chat while it "
        "runs, run agenthub serve and let agenthub chat connect to it",
    },
    "cli.tool_failed": {"zh-CN": "⚙ {name} 出错", "en": "⚙ {name} failed"},
    "cli.stopped_waiting": {"zh-CN": "已不再等待这条回复。", "en": "Stopped waiting for the reply."},
    "cli.no_reply": {"zh-CN": "没能拿到回复：{error}", "en": "Could not get a reply: {error}"},
    "cli.no_answer": {"zh-CN": "回复结束了，但没有答案", "en": "the reply ended without an answer"},
}
