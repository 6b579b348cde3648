"""End-to-end: the Architecture page in headless Chromium: a click on a box of the diagram shows that stage's computation.

The app runs on the session's tiny model trained on real MNIST (or $CAPSNET_SCREENSHOTS_CHECKPOINT, as in
tests/test_browser.py); the page's screenshot goes to $CAPSNET_SCREENSHOTS_DIR/architecture.png when that is set
(`CAPSNET_SCREENSHOTS_DIR=docs` makes the README's), else to a temporary folder.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_support import (
    CHROMIUM_ARGS,
    PAGE_LOAD_MS,
    RERUN_MS,
    VIEWPORT,
    App,
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


def _missing(message: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(message + " (the browser tests must run in CI)")
    pytest.skip(message)


@pytest.fixture(scope="module")
def chromium() -> str:
    if sync_playwright is None:
        _missing("the playwright package is missing: pip install -e '.[dev]'")
    path = find_chromium()
    if path is None:
        _missing("no Chromium at /usr/bin/chromium or on PATH: install Chromium: apt-get install chromium")
    return path  # type: ignore[return-value]


@pytest.fixture(scope="module")
def app(chromium: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    chosen = os.environ.get("CAPSNET_SCREENSHOTS_CHECKPOINT")
    checkpoint = Path(chosen).resolve() if chosen else request.getfixturevalue("tiny_checkpoint")
    with streamlit_app(tmp_path_factory.mktemp("architecture-app"), checkpoint) as running:
        yield running


def test_clicking_a_stage_shows_its_computation(chromium: str, app: App, tmp_path: Path) -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, timeout=60_000)
        try:
            context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
            context.set_default_timeout(RERUN_MS)
            page = context.new_page()
            page.goto(app.url + "/architecture?test=0", timeout=PAGE_LOAD_MS)
            # the primary capsules first: the chosen capsule's receptive field, its type's lengths and its pose
            expect(page.locator(".st-key-arch_field .main-svg").first).to_be_visible(timeout=PAGE_LOAD_MS)
            expect(page.locator(".st-key-arch_product")).to_have_count(0)
            wait_rendered(page)
            boxes = page.locator(".st-key-arch_diagram_primary .js-plotly-plot .bars .point")
            expect(boxes).to_have_count(6)
            box = boxes.nth(3).bounding_box()  # the votes: W_ij u_i
            assert box is not None
            # a real click where the box is drawn (plotly's drag layer above the bars takes it and finds the bar)
            page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            product = page.locator(".st-key-arch_product .main-svg").first
            expect(product).to_be_visible(timeout=RERUN_MS)
            expect(page.locator(".st-key-arch_field")).to_have_count(0)
            expect(page.get_by_role("radio", name="Votes")).to_be_checked()
            expect(page.locator(".katex-display").first).to_contain_text("W")
            wait_rendered(page)
            folder = os.environ.get("CAPSNET_SCREENSHOTS_DIR")
            full_page_screenshot(page, (Path(folder) if folder else tmp_path) / "architecture.png")
            # and back by the keyboard-reachable radio: the decoder's masked input
            page.locator(".st-key-arch_stage").get_by_text("Decoder", exact=True).click()
            expect(page.locator(".st-key-arch_masked .main-svg").first).to_be_visible(timeout=RERUN_MS)
            expect(page.locator(".st-key-arch_diagram_decoder .bars .point")).to_have_count(6)
        finally:
            browser.close()
