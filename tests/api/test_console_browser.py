"""The web console in Debian's headless Chromium (Playwright) against an in-process daemon and the fake LLM."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from playwright.async_api import Dialog, Page, Route, async_playwright, expect

from agenthub.api.llm_text import TITLE_PROMPT, WELCOME_PROMPT
from agenthub.api.server import HttpApi
from agenthub.channel import WebRoutes
from agenthub.clock import ManualClock
from agenthub.config import Settings
from agenthub.hosting.app import build_api, build_services
from agenthub.scheduler.wiring import start_scheduler, stop_scheduler
from agenthub.storage.tokens import TokenStore
from agenthub.web import WebServer
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, last_user_text, reply_text, reply_tool
from tests.support.scheduler import shanghai, until

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WELCOME = "欢迎！我是测试助手，可以帮你安排周末。"
TITLE = "周末出游计划"
REPLY = "你好！这是**流式**回复。\n第二行 <b>不是粗体</b>\n```python\nprint('hi')\n```\n结束。"
REPLY_AS_SHOWN = "你好！这是流式回复。\n第二行 <b>不是粗体</b>print('hi')结束。"


def responder(body: dict[str, Any]) -> ScriptedReply:
    """Welcome and title requests get short answers; chat turns stream REPLY slowly enough to watch."""
    if TITLE_PROMPT in json.dumps(body.get("system"), ensure_ascii=False):
        return reply_text(TITLE)
    if last_user_text(body) == WELCOME_PROMPT:
        return reply_text(WELCOME)
    return reply_text(REPLY, chunks=8, delta_delay_s=0.12)


@dataclass
class Console:
    url: str
    token: str

    async def api(self, method: str, path: str) -> Any:
        headers = {"Authorization": f"Bearer {self.token}"}
        timeout = aiohttp.ClientTimeout(total=5)
        async with (
            aiohttp.ClientSession(timeout=timeout) as http,
            http.request(method, self.url + path, headers=headers) as response,
        ):
            assert response.status == 200, await response.text()
            return await response.json()


@asynccontextmanager
async def serve(settings: Settings) -> AsyncIterator[Console]:
    """The daemon's wiring (`Daemon._serve`) on port 0: gateway, web server, the http channel."""
    token = TokenStore(settings.auth_dir).create("test")
    async with build_services(settings) as services:
        gateway = services.gateway
        server = WebServer(gateway, host="127.0.0.1", port=0, max_body_bytes=settings.http.max_body_bytes)
        routes = WebRoutes()
        channel = build_api(services, routes)
        server.mount(routes)
        await server.start()
        await channel.start()
        server.ready = True
        try:
            yield Console(f"http://127.0.0.1:{server.port}", token)
        finally:
            await server.stop_listening()
            await gateway.drain(5.0)
            await channel.stop()
            await server.close()


@pytest_asyncio.fixture
async def console(settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic) -> AsyncIterator[Console]:
    fake_llm.responder = responder
    settings = settings_factory()
    write_agent(settings.agents_dir, "default", persona="你是测试助手。")
    write_agent(settings.agents_dir, "reviewer", {"description": "代码评审"})
    async with serve(settings) as running:
        yield running


@pytest.fixture
def chromium() -> Path:
    """Debian's Chromium; missing it is a failure with the fix in the message, never a skip."""
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: the console test drives Debian's Chromium. Install it with "
            "`apt-get install -y chromium` (.ci/run does this in CI)."
        )
    return CHROMIUM


@pytest_asyncio.fixture
async def page(chromium: Path) -> AsyncIterator[Page]:
    errors: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(chromium), headless=True, args=CHROMIUM_ARGS)
        context = await browser.new_context(viewport={"width": 1280, "height": 800}, locale="zh-CN")
        context.set_default_timeout(10_000)
        page = await context.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        failed: list[str] = []  # the API's 401s are expected; any other 4xx/5xx (a favicon 404 …) is a bug
        page.on(
            "response",
            lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 and "/api/" not in r.url else None,
        )
        page.on("requestfailed", lambda r: failed.append(f"failed {r.url}") if "/api/" not in r.url else None)
        try:
            yield page
        finally:
            await browser.close()
    assert not errors, f"JavaScript errors in the console: {errors}"
    assert not failed, f"requests that failed in the console: {failed}"


