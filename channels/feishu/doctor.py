"""`agenthub doctor` for Feishu / Lark: each app's id and secret are tried for a tenant access token."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from agenthub.doctor import Check, fail, ok
from agenthub.errors import ConfigError
from channels.feishu.api import FeishuApi, FeishuApiError
from channels.feishu.config import parse_config

HINT = "check app_id and app_secret of [channels.feishu.apps.{cred}] (the Feishu developer console)"


def _where(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


async def checks(raw: Mapping[str, Any]) -> list[Check]:
    try:
        config = parse_config(raw)
    except ConfigError as e:
        return [fail("feishu", str(e), "fix [channels.feishu] in agenthub.toml")]
    found: list[Check] = []
    for cred_id, app in config.apps.items():
        name, where = f"feishu {cred_id}", _where(app.base_url)
        api = FeishuApi(app.base_url, app.app_id, app.app_secret, timeout_s=app.request_timeout_s, max_retries=0)
        try:
            await api.tenant_token()
        except FeishuApiError as e:
            if e.status == 0:  # a transport failure
                found.append(fail(name, f"{where} unreachable: {e}", "check the network, proxy and domain"))
            else:
                found.append(fail(name, f"{where} tenant token refused: {e}", HINT.format(cred=cred_id)))
        else:
            found.append(ok(name, f"{where} tenant token: app {app.app_id} accepted"))
        finally:
            await api.close()
    return found
