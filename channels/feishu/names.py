"""Feishu display names: an open_id → the user's `name` through contact v3 (`GET /open-apis/contact/v3/users/:id`)."""

from __future__ import annotations

from collections.abc import Callable

from channels.feishu.api import FeishuApi, FeishuApiError
from channels.toolkit.names import NameDirectory, NameUnknown

OUT_OF_RANGE = frozenset({41050})
"""This user cannot be named: outside the app's contact range (41050 "no user authority error")."""
SCOPES = (
    "grant the app 获取用户基本信息 (contact:user.base:readonly) and one of 获取通讯录基本信息 "
    "(contact:contact.base:readonly) / 以应用身份读取通讯录 (contact:contact:readonly_as_app), then publish a version"
)
PERMISSION_HINT = f"the app may not read contacts: {SCOPES}; people are named by their open_id meanwhile"
NO_NAME_HINT = f"the user came back without a name: {SCOPES}"
RANGE_HINT = "the user is outside the app's contact range (通讯录权限范围): widen it in the developer console"


async def user_name(api: FeishuApi | None, open_id: str) -> str | None:
    """The user's `name` (a Lark tenant's `en_name` when it has none); raises `NameUnknown`."""
    if api is None:
        raise NameUnknown("call", "the app is not started")
    try:
        user = await api.user(open_id)
    except FeishuApiError as e:
        if e.permission_denied:
            raise NameUnknown("app", f"code {e.code}", PERMISSION_HINT) from None
        if e.code in OUT_OF_RANGE:
            raise NameUnknown("person", f"code {e.code}", RANGE_HINT) from None
        raise NameUnknown("call", f"code {e.code} status {e.status}") from None
    for field in ("name", "en_name"):
        value = user.get(field)
        if isinstance(value, str) and value.strip():
            return value
    raise NameUnknown("person", "no name field", NO_NAME_HINT)


def app_directory(cred_id: str, api_of: Callable[[], FeishuApi | None], wait_s: float) -> NameDirectory:
    """The names of one app's users, looked up with its API client at the time (`api_of`: None until started)."""

    async def lookup(open_id: str) -> str | None:
        return await user_name(api_of(), open_id)

    return NameDirectory(lookup, channel="feishu", cred_id=cred_id, wait_s=wait_s)
