"""`agenthub doctor` for WeCom: each self-built app's secret is tried with `gettoken`; each AI bot is listed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp

from agenthub.doctor import Check, ok
from agenthub.doctor.platform import Credential, config_failed, host_port, try_credential
from agenthub.errors import ChannelSendError, ConfigError
from channels.wecom.api import WorkApi, WorkApiError
from channels.wecom.config import load_config

HINT = "check corp_id and secret of [channels.wecom.apps.{cred}] (the app's Secret in the WeCom admin console)"


def _unreachable(error: ChannelSendError) -> bool:
    return not isinstance(error, WorkApiError)  # WeCom's own errcode is a refusal; anything else never got there


async def checks(raw: Mapping[str, Any]) -> list[Check]:
    try:
        config = load_config(raw)
    except ConfigError as e:
        return config_failed("wecom", e)
    found: list[Check] = []
    async with aiohttp.ClientSession(trust_env=True) as session:
        for cred_id, app in config.apps.items():
            credential = Credential(
                "wecom", cred_id, app.api_base, "gettoken", "secret accepted", HINT.format(cred=cred_id),
                network_hint="check the network, proxy and api_base",
            )  # fmt: skip
            api = WorkApi(
                session, base_url=app.api_base, corp_id=app.corp_id, secret=app.secret.get_secret_value(),
                cred_id=cred_id, timeout_s=app.request_timeout_s, rate_limit_retries=0,
            )  # fmt: skip
            found.append(await try_credential(credential, api.token, _unreachable))
    for cred_id, bot in config.bots.items():
        where = host_port(bot.ws_url)
        found.append(ok(f"wecom {cred_id}", f"AI bot {bot.bot_id} on {where} (checked when it connects)"))
    return found
