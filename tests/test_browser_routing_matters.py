"""End-to-end: the Where routing matters page in the real app (`streamlit run`, headless Chromium).

The app shows the shipped MNIST model with its kept summary (`checkpoints/mnist.routing.json`, copied beside it),
so nothing is measured here. A full-page screenshot goes to $CAPSNET_SCREENSHOTS_DIR/routing_matters.png (the
README's: CAPSNET_SCREENSHOTS_DIR=docs), else to a temporary folder. Needs Chromium: skipped without it, except in
CI (`CI` set), where a missing browser is a failure.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from browser_support import (
    NARROW,
    PAGE_LOAD_MS,
    RERUN_MS,
    Screenshots,
    overflowing_text,
    streamlit_app,
    wait_rendered,
)

from capsnet.readings import routing_matters as rm

try:
    from playwright.sync_api import expect
except ImportError:  # pragma: no cover - the dev extra installs it (conftest's browser fixtures say so)
    expect = None  # type: ignore[assignment]

pytestmark = pytest.mark.browser
SHIPPED = Path(__file__).resolve().parents[1] / "checkpoints" / "mnist.safetensors"


def test_a_changed_image_opens_on_the_routing_page(
    page, data_dir: Path, tmp_path: Path, screenshots: Screenshots
) -> None:
    kept = rm.RoutingMatters.from_dict(json.loads(rm.sidecar_path(SHIPPED).read_text()))
    first = kept.changed[0]
    r = kept.shown_iterations(first)
    with streamlit_app(tmp_path / "app", SHIPPED) as app:
        shutil.copy(rm.sidecar_path(SHIPPED), app.checkpoints_dir / "mnist.routing.json")
        page.goto(app.url + "/routing-matters", timeout=PAGE_LOAD_MS)
        main = page.get_by_test_id("stMain")
        expect(main.get_by_text("of 10,000", exact=True)).to_be_visible(timeout=PAGE_LOAD_MS)
        wait_rendered(page)
        expect(main.get_by_test_id("stMetricValue").last).to_have_text(f"{len(kept.changed):,}")
        assert main.get_by_test_id("stPlotlyChart").count() == 1
        buttons = main.get_by_role("button", name=re.compile(r"^Routing at r = \d$"))
        assert buttons.count() == min(12, len(kept.changed))
        screenshots.take(page, "routing_matters.png")
        page.set_viewport_size(NARROW)  # a 1,100 px window: every label whole
        page.wait_for_timeout(1500)  # the charts follow the new width
        wait_rendered(page)
        assert overflowing_text(page) == []

        buttons.first.click()
        page.wait_for_url(re.compile(r"/routing\?"), timeout=RERUN_MS)
        expect(main.get_by_text(f"test image #{first.index}").first).to_be_visible(timeout=RERUN_MS)
        wait_rendered(page)
        assert f"test={first.index}" in page.url and f"iterations={r}" in page.url, page.url
        assert overflowing_text(page) == []  # the Routing page of the shipped model, at 1,100 px
