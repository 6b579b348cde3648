"""End-to-end, Efficient-CapsNet: a tiny one trained from MNIST, opened in the real app in headless Chromium. Draw
reads it and redraws any class in the browser; Routing turns its self-attention in the browser (sharpness, bias,
uniform and random couplings) without a server run; Capsule dimensions slides its poses."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from browser_support import (
    PAGE_LOAD_MS,
    RERUN_MS,
    App,
    go_to,
    install,
    knob_values,
    knobs,
    streamlit_app,
    wait_idle,
    watch_run_requests,
)

try:
    from playwright.sync_api import expect
except ImportError:  # pragma: no cover - the dev extra installs it (browser_fixtures says so)
    expect = None  # type: ignore[assignment]

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def efficient_app(
    chromium: str, data_dir: Path, tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[App]:
    from capsnet.training.options import TrainOptions
    from capsnet.training.trainer import train

    work = tmp_path_factory.mktemp("browser-efficient")
    train(TrainOptions(network="efficient", preset="tiny", epochs=1, train_size=300, test_size=100, batch_size=50,
                       device="cpu", out=str(work / "run"), progress=False, data_dir=str(data_dir)))  # fmt: skip
    with streamlit_app(work / "app", tiny_checkpoint) as running:
        install(work / "run" / "best.safetensors", running.checkpoints_dir / "efficient.safetensors")
        yield running


def test_efficient_capsnet_in_the_browser(page, efficient_app: App) -> None:
    page.goto(efficient_app.url + "/?checkpoint=efficient&test=0")
    expect(page.get_by_test_id("stSidebarNav")).to_be_visible(timeout=PAGE_LOAD_MS)
    prediction = page.get_by_test_id("stMetric").filter(has_text="Prediction").get_by_test_id("stMetricValue")
    expect(prediction).to_have_text(re.compile(r"^\s*\d\s*$"), timeout=RERUN_MS)
    redraw = knobs(page, "dimensions")
    expect(redraw.locator("canvas").first).to_be_visible(timeout=RERUN_MS)
    redraw.locator('.segmented[aria-label="capsule to redraw"] button').nth(7).click()
    expect(redraw.get_by_text(re.compile("from capsule 7"))).to_be_visible()
    assert knob_values(redraw)["capsule"] == 7 and len(knob_values(redraw)["reconstruction"]) == 28 * 28

    go_to(page, "Routing")  # its own view at the Routing page's address: the one pass, turned in the browser
    expect(page.get_by_role("heading", name="Self-attention routing")).to_be_visible(timeout=RERUN_MS)
    routing = knobs(page, "attention")
    expect(routing).to_have_attribute("data-settled", re.compile(r"^\d+$"), timeout=RERUN_MS)
    expect(routing.locator("[data-role=summary]")).to_contain_text("the attention as trained")
    trained = knob_values(routing)
    assert trained["sharpness"] == 1 and trained["bias"] and len(trained["coupling"]) % 10 == 0  # (K, N)
    wait_idle(page)
    runs = watch_run_requests(page)
    runs.start()
    routing.get_by_role("checkbox", name="learned bias").uncheck()
    routing.locator('.segmented[aria-label="couplings"] button').filter(has_text="uniform").click()
    expect(routing.locator("[data-role=summary]")).to_contain_text("uniform attention, without the learned bias")
    assert np.allclose(knob_values(routing)["coupling"], 0.1)  # every primary capsule alike over the ten classes
    routing.get_by_role("button", name="As trained").click()
    expect(routing.locator("[data-role=summary]")).to_contain_text("the attention as trained")
    assert knob_values(routing)["scores"] == trained["scores"]
    routing.get_by_text("Does the attention matter for this input?").click()
    expect(routing.locator("[data-role=experiment] table tr")).to_have_count(5)
    page.wait_for_timeout(500)
    assert runs.count == 0, "a knob of the attention ran the server"
    go_to(page, "Capsule dimensions")
    sliders = knobs(page, "dimensions").locator("input[type=range]")
    expect(sliders).to_have_count(16, timeout=RERUN_MS)
