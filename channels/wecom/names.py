"""WeCom display names: a userid → its member's `name` through a self-built app's `user/get` (读取成员)."""

from __future__ import annotations

from collections.abc import Callable

from agenthub.errors import ChannelSendError
from channels.toolkit.names import NameDirectory, NameUnknown
from channels.wecom.api import WorkApi, WorkApiError

NOT_PERMITTED = frozenset({48002, 60020})
"""The app may not call `user/get` at all (API not allowed; this server's IP not trusted): no lookups for a while."""
UNKNOWN_MEMBER = frozenset({60011, 60111, 40003, 46004})
"""This member cannot be named: outside the app's visible range (60011), no such userid (60111, 40003, 46004)."""
RANGE_HINT = (
    "an app reads only the members in its visible range (可见范围): widen it in the admin console "
    "(应用管理 → the app → 可见范围), or people are named by their userid"
)
PERMISSION_HINT = "the app may not read members (读取成员, user/get): {hint}; people are named by their userid"


async def member_name(api: WorkApi | None, userid: str) -> str | None:
    """`GET cgi-bin/user/get?userid=…`: the member's `name` (the token is `api`'s); raises `NameUnknown`."""
    if api is None:
        raise NameUnknown("call", "the app is not started")
    try:
        data = await api.get("user/get", {"userid": userid})
    except WorkApiError as e:
        if e.errcode in NOT_PERMITTED:
            raise NameUnknown("app", f"errcode {e.errcode}", PERMISSION_HINT.format(hint=e.hint)) from None
        if e.errcode in UNKNOWN_MEMBER:
            raise NameUnknown("person", f"errcode {e.errcode}", RANGE_HINT) from None
        raise NameUnknown("call", f"errcode {e.errcode}", e.hint) from None
    except ChannelSendError as e:  # gettoken failed or WeCom unreachable; its text names no secret
        raise NameUnknown("call", str(e)) from None
    name = data.get("name")
    return name if isinstance(name, str) else None


def app_directory(cred_id: str, api_of: Callable[[], WorkApi | None], wait_s: float) -> NameDirectory:
    """The names of one app's members, looked up with its API client at the time (`api_of`: None until started)."""

    async def lookup(userid: str) -> str | None:
        return await member_name(api_of(), userid)

    return NameDirectory(lookup, channel="wecom", cred_id=cred_id, wait_s=wait_s)
