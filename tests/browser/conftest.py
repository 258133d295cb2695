"""Headless Chromium (the system's, driven by Playwright; no browser download) for the browser tests."""

from __future__ import annotations

import pytest

from tests.browser.checks import Page, chromium_or_skip


@pytest.fixture(scope="session")
def browser():
    executable = chromium_or_skip()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 2000})
    yield Page(context.new_page())
    context.close()