async def screenshot(page: Page, tmp_path: Path, name: str) -> None:
    folder = Path(os.environ.get("CONSOLE_SCREENSHOT_DIR") or tmp_path)
    await page.screenshot(path=str(folder / name), full_page=True)


async def sign_in(page: Page, console: Console, tmp_path: Path) -> None:
    await page.goto(console.url + "/")
    await page.get_by_label("访问令牌").fill("ahk_wrong")
    await page.get_by_role("button", name="登录").click()
    await expect(page.locator("#signin-error")).to_contain_text("令牌无效")
    await screenshot(page, tmp_path, "console_signin.png")
    await page.get_by_label("访问令牌").fill(console.token)
    await page.get_by_role("button", name="登录").click()
    await expect(page.get_by_role("button", name="新建会话")).to_be_visible()


async def first_chat(page: Page, console: Console, tmp_path: Path) -> str:
    """New session → welcome → a streamed reply seen mid-way and in full → auto-title. Returns its chat id."""
    await page.get_by_role("button", name="新建会话").click()
    sessions = page.locator("#session-list > li")
    await expect(sessions).to_have_count(1)
    await expect(sessions.first).to_contain_text("新会话")
    await expect(page.get_by_test_id("welcome")).to_contain_text(WELCOME)
    await screenshot(page, tmp_path, "console_welcome.png")
    chat_id = await sessions.first.get_attribute("data-chat-id")
    assert chat_id

    await page.get_by_label("输入消息").fill("周末去哪儿玩？")
    await page.get_by_label("输入消息").press("Enter")
    partial = await wait_partial(page)
    assert 0 < len(partial) < len(REPLY)
    await expect(page.get_by_label("停止")).to_be_visible()
    await screenshot(page, tmp_path, "console_streaming.png")

    done = page.locator('.bubble[data-state="done"]')
    await expect(done).to_have_count(1)
    assert await done.evaluate("b => b.textContent") == REPLY_AS_SHOWN
    await expect(done.locator("pre code")).to_have_text("print('hi')")
    await expect(done.locator("strong")).to_have_text("流式")
    assert await done.locator("b").count() == 0  # the model's HTML is shown as text, never parsed
    await expect(page.get_by_test_id("welcome")).to_have_count(0)
    history = await console.api("GET", f"/api/agents/default/sessions/{chat_id}/messages")
    assert [(m["role"], m["content"]) for m in history["messages"]] == [
        ("user", "周末去哪儿玩？"),
        ("assistant", REPLY),
    ]
    await expect(sessions.first.locator(".session-name")).to_have_text(TITLE)  # auto-title after the first reply
    await expect(page.locator("#meter-text")).to_contain_text("tokens")
    await expect(page.locator("#meter-text")).not_to_contain_text("估算")  # real usage is known now
    return chat_id


async def wait_partial(page: Page) -> str:
    """The streaming bubble's text once it is a non-empty strict prefix of REPLY."""
    handle = await page.wait_for_function(
        """(full) => {
            const live = document.querySelector('.bubble[data-state="streaming"] .text');
            const text = live ? live.textContent : '';
            return text && text.length < full.length && full.startsWith(text) ? text : null;
        }""",
        arg=REPLY,
    )
    text = await handle.json_value()
    assert isinstance(text, str)
    return text


async def pin_and_rename(page: Page, console: Console, first_id: str) -> str:
    """A second session lands on top; pinning the first moves it back up; renaming it shows everywhere."""
    sessions = page.locator("#session-list > li")
    await page.get_by_role("button", name="新建会话").click()
    await expect(sessions).to_have_count(2)
    second_id = await sessions.first.get_attribute("data-chat-id")
    assert second_id and second_id != first_id  # newest first

    await page.locator(f'li[data-chat-id="{first_id}"]').get_by_role("button", name="置顶").click()
    await expect(sessions.first).to_have_attribute("data-chat-id", first_id)
    await expect(sessions.first.get_by_role("button", name="取消置顶")).to_be_attached()

    await sessions.first.get_by_role("button", name="重命名").click()
    await page.get_by_label("会话标题").fill("重要：周末计划")
    await page.get_by_label("会话标题").press("Enter")
    await expect(sessions.first.locator(".session-name")).to_have_text("重要：周末计划")
    await expect(page.locator("#chat-title")).to_have_text("新会话")  # the second session is still open
    listed = (await console.api("GET", "/api/agents/default/sessions"))["sessions"]
    assert [(s["chat_id"], s["title"], s["pinned"]) for s in listed] == [
        (first_id, "重要：周末计划", True),
        (second_id, "新会话", False),
    ]
    await sessions.first.locator(".session-open").click()
    await expect(page.locator("#chat-title")).to_have_text("重要：周末计划")
    await expect(page.locator('.bubble[data-role="assistant"]')).to_have_text(REPLY_AS_SHOWN)
    return second_id


