"""The console in the browser's language, with a switch: an English browser gets English texts and English
replies (the console sends its language with every API call); the switch reloads it in Chinese and is remembered."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.async_api import Page, async_playwright, expect

from agenthub.config import Settings
from tests.support.harness import RunningApi

pytestmark = pytest.mark.browser
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


@pytest.fixture
def chromium() -> Path:
    """Debian's Chromium; missing it is a failure with the fix in the message, never a skip."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: install it with `apt-get install -y chromium` (.ci/run does this)")
    return CHROMIUM


@pytest_asyncio.fixture
async def english_page(chromium: Path) -> AsyncIterator[Page]:
    errors: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(chromium), headless=True, args=CHROMIUM_ARGS)
        context = await browser.new_context(locale="en-US")  # Accept-Language: en-US
        context.set_default_timeout(10_000)
        page = await context.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        try:
            yield page
        finally:
            await browser.close()
    assert not errors, f"JavaScript errors in the console: {errors}"


async def test_an_english_browser_gets_english_and_the_switch_turns_it_chinese(
    api: RunningApi, settings: Settings, english_page: Page
) -> None:
    page = english_page
    await page.goto(api.base_url + "/")
    await expect(page.locator("html")).to_have_attribute("lang", "en")
    await page.get_by_label("Access token").fill(api.token)
    await page.get_by_role("button", name="Sign in").click()
    await page.get_by_role("button", name="New chat").click()
    await page.get_by_label("Message", exact=True).fill("/help")
    await page.get_by_label("Message", exact=True).press("Enter")
    await expect(page.locator('.bubble[data-state="done"]')).to_contain_text("Commands:")  # the reply in English

    await page.get_by_role("button", name="Switch to Chinese").click()
    await expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
    assert "lang=zh-CN" in page.url
    await expect(page.get_by_role("button", name="新建会话")).to_be_visible()
    await page.goto(api.base_url + "/")  # no ?lang: the choice made in this browser is kept
    await expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
    await expect(page.get_by_role("button", name="切换到英文")).to_be_visible()
