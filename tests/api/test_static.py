"""The console's static files: a favicon (no 404 in the browser), and a missing file is the JSON 404."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import aiohttp
import pytest
from yarl import URL

from agenthub.config import Settings
from tests.support.harness import RunningApi
from tests.support.http import assert_error


async def _get(api: RunningApi, path: str, method: str = "GET") -> tuple[aiohttp.ClientResponse, bytes]:
    async with api.client.request(method, URL(api.base_url + path, encoded=True)) as resp:
        return resp, await resp.read()


@pytest.fixture
def settings(request: pytest.FixtureRequest, settings_factory: Callable[..., Settings]) -> Settings:
    return settings_factory(**getattr(request, "param", {}))


async def test_the_console_is_in_the_http_channels_default_locale(api: RunningApi) -> None:
    resp, html = await _get(api, "/")
    assert resp.status == 200 and resp.content_type == "text/html"
    assert b'<html lang="zh-CN">' in html


@pytest.mark.parametrize("settings", [{"channels": {"http": {"locale": "en"}}}], indirect=True)
async def test_the_console_follows_the_http_channels_locale(api: RunningApi) -> None:
    resp, html = await _get(api, "/")
    assert resp.status == 200 and b'<html lang="en">' in html and b'lang="zh-CN"' not in html


async def test_console_links_a_favicon_that_exists(api: RunningApi) -> None:
    resp, html = await _get(api, "/")
    assert resp.status == 200
    link = re.search(rb'<link rel="icon" type="image/svg\+xml" href="([^"]+)">', html)
    assert link is not None
    resp, icon = await _get(api, link.group(1).decode())
    assert resp.status == 200 and resp.content_type == "image/svg+xml" and icon.startswith(b"<svg")


async def test_favicon_ico_is_served(api: RunningApi) -> None:
    resp, icon = await _get(api, "/favicon.ico")
    assert resp.status == 200 and resp.content_type == "image/svg+xml" and icon.startswith(b"<svg")
    resp, _ = await _get(api, "/favicon.ico", "HEAD")
    assert resp.status == 200


async def test_console_files_are_served(api: RunningApi) -> None:
    for name, kind in (("app.js", "javascript"), ("app.css", "text/css"), ("index.html", "text/html")):
        resp, body = await _get(api, "/static/" + name)
        assert resp.status == 200 and kind in resp.content_type and body, name
    resp, _ = await _get(api, "/static/app.js", "HEAD")
    assert resp.status == 200


async def test_missing_static_file_is_the_json_404(api: RunningApi) -> None:
    for path in ("/static/nope.js", "/static/", "/static/.hidden", "/static/sub/app.js"):
        resp, body = await _get(api, path)
        assert resp.status == 404, path
        assert resp.content_type == "application/json", path
        assert_error(json.loads(body), "not_found")


async def test_static_traversal_never_leaves_the_directory(api: RunningApi) -> None:
    for path in ("/static/..%2Fchannel.py", "/static/%2e%2e/channel.py", "/static/..%5Cchannel.py", "/static/%2e%2e"):
        resp, body = await _get(api, path)
        assert resp.status == 404, path
        assert b"HttpChannel" not in body
        assert_error(json.loads(body))


async def test_a_name_too_long_for_the_file_system_is_the_json_404(api: RunningApi) -> None:
    for length in (255, 256, 300, 4096):
        resp, body = await _get(api, "/static/" + "a" * length)
        assert resp.status == 404, length
        assert resp.content_type == "application/json", length
        assert_error(json.loads(body), "not_found")