async def stop_and_delete(page: Page, console: Console, second_id: str) -> None:
    """Stop a reply mid-stream (the question stays in history), then delete that session after confirming."""
    item = page.locator(f'li[data-chat-id="{second_id}"]')
    await item.locator(".session-open").click()
    await expect(page.get_by_test_id("welcome")).to_be_visible()
    await page.get_by_label("输入消息").fill("讲个长故事")
    await page.get_by_role("button", name="发送").click()
    await wait_partial(page)
    await page.get_by_role("button", name="停止").click()
    await expect(page.locator('.bubble[data-state="stopped"]')).to_contain_text("已停止")
    await expect(page.get_by_role("button", name="发送")).to_be_enabled()
    await expect(item.locator(".session-name")).to_have_text(TITLE)  # auto-titled from the kept question
    history = await console.api("GET", f"/api/agents/default/sessions/{second_id}/messages")
    assert history["messages"][0]["content"] == "讲个长故事"

    async def accept(dialog: Dialog) -> None:
        assert "删除会话" in dialog.message
        await dialog.accept()

    page.once("dialog", accept)
    await item.get_by_role("button", name="删除").click()
    await expect(page.locator("#session-list > li")).to_have_count(1)
    listed = (await console.api("GET", "/api/agents/default/sessions"))["sessions"]
    assert second_id not in [s["chat_id"] for s in listed]


async def test_console_chat_pin_rename_stop_delete(console: Console, page: Page, tmp_path: Path) -> None:
    await sign_in(page, console, tmp_path)
    assert await page.evaluate("localStorage.getItem('agenthub.token')") == console.token
    await expect(page.locator("#offline-banner")).to_be_hidden()
    first_id = await first_chat(page, console, tmp_path)
    second_id = await pin_and_rename(page, console, first_id)
    await screenshot(page, tmp_path, "console.png")
    await stop_and_delete(page, console, second_id)

    sessions = page.locator("#session-list > li")
    await page.reload()  # the token is remembered
    await expect(sessions.first.locator(".session-name")).to_have_text("重要：周末计划")
    await expect(page.locator('.bubble[data-role="assistant"]')).to_have_count(1)

    await page.get_by_label("智能体").select_option("reviewer")  # two agents → the picker shows
    await expect(page.locator("#session-empty")).to_be_visible()
    await expect(page.locator("#agent-info")).to_contain_text("代码评审")
    await page.get_by_label("智能体").select_option("default")
    await expect(sessions).to_have_count(1)
    await expect(page.locator('.bubble[data-role="assistant"]')).to_have_count(1)
    await expect(page.locator("#context-meter")).to_be_visible()  # the chat's last request is done: nothing in flight

    await page.evaluate("localStorage.setItem('agenthub.token', 'ahk_revoked')")
    await page.get_by_role("button", name="新建会话").click()  # any 401 asks for the token again
    await expect(page.get_by_label("访问令牌")).to_be_visible()
    await expect(page.locator("#signin-error")).to_contain_text("令牌无效")


@pytest_asyncio.fixture
async def offline_console(settings_factory: Callable[..., Settings]) -> AsyncIterator[Console]:
    async with serve(settings_factory(llm={"offline": True})) as running:
        yield running


async def test_console_offline_banner_and_single_agent(offline_console: Console, page: Page, tmp_path: Path) -> None:
    await sign_in(page, offline_console, tmp_path)
    await expect(page.locator("#offline-banner")).to_be_visible()
    await expect(page.get_by_label("智能体")).to_be_hidden()  # one agent → no picker

    await page.get_by_label("输入消息").fill("第一行\n第二行")  # sending without a session makes one
    await page.get_by_role("button", name="发送").click()
    await expect(page.locator('.bubble[data-state="done"]')).to_have_count(1)
    await expect(page.locator('.bubble[data-role="user"]')).to_have_text("第一行\n第二行")
    listed = (await offline_console.api("GET", "/api/agents/default/sessions"))["sessions"]
    assert len(listed) == 1
    await expect(page.locator("#session-list > li")).to_have_count(1)
    await screenshot(page, tmp_path, "console_offline.png")


