"""`agenthub doctor` for WeCom: each self-built app's secret is tried with `gettoken`; each AI bot is listed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from agenthub.doctor import Check, fail, ok
from agenthub.errors import ChannelSendError, ConfigError
from channels.wecom.api import WorkApi, WorkApiError
from channels.wecom.config import load_config

HINT = "check corp_id and secret of [channels.wecom.apps.{cred}] (the app's Secret in the WeCom admin console)"


def _where(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


async def checks(raw: Mapping[str, Any]) -> list[Check]:
    try:
        config = load_config(raw)
    except ConfigError as e:
        return [fail("wecom", str(e), "fix [channels.wecom] in agenthub.toml")]
    found: list[Check] = []
    async with aiohttp.ClientSession(trust_env=True) as session:
        for cred_id, app in config.apps.items():
            name, where = f"wecom {cred_id}", _where(app.api_base)
            api = WorkApi(
                session, base_url=app.api_base, corp_id=app.corp_id, secret=app.secret.get_secret_value(),
                cred_id=cred_id, timeout_s=app.request_timeout_s, rate_limit_retries=0,
            )  # fmt: skip
            try:
                await api.token()
            except WorkApiError as e:
                found.append(fail(name, f"{where} gettoken refused: {e}", HINT.format(cred=cred_id)))
            except ChannelSendError as e:
                found.append(fail(name, f"{where} unreachable: {e}", "check the network, proxy and api_base"))
            else:
                found.append(ok(name, f"{where} gettoken: secret accepted"))
    for cred_id, bot in config.bots.items():
        found.append(ok(f"wecom {cred_id}", f"AI bot {bot.bot_id} on {_where(bot.ws_url)} (checked when it connects)"))
    return found
