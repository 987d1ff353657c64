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
}
