"""Open a page in a real headless Chromium (Debian's ``chromium``, driven by Playwright)
and report what a person would see: console errors, uncaught exceptions, requests for
anything outside the page itself, the figures, and a full-page screenshot."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
# Screenshots also go here when set (``make screenshots`` points it at docs/images).
SCREENSHOT_DIR_ENV = "MODELCTL_SCREENSHOT_DIR"


@dataclass
class PageView:
    title: str
    text: str
    svg_count: int
    console_errors: list[str] = field(default_factory=list)
    external_requests: list[str] = field(default_factory=list)
    screenshot: Path | None = None


def view(page_file: Path, screenshot: Path) -> PageView:
    """Load ``page_file`` from disk, let it settle, screenshot it whole."""
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "make setup installs Debian's chromium"
    errors: list[str] = []
    external: list[str] = []
    url = page_file.resolve().as_uri()
    with sync_playwright() as playwright:
        # Root in a container has no user namespace for Chromium's sandbox.
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
            page.on("request", lambda r: external.append(r.url) if r.url != url else None)
            page.goto(url, wait_until="load")
            page.screenshot(path=str(screenshot), full_page=True)
            result = PageView(title=page.title(), text=page.inner_text("body"),
                              svg_count=page.locator("svg").count(), console_errors=errors,
                              external_requests=external, screenshot=screenshot)
        finally:
            browser.close()
    keep = os.environ.get(SCREENSHOT_DIR_ENV)
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(screenshot, Path(keep) / screenshot.name)
    return result
