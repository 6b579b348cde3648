"""End-to-end, a colour model: a tiny CapsNet trained on a folder of colour pictures made by the test
(MNIST digits on a coloured ground per class), shipped to the real app; in headless Chromium a colour photo is
uploaded on the Draw page and read, with its prediction and redraw."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from browser_support import PAGE_LOAD_MS, RERUN_MS, App, install, streamlit_app, wait_idle
from PIL import Image

try:
    from playwright.sync_api import expect
except ImportError:  # pragma: no cover - the dev extra installs it (browser_fixtures says so)
    expect = None  # type: ignore[assignment]

pytestmark = pytest.mark.browser
GROUNDS = [(200, 40, 40), (40, 160, 40), (40, 60, 200)]


def _colour_folder(root: Path, data_dir: Path) -> Path:
    """MNIST's test digits 0-2, 20 each, white ink on their class's coloured ground, as 32x32 PNG files."""
    from capsnet.data.datasets import load_dataset, stored_tensors

    images, labels = stored_tensors(load_dataset("mnist", train=False, data_dir=data_dir))
    for k, ground in enumerate(GROUNDS):
        (root / f"digit {k}").mkdir(parents=True)
        for n, index in enumerate(torch.nonzero(labels == k).flatten()[:20].tolist()):
            ink = np.pad(images[index, 0].numpy(), 2).astype(np.float32)[..., None] / 255  # (32, 32, 1)
            picture = np.asarray(ground, np.float32) * (1 - ink) + 255 * ink
            Image.fromarray(picture.round().astype(np.uint8), mode="RGB").save(root / f"digit {k}" / f"{n}.png")
    return root


@pytest.fixture(scope="module")
def colour_app(
    chromium: str, data_dir: Path, tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[App]:
    from capsnet.training.options import TrainOptions
    from capsnet.training.trainer import train

    work = tmp_path_factory.mktemp("browser-colour")
    folder = _colour_folder(work / "tinted", data_dir)
    train(TrainOptions(dataset=str(folder), image_size=32, preset="tiny", epochs=2, batch_size=16, device="cpu",
                       out=str(work / "run"), progress=False, compile=False))  # fmt: skip
    with streamlit_app(work / "app", tiny_checkpoint) as running:
        install(work / "run" / "best.safetensors", running.checkpoints_dir / "tinted.safetensors")
        yield running


def test_upload_a_colour_photo_to_a_colour_model(page, colour_app: App, tmp_path: Path) -> None:
    page.goto(colour_app.url + "/?checkpoint=tinted")
    expect(page.get_by_test_id("stSidebarNav")).to_be_visible(timeout=PAGE_LOAD_MS)
    expect(page.get_by_text(re.compile(r"reads 32x32 colour images \(tinted\), not drawings"))).to_be_visible(
        timeout=RERUN_MS
    )
    expect(page.get_by_role("radio", name="Draw")).to_have_count(0)  # a colour model reads no drawings
    page.get_by_role("radio", name="Upload").click()
    photo = tmp_path / "photo.jpg"
    canvas = Image.new("RGB", (120, 90), GROUNDS[2])  # a blue ground with a white stroke: a photo of a "digit 1"
    canvas.paste((255, 255, 255), (56, 15, 66, 75))
    canvas.save(photo, quality=92)
    page.locator("[data-testid=stFileUploaderDropzoneInput]").set_input_files(str(photo))
    expect(page.get_by_text("input: upload photo.jpg")).to_be_visible(timeout=RERUN_MS)
    wait_idle(page)
    value = page.get_by_test_id("stMetric").filter(has_text="Prediction").get_by_test_id("stMetricValue")
    expect(value).to_have_text(re.compile(r"digit [0-2]"), timeout=RERUN_MS)
    shown = page.get_by_test_id("stImage").locator("img")
    expect(shown.first).to_be_visible(timeout=RERUN_MS)  # the preview; the input and its redraw, in colour:
    redraw = page.locator(".knobs[data-view=dimensions]")
    expect(redraw).to_have_attribute("data-settled", re.compile(r"^\d+$"), timeout=RERUN_MS)
    pixels = np.asarray(redraw.evaluate("el => el.values.reconstruction"))
    assert pixels.size == 3 * 32 * 32 and np.ptp(pixels.reshape(-1, 3).mean(axis=0)) > 0  # three channels that differ


def test_the_colour_app_logged_no_traceback(colour_app: App) -> None:
    assert "Traceback" not in colour_app.log.read_text(encoding="utf-8")
