"""Render the dashboard's training-curves figure for runs' metrics.jsonl files to a PNG (for the model card).

    python docs/render_training_plot.py checkpoints/mnist.training.png checkpoints/mnist.metrics.jsonl [more.jsonl ...]

Uses the dashboard's own figure builder and draws it in headless Chromium through
Playwright (plotly.js is embedded in the page, so nothing is fetched).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from capsnet.files import read_jsonl
from dashboard.figures import training_curves

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from browser_support import CHROMIUM_ARGS, find_chromium  # noqa: E402  (the same Chromium set-up as the browser tests)


def render(target: Path, metrics: list[Path], width: int = 1100, height: int = 420) -> None:
    runs = {path.name.split(".")[0]: read_jsonl(path) for path in metrics}
    fig = training_curves(runs, height=height)
    fig.update_layout(template="plotly_white", width=width, margin=dict(l=50, r=20, t=60, b=40))
    with tempfile.TemporaryDirectory() as tmp:
        page_path = Path(tmp) / "plot.html"
        fig.write_html(page_path, include_plotlyjs=True, full_html=True, config={"staticPlot": True})
        chromium = find_chromium()
        if chromium is None:
            raise SystemExit("no Chromium found: apt-get install -y chromium")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto(page_path.as_uri())
            page.wait_for_selector(".main-svg")
            page.locator(".plotly-graph-div").screenshot(path=str(target))
            browser.close()


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    render(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]])
