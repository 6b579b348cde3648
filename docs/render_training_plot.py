"""Render the dashboard's training-curves figure for runs' metrics.jsonl files to a PNG (for the model card).

    python docs/render_training_plot.py checkpoints/mnist.training.png checkpoints/mnist.metrics.jsonl [more.jsonl ...]
    python docs/render_training_plot.py checkpoints/mnist.training.png checkpoints/mnist.metrics.jsonl --min-accuracy 0.98

Uses the dashboard's own figure builder and draws it in headless Chromium through
Playwright (plotly.js is embedded in the page, so nothing is fetched). The browser is
$CHROMIUM, else `chromium` on the PATH (Debian: apt-get install -y chromium).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from capsnet.files import read_jsonl
from dashboard.figures import training_curves

# headless, and no calls home: this machine may have no network
CHROMIUM_ARGS = (
    "--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking "
    "--disable-component-update --disable-sync"
)


def find_chromium() -> str | None:
    return os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def render(
    target: Path, metrics: list[Path], min_accuracy: float | None = None, width: int = 1100, height: int = 420
) -> None:
    runs = {path.name.split(".")[0]: read_jsonl(path) for path in metrics}
    fig = training_curves(runs, height=height)
    if min_accuracy is not None:  # zoom in on the last epochs, where the first ones would flatten the curve
        fig.update_yaxes(range=[min_accuracy, 1.0], row=1, col=2)
    fig.update_layout(template="plotly_white", width=width, margin=dict(l=50, r=20, t=60, b=40))
    with tempfile.TemporaryDirectory() as tmp:
        page_path = Path(tmp) / "plot.html"
        fig.write_html(page_path, include_plotlyjs=True, full_html=True, config={"staticPlot": True})
        chromium = find_chromium()
        if chromium is None:
            raise SystemExit("no Chromium found: apt-get install -y chromium")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS.split())
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto(page_path.as_uri())
            page.wait_for_selector(".main-svg")
            page.locator(".plotly-graph-div").screenshot(path=str(target))
            browser.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Render training curves to a PNG for the model card.")
    parser.add_argument("target", type=Path, help="the PNG to write")
    parser.add_argument("metrics", type=Path, nargs="+", help="metrics.jsonl files, one line per run")
    parser.add_argument("--min-accuracy", type=float, default=None, help="lower end of the accuracy axis, e.g. 0.98")
    args = parser.parse_args()
    render(args.target, args.metrics, args.min_accuracy)
