"""End-to-end: the training window on the Training runs page, in headless Chromium, following a run as it writes.

The app serves the session's `app_run` (a tiny CapsNet, one epoch on 300 MNIST images: its window holds the
snapshots "before training" and "epoch 1"); the test then adds an "epoch 2" snapshot to the run's folder, as
the trainer does, and the page must show it by itself. With CAPSNET_SCREENSHOTS_DIR set, the page goes to
watch.png there. Needs Chromium: skipped without it, except in CI.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from browser_support import (
    CURRENT,
    PAGE_LOAD_MS,
    RERUN_MS,
    App,
    Screenshots,
    streamlit_app,
    wait_rendered,
)
from dashboard_fixtures import app_run  # noqa: F401

from capsnet.checkpoints.checkpoint import load_checkpoint
from capsnet.data.datasets import dataset_info
from capsnet.data.tasks import LabelledSet
from capsnet.training.folder import RunFolder
from capsnet.training.watch import Watcher, read_window

try:
    from playwright.sync_api import expect
except ImportError:  # pragma: no cover - the dev extra installs it (conftest's browser fixtures say so)
    expect = None  # type: ignore[assignment]

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def watched(chromium: str, app_run: Path, tmp_path: Path) -> Iterator[tuple[App, Path]]:  # noqa: F811
    """The app with `app_run` in its runs folder, and that run's folder there."""
    with streamlit_app(tmp_path / "app", app_run / "best.safetensors") as app:
        run_dir = app.runs_dir / app_run.name
        shutil.copytree(app_run, run_dir)
        yield app, run_dir


def add_epoch_snapshot(run_dir: Path) -> None:
    """What the trainer does after its next epoch: one more snapshot of the same window, in the same file."""
    history = read_window(run_dir)
    assert history is not None and len(history) == 2
    model = load_checkpoint(run_dir / "best.safetensors").model
    window = LabelledSet(dataset_info("mnist"), torch.from_numpy(history.images)[:, None], torch.arange(10))
    Watcher(RunFolder(run_dir), model, window, history.batches, resume_at=(1, 0)).epoch_done(2)


def test_the_window_follows_the_run_and_replays_it(page, watched: tuple[App, Path], screenshots: Screenshots) -> None:
    app, run_dir = watched
    tab = page
    tab.goto(app.url + "/training")
    expect(tab.get_by_test_id("stSidebarNav")).to_be_visible(timeout=PAGE_LOAD_MS)
    expect(tab.get_by_role("heading", name="Watch the capsules learn")).to_be_visible(timeout=RERUN_MS)
    chart = tab.locator(f".st-key-training_window{CURRENT}")
    bars, picture = chart.locator(".barlayer .point"), chart.locator("image")
    expect(bars).to_have_count(100, timeout=RERUN_MS)  # ten capsules under each of ten images
    expect(picture).to_have_count(1, timeout=RERUN_MS)  # the images over their reconstructions: one picture
    caption = tab.get_by_test_id("stCaptionContainer").filter(has_text="right; bars are capsule lengths")
    expect(caption).to_contain_text("epoch 1:", timeout=RERUN_MS)
    add_epoch_snapshot(run_dir)  # the page refreshes by itself, and the slider follows the newest snapshot
    expect(caption).to_contain_text("epoch 2:", timeout=30_000)
    slider = tab.locator(".st-key-watch_step").get_by_role("slider")
    expect(slider).to_have_attribute("aria-valuetext", "epoch 2")
    slider.focus()
    tab.keyboard.press("Home")  # replay: back to the untrained network
    expect(caption).to_contain_text("before training:", timeout=RERUN_MS)
    wait_rendered(tab)
    if os.environ.get("CAPSNET_SCREENSHOTS_DIR"):  # the README's screenshot shows the newest snapshot
        tab.keyboard.press("End")
        expect(caption).to_contain_text("epoch 2:", timeout=RERUN_MS)
        screenshots.take(tab, "watch.png")
