"""`agenthub doctor` for Feishu / Lark: each app's id and secret are tried for a tenant access token."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agenthub.doctor import Check
from agenthub.doctor.platform import Credential, config_failed, try_credential
from agenthub.errors import ChannelSendError, ConfigError
from channels.feishu.api import FeishuApi, FeishuApiError
from channels.feishu.config import parse_config

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
        finally:
            await api.close()
    return found