@pytest_asyncio.fixture
async def english_console(settings_factory: Callable[..., Settings]) -> AsyncIterator[Console]:
    async with serve(settings_factory(llm={"offline": True}, channels={"http": {"locale": "en"}})) as running:
        yield running


async def test_console_follows_the_http_channels_locale(english_console: Console, page: Page, tmp_path: Path) -> None:
    await page.goto(english_console.url + "/")
    await expect(page).to_have_title("AgentHub console")
    await page.get_by_label("Access token").fill("ahk_wrong")
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.locator("#signin-error")).to_contain_text("no longer valid")
    await page.get_by_label("Access token").fill(english_console.token)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("button", name="New chat")).to_be_visible()
    await expect(page.locator("#offline-banner")).to_contain_text("Model offline")
    await expect(page.locator("#chat-title")).to_have_text("Pick a chat or start a new one")
    await page.get_by_role("button", name="New chat").click()  # the server names it 新会话: shown in English
    await expect(page.locator("#chat-title")).to_have_text("New chat")
    await expect(page.locator("#session-list .session-name")).to_have_text("New chat")
    await page.get_by_label("Message", exact=True).fill("hello")
    await page.get_by_role("button", name="Send").click()
    done = page.locator('.bubble[data-state="done"]')
    await expect(done).to_have_count(1)
    await expect(done).to_contain_text("[offline] AgentHub has no LLM API key configured")  # the reply follows too
    await screenshot(page, tmp_path, "console_en.png")


REMINDER = "该交周报了"


def scheduling_responder(body: dict[str, Any]) -> ScriptedReply:
    """Like `responder`, but a chat turn asks for a reminder at 09:00 and confirms once the tool answered."""
    last = body["messages"][-1]["content"]
    if isinstance(last, list) and any(b.get("type") == "tool_result" for b in last):
        return reply_text("好的，九点提醒你。")
    if "提醒" in last_user_text(body):
        return reply_tool("manage_cron_jobs", {"action": "create", "at": "2026-12-01T09:00:00", "text": REMINDER})
    return responder(body)


