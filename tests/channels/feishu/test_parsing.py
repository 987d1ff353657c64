"""Feishu pure logic: event parsing, mentions, post text, session scopes, reply formats, config, lazy import."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from agenthub.errors import ConfigError
from channels.feishu.config import parse_config
from channels.feishu.format import CARD_MAX_CHARS, choose_format, plan_reply, split_text
from channels.feishu.inbound import FeishuMessage, mentions_bot, parse_message_event, render_text, session_chat_id
from tests.support.fakes.feishu import mention, message_event
from tests.support.paths import REPO

BOT = "ou_bot"
ROOT = REPO


def parsed(text: str = "", **kw: Any) -> FeishuMessage:
    return parse_message_event(message_event(text, **kw))


def test_post_rich_text_is_read_as_text_with_links_and_mentions() -> None:
    post = {
        "title": "Title",
        "content": [
            [{"tag": "at", "user_id": "@_user_1", "user_name": "Bot"}, {"tag": "text", "text": " see "}],
            [{"tag": "a", "text": "docs", "href": "https://x.test/d"}, {"tag": "img", "image_key": "k"}],
        ],
    }
    msg = parsed(message_type="post", content=post, chat_type="group", mentions=[mention("@_user_1", BOT, "Bot")])
    assert render_text(msg, BOT) == "Title\nsee\n[docs](https://x.test/d)"
    locale = {"zh_cn": {"title": "", "content": [[{"tag": "text", "text": "hi"}]]}}
    wrapped = parsed(message_type="post", content=locale)
    assert render_text(wrapped, BOT) == "hi"


def test_mentions_gate_groups_strip_the_bot_and_name_the_others() -> None:
    mentions = [
        mention("@_user_1", BOT, "Bot"),
        mention("@_user_10", "ou_z", "Zed"),
        mention("@_user_2", "ou_a", "Ann"),
    ]
    msg = parsed("@_user_1 /new @_user_10 and @_user_2", chat_type="group", mentions=mentions)
    assert mentions_bot(msg, BOT, mention_all=False)
    assert render_text(msg, BOT) == "/new @Zed and @Ann"
    other = parsed("@_user_2 hi", chat_type="group", mentions=[mention("@_user_2", "ou_a", "Ann")])
    assert not mentions_bot(other, BOT, mention_all=False)
    everyone = parsed("@_all standup", chat_type="group", mentions=[mention("@_all", "", "所有人")])
    assert not mentions_bot(everyone, BOT, mention_all=False) and mentions_bot(everyone, BOT, mention_all=True)


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        ("group", "oc_g"),
        ("group_sender", "oc_g:ou_s"),
        ("group_topic", "oc_g:om_root"),
        ("group_topic_sender", "oc_g:om_root:ou_s"),
    ],
)
def test_session_scopes(scope: Any, expected: str) -> None:
    msg = parsed("x", chat_type="group", chat_id="oc_g", sender="ou_s", root_id="om_root")
    assert session_chat_id(msg, scope) == expected
    assert session_chat_id(parsed("x", chat_type="group", chat_id="oc_g", sender="ou_s"), "group_topic") == "oc_g"
    assert session_chat_id(parsed("x", sender="ou_dm"), scope) == "ou_dm"


def test_reply_format_follows_content() -> None:
    assert choose_format("好的") == "text"
    assert choose_format("use **this**") == "post"
    assert choose_format("```py\nprint(1)\n```") == "card"
    assert choose_format("| a | b |\n|---|---|") == "card"
    assert [fmt for fmt, _ in plan_reply("plain " * 100)] == ["post"]


def test_long_code_is_split_into_chunks_that_each_render() -> None:
    text = "intro\n```python\n" + "\n".join(f"print({i})" for i in range(1500)) + "\n```\nend"
    chunks = split_text(text, CARD_MAX_CHARS)
    assert len(chunks) > 3 and all(len(c) <= CARD_MAX_CHARS for c in chunks)
    assert all(c.count("```") % 2 == 0 for c in chunks)
    joined = "\n".join(chunks)
    assert all(f"print({i})" in joined for i in range(1500))
    assert split_text("x" * 10000, 4000)[0] == "x" * 3992


def test_config_errors_name_the_key_and_never_the_secret() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"apps": {"main": {"app_id": "cli_1", "app_secret": "TOPSECRET", "mode": "webhook"}}})
    assert "verification_token" in str(err.value) and "TOPSECRET" not in str(err.value)
    with pytest.raises(ConfigError, match="dedup_ttl_s"):
        parse_config({"dedup_ttl_s": 3600})
    with pytest.raises(ConfigError, match="domain"):
        parse_config({"apps": {"m": {"app_id": "a", "app_secret": "TOPSECRET", "domain": "http://10.0.0.1"}}})
    with pytest.raises(ConfigError, match="cred_id"):
        parse_config({"apps": {"../x": {"app_id": "a", "app_secret": "s"}}})
    cfg = parse_config({"apps": {"main": {"app_id": "cli_1", "app_secret": "TOPSECRET", "domain": "lark"}}})
    assert cfg.apps["main"].base_url == "https://open.larksuite.com" and "TOPSECRET" not in repr(cfg)


def test_importing_the_channel_does_not_import_lark_oapi() -> None:
    code = "import sys, json; import channels.feishu; print(json.dumps({'lark': 'lark_oapi' in sys.modules}))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"lark": False}


DAEMON_START = """
import asyncio, json, sys, tempfile
from pathlib import Path
from agenthub.hosting.app import assemble, build_services
from agenthub.config import load_settings

async def main():
    root = Path(tempfile.mkdtemp())
    dirs = {name: root / name for name in ("data_dir", "agents_dir", "auth_dir", "workspace_dir")}
    settings = load_settings(None, http={"port": 0}, **dirs)
    async with build_services(settings) as services:
        server, channels = assemble(settings, services)
        await server.start()
        for channel in channels:
            await channel.start()
        print(json.dumps({"channels": [c.name for c in channels], "lark": "lark_oapi" in sys.modules}))
        for channel in channels:
            await channel.stop()
        await server.close()

asyncio.run(main())
"""


def test_daemon_start_without_a_feishu_app_never_imports_lark_oapi() -> None:
    out = subprocess.run(
        [sys.executable, "-c", DAEMON_START], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"channels": ["http"], "lark": False}


def test_sdk_logger_goes_to_structlog_with_credentials_masked() -> None:
    import logging

    from structlog.testing import capture_logs

    from channels.feishu.sdk import route_sdk_logging

    route_sdk_logging()
    lark_logger = logging.getLogger("Lark")
    assert not any(isinstance(h, logging.StreamHandler) for h in lark_logger.handlers)
    with capture_logs() as logs:
        lark_logger.info("connected to wss://x.test/ws?device_id=d&access_key=AK123&ticket=TK456&service_id=7")
    [entry] = logs
    assert entry["event"] == "lark_sdk_log" and "AK123" not in str(entry) and "TK456" not in str(entry)
    assert "device_id=d" in entry["message"]


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ({"dedup_ttl_s": float("inf")}, "channels.feishu.dedup_ttl_s"),
        ({"dedup_ttl_s": 1e300}, "channels.feishu.dedup_ttl_s"),  # remembered ids' expiry is a PostgreSQL interval
        ({"apps": {"m": {"app_id": "a", "app_secret": "s", "stale_after_s": float("nan")}}}, "apps.m.stale_after_s"),
    ],
)
def test_a_float_that_is_not_finite_or_too_long_is_refused_naming_the_key(table: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=rf"^invalid configuration: .*{key}: "):
        parse_config(table)
