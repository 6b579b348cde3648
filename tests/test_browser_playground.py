"""End-to-end: the Routing playground in the real app (`streamlit run`), in headless Chromium.

Choose a situation, step Procedure 1 and watch a coupling change, click a vote to choose it, and
see the real model's votes below. The app shows the session's tiny model (or
$CAPSNET_SCREENSHOTS_CHECKPOINT); the page's screenshot goes to $CAPSNET_SCREENSHOTS_DIR (the
README's: CAPSNET_SCREENSHOTS_DIR=docs), else to a temporary folder. Needs Chromium, like tests/test_browser.py.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_support import (
    CHROMIUM_ARGS,
    PAGE_LOAD_MS,
    RERUN_MS,
    VIEWPORT,
    App,
    choose_option,
    find_chromium,
    full_page_screenshot,
    streamlit_app,
    wait_rendered,
)

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # pragma: no cover - the dev extra installs it
    sync_playwright = None  # type: ignore[assignment]

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def chromium() -> str:
    message = None
    if sync_playwright is None:
        message = "the playwright package is missing: pip install -e '.[dev]'"
    elif find_chromium() is None:
        message = "no Chromium at /usr/bin/chromium or on PATH: install Chromium: apt-get install chromium"
    if message:
        if os.environ.get("CI"):
            pytest.fail(message + " (the browser tests must run in CI)")
        pytest.skip(message)
    return find_chromium()  # type: ignore[return-value]


@pytest.fixture(scope="module")
def app(chromium: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    chosen = os.environ.get("CAPSNET_SCREENSHOTS_CHECKPOINT")
    checkpoint = Path(chosen).resolve() if chosen else request.getfixturevalue("tiny_checkpoint")
    request.getfixturevalue("data_dir")  # the link below opens a test image
    with streamlit_app(tmp_path_factory.mktemp("playground-app"), checkpoint) as running:
        yield running


def test_step_the_playground_and_click_a_vote(chromium: str, app: App, tmp_path: Path) -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, timeout=60_000)
        try:
            context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
            context.set_default_timeout(RERUN_MS)
            page = context.new_page()
            page.goto(app.url + "/playground?checkpoint=mnist&test=3")
            shown = page.locator(".st-key-playground_shown")
            expect(shown).to_contain_text("Iteration 1 of 3", timeout=PAGE_LOAD_MS)
            reading = page.locator(".st-key-playground_child_reading")
            expect(reading).to_contain_text("Child 1 sends 0.333 to parent 1")

            choose_option(
                page, page.locator(".st-key-playground_preset").get_by_role("combobox"), "two competing clusters"
            )
            expect(page.get_by_text("seven against five")).to_be_visible(timeout=RERUN_MS)
            page.locator(".st-key-playground_next").get_by_role("button").click()
            expect(shown).to_contain_text("Iteration 2 of 3", timeout=RERUN_MS)
            expect(reading).not_to_contain_text("0.333")  # routing moved child 1's weight
            first = float(re.search(r"sends ([0-9.]+) to parent 1", reading.inner_text()).group(1))
            assert first > 0.4, reading.inner_text()
            wait_rendered(page)

            # a click on child 9's vote for parent 1 (one of the five outvoted) chooses it
            vote = page.locator(".st-key-playground_chart .scatterlayer .trace").first.locator(".point").nth(8)
            box = vote.bounding_box()
            assert box is not None
            centre = (box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            page.mouse.move(*centre)  # plotly finds the point under the mouse on hover, then takes the click on it
            expect(page.locator(".hoverlayer .hovertext").first).to_contain_text("child 9")
            page.mouse.click(*centre)
            expect(reading).to_contain_text("Child 9 sends", timeout=RERUN_MS)
            ninth = float(re.search(r"sends ([0-9.]+) to parent 1", reading.inner_text()).group(1))
            assert ninth < 1 / 3, reading.inner_text()  # the smaller cluster loses parent 1
            expect(page.locator(".st-key-playground_child").get_by_role("combobox")).to_have_value("child 9")

            real = page.locator(".st-key-playground_real_chart")  # the real model's votes, below, stepped alike
            points = real.locator(".scatterlayer .trace").first.locator(".point")
            expect(points.first).to_be_attached(timeout=RERUN_MS)
            wait_rendered(page)
            sizes = points.evaluate_all("ps => ps.map(p => p.getAttribute('d'))")
            page.locator(".st-key-playground_real_next").get_by_role("button").click()
            expect(page.locator(".st-key-playground_real_shown")).to_contain_text("Iteration 2 of 3", timeout=RERUN_MS)
            expect(shown).to_contain_text("Iteration 2 of 3")  # the toy keeps its own iteration
            wait_rendered(page)
            assert points.evaluate_all("ps => ps.map(p => p.getAttribute('d'))") != sizes  # iteration 2's weights
            folder = os.environ.get("CAPSNET_SCREENSHOTS_DIR")
            full_page_screenshot(page, Path(folder) / "playground.png" if folder else tmp_path / "playground.png")
        finally:
            browser.close()