@pytest_asyncio.fixture
async def scheduled_console(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> AsyncIterator[tuple[Console, ManualClock, HttpApi]]:
    """The daemon's wiring with a manual clock and the scheduler delivering through the http channel."""
    fake_llm.responder = scheduling_responder
    settings = settings_factory()
    clock = ManualClock(shanghai(2026, 12, 1, 8, 0))
    token = TokenStore(settings.auth_dir).create("test")
    async with build_services(settings, clock=clock) as services:
        gateway = services.gateway
        server = WebServer(gateway, host="127.0.0.1", port=0, max_body_bytes=settings.http.max_body_bytes)
        routes = WebRoutes()
        channel = build_api(services, routes)
        server.mount(routes)
        await server.start()
        await channel.start()
        await start_scheduler(services, [channel])
        server.ready = True
        try:
            yield Console(f"http://127.0.0.1:{server.port}", token), clock, channel
        finally:
            await stop_scheduler(services)
            await server.stop_listening()
            await gateway.drain(5.0)
            await channel.stop()
            await server.close()


async def test_console_shows_a_reminder_the_moment_it_fires(
    scheduled_console: tuple[Console, ManualClock, HttpApi], page: Page, tmp_path: Path
) -> None:
    console, clock, channel = scheduled_console
    await sign_in(page, console, tmp_path)
    await page.get_by_role("button", name="新建会话").click()
    chat_id = await page.locator("#session-list > li").first.get_attribute("data-chat-id")
    assert chat_id
    await page.get_by_label("输入消息").fill("九点提醒我交周报")
    await page.get_by_label("输入消息").press("Enter")
    await expect(page.locator('.bubble[data-state="done"]')).to_have_text("好的，九点提醒你。")
    await until(lambda: channel.pushes.subscribers("default", chat_id) == 1)
    clock.advance(shanghai(2026, 12, 1, 9, 0) - clock())
    await expect(page.locator('.bubble[data-role="assistant"]').last).to_have_text(REMINDER)  # no reload
    await page.reload()
    await expect(page.locator('.bubble[data-role="assistant"]').last).to_have_text(REMINDER)  # stored too


async def test_console_usage_page_shows_a_table_and_a_daily_chart(console: Console, page: Page, tmp_path: Path) -> None:
    await sign_in(page, console, tmp_path)
    await page.get_by_role("button", name="新建会话").click()
    await page.get_by_label("输入消息").fill("周末去哪儿玩？")
    await page.get_by_label("输入消息").press("Enter")
    first_call = 30_000  # the first model call of a process waits for the SDK's import (seconds on a busy machine)
    await expect(page.locator('.bubble[data-state="done"]')).to_have_count(1, timeout=first_call)
    await page.get_by_role("button", name="用量").click()
    panel = page.locator("#usage-panel")
    await expect(panel.locator("thead")).to_contain_text("缓存读取")
    await expect(panel.locator("tbody tr").first).to_contain_text("test (http)")  # the API token's name
    await expect(panel.locator(".usage-bar")).to_have_count(1)
    await page.get_by_label("按", exact=True).select_option("agent")
    await expect(panel.locator("tbody tr").first).to_contain_text("default")
    await screenshot(page, tmp_path, "console_usage.png")
    await page.get_by_role("button", name="关闭").click()
    await expect(panel).to_be_hidden()


async def test_console_usage_page_in_english(english_console: Console, page: Page, tmp_path: Path) -> None:
    await page.goto(english_console.url + "/")
    await page.get_by_label("Access token").fill(english_console.token)
    await page.get_by_role("button", name="Sign in").click()
    await page.get_by_role("button", name="Usage").click()
    panel = page.locator("#usage-panel")
    await expect(panel.locator("thead")).to_contain_text("Cache read")
    await expect(panel.locator("tbody")).to_contain_text("No usage in this period yet.")
    await expect(page.locator("#usage-range")).to_contain_text("Asia/Shanghai")


async def test_a_command_sent_while_a_new_chat_loads_keeps_its_reply_and_shows_no_error(
    console: Console, page: Page, tmp_path: Path
) -> None:
    """A message typed before the new chat's history has arrived waits for it (the late history never wipes the
    exchange), and a first exchange that stored nothing (a command) asks for no title, so no error shows."""
    await sign_in(page, console, tmp_path)

    async def late_history(route: Route) -> None:  # a slow server: the history comes a second late
        if route.request.method == "GET":
            await asyncio.sleep(1.0)
        await route.continue_()

    await page.route("**/sessions/*/messages", late_history)
    await page.get_by_role("button", name="新建会话").click()
    await page.get_by_label("输入消息").fill("/help")
    async with page.expect_response(lambda r: r.url.endswith("/api/agents/default/sessions")) as listed:
        await page.get_by_label("输入消息").press("Enter")
    await listed.value  # the exchange has ended: the list is loaded again after it
    done = page.locator('.bubble[data-state="done"]')
    await expect(done).to_have_count(1)
    await expect(done).to_contain_text("/help")
    await expect(page.locator(".msg.user")).to_have_count(1)
    await expect(page.locator("#session-list > li")).to_have_count(1)  # the typed message made no second chat
    await expect(page.locator("#error-banner")).to_be_hidden()


async def test_a_chat_whose_history_never_comes_holds_only_its_own_composer(
    console: Console, page: Page, tmp_path: Path
) -> None:
    """Opening a chat whose history is stuck, then another: the one shown takes messages as soon as its own history
    is in (the stuck load of a chat no longer shown holds nothing)."""
    await sign_in(page, console, tmp_path)
    sessions = page.locator("#session-list > li")
    for count in (1, 2):
        await page.get_by_role("button", name="新建会话").click()
        await expect(sessions).to_have_count(count)
    stuck_id = await sessions.nth(1).get_attribute("data-chat-id")
    released = asyncio.Event()

    async def stuck_history(route: Route) -> None:  # the server never answers this chat's history (until the end)
        if route.request.method == "GET" and f"/sessions/{stuck_id}/" in route.request.url:
            await released.wait()
        await route.continue_()

    await page.route("**/sessions/*/messages", stuck_history)
    try:
        await sessions.nth(1).locator(".session-open").click()
        await expect(page.get_by_label("输入消息")).to_be_disabled()
        await sessions.nth(0).locator(".session-open").click()
        await expect(page.get_by_test_id("welcome")).to_be_visible()
        await expect(page.get_by_label("输入消息")).to_be_enabled()
        await expect(page.get_by_role("button", name="发送")).to_be_enabled()
    finally:
        released.set()
