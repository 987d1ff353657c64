"""`agenthub doctor` for Feishu / Lark: each app's id and secret are tried for a tenant access token."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agenthub.doctor import Check, ok, warn
from agenthub.doctor.platform import Credential, config_failed, try_credential
from agenthub.errors import ChannelSendError, ConfigError
from channels.feishu.api import FeishuApi, FeishuApiError
from channels.feishu.config import FeishuAppConfig, parse_config
from channels.feishu.names import PERMISSION_HINT, SCOPES

HINT = "check app_id and app_secret of [channels.feishu.apps.{cred}] (the Feishu developer console)"


def _unreachable(error: ChannelSendError) -> bool:
    return not isinstance(error, FeishuApiError) or error.status == 0  # status 0: a transport failure


async def checks(raw: Mapping[str, Any]) -> list[Check]:
    try:
        config = parse_config(raw)
    except ConfigError as e:
        return config_failed("feishu", e)
    found: list[Check] = []
    for cred_id, app in config.apps.items():
        credential = Credential(
            "feishu", cred_id, app.base_url, "tenant token", f"app {app.app_id} accepted", HINT.format(cred=cred_id),
            network_hint="check the network, proxy and domain",
        )  # fmt: skip
        api = FeishuApi(app.base_url, app.app_id, app.app_secret, timeout_s=app.request_timeout_s, max_retries=0)
        try:
            found.append(await try_credential(credential, api.tenant_token, _unreachable))
            if found[-1].status == "ok" and app.sender_names:
                found.append(await _names(cred_id, app, api))
        finally:
            await api.close()
    return found


async def _names(cred_id: str, app: FeishuAppConfig, api: FeishuApi) -> Check:
    """Whether the app may read contacts, which display names need (never a failure: names fall back to ids)."""
    name = f"feishu {cred_id} names"
    try:
        await api.contact_scopes()
    except FeishuApiError as e:
        if e.permission_denied:
            return warn(name, f"contact API refused (code {e.code}): {PERMISSION_HINT}", SCOPES)
        return warn(name, f"contact API not checked (code {e.code}); people may be named by open_id")
    return ok(name, "contact API allowed (a name also needs contact:user.base:readonly)")
