"""The Routing page's cost per click, before and after: figure JSON, server time, browser time.

    python benchmarks/bench_routing_page.py                  # AppTest and the browser, before and after
    python benchmarks/bench_routing_page.py --no-browser     # figure JSON and server time only
    python benchmarks/bench_routing_page.py --baseline REV   # "before" as of another commit

"Before" is the app (`capsnet` and `dashboard`) as it was at --baseline (default: the last commit
before the page was made lighter), "after" the working tree as it is. Both show the same model
(--checkpoint, default the shipped MNIST one) on the same test image with r = 3.

- Figure JSON: what `st.plotly_chart` serialises in one run of the page, and the part of it a click
  changes (Streamlit sends a chart again only when its JSON changed).
- Server: one click's rerun through `streamlit.testing.v1.AppTest` (the whole app script), median.
- Browser: both apps served (`streamlit run`), one headless Chromium (flags as in the browser tests),
  the two versions taking turns click by click so that load on the machine hits both alike. Two
  interactions: a ◀ Previous / Next ▶ click (every chart of the iteration changes) and a 'Colour
  the strokes by' click (only the stroke overlay changes). Per click: the time from the click to
  the last change to the page (`settled`), the renderer's main-thread busy time over it (CDP
  `Performance.getMetrics` TaskDuration, up to the end of an 800 ms quiet spell) and the bytes
  received on the websocket (Streamlit resends a chart it sent in the last two runs by reference).

Needs $CAPSNET_DATA_DIR (the MNIST test set) and, for the browser, Playwright and Chromium.
Timings are medians; read the ratios, not the absolute times, on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from browser_bench import REPO, VIEWPORT, archive_tree, launch_chromium
from browser_bench import served as serve_tree

BASELINE = "2fe45a3"  # the last commit before the Routing page was made lighter
TEST_INDEX = 3
STEP_KEYS = ("routing_prev", "routing_next")  # alternated: iteration 2, 3, 2, ...
OVERLAY_OPTIONS = [  # a 'Colour the strokes by' option, and the title the overlay then has
    ("how strongly it votes for the chosen capsule", "How strongly each stroke votes"),
    ("the capsule each stroke votes for", "Which capsule each stroke votes for"),
]
INTERACTIONS = {"step": "one ◀ Previous / Next ▶ click", "toggle": "one 'Colour the strokes by' click"}


# ---------------------------------------------------------------- the two trees


def make_trees(root: Path, baseline: str) -> dict[str, Path]:
    """{"before": `capsnet` and `dashboard` as they were at `baseline`, "after": the working tree}."""
    return {"before": archive_tree(baseline, root / "before"), "after": REPO}


def tree_env(tree: Path, folders: Path, checkpoint: Path) -> dict[str, str]:
    """The environment of a process that imports `capsnet` and `dashboard` from `tree` (ahead of the editable install)."""
    checkpoints, runs = folders / "checkpoints", folders / "runs"
    if not checkpoints.exists():
        checkpoints.mkdir(parents=True)
        runs.mkdir()
        shutil.copy(checkpoint, checkpoints / "mnist.safetensors")
    return dict(
        os.environ,
        PYTHONPATH=str(tree),
        CAPSNET_CHECKPOINTS_DIR=str(checkpoints),
        CAPSNET_RUNS_DIR=str(runs),
        PYTHONUNBUFFERED="1",
    )


# ---------------------------------------------------------------- figure JSON and server time (AppTest)


def apptest_worker(clicks: int) -> None:
    """Run in a subprocess whose PYTHONPATH is one tree: open the page, click, print JSON."""
    from streamlit.testing.v1 import AppTest

    import dashboard

    app = str(Path(dashboard.__file__).with_name("app.py"))
    at = AppTest.from_file(app, default_timeout=300).run()
    at.segmented_control(key="input_source").set_value("Test image").run()
    at.number_input(key="test_index").set_value(TEST_INDEX).run()
    at.switch_page("app_pages/routing.py").run()
    at.slider(key="routing_iterations").set_value(3).run()

    def specs() -> dict[str, str]:
        return {e.key: e.proto.spec for e in at.get("plotly_chart")}

    first = specs()
    changed, times = [], []
    at.button(key=STEP_KEYS[0]).click().run()  # warm: both iterations' readings and figures once
    at.button(key=STEP_KEYS[1]).click().run()
    previous = specs()
    for i in range(clicks):
        start = time.perf_counter()
        at.button(key=STEP_KEYS[i % 2]).click().run()
        times.append(1000 * (time.perf_counter() - start))
        if at.exception:
            raise SystemExit(str(at.exception[0].stack_trace))
        now = specs()
        changed.append(sum(len(spec) for key, spec in now.items() if previous.get(key) != spec))
        previous = now
    print(
        json.dumps(
            {
                "charts": {key: len(spec) for key, spec in first.items()},
                "changed_bytes": statistics.median(changed),
                "click_ms": statistics.median(times),
            }
        )
    )


def apptest(tree: Path, folders: Path, checkpoint: Path, clicks: int) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", "--clicks", str(clicks)],
        cwd=tree,
        env=tree_env(tree, folders, checkpoint),
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise SystemExit(f"AppTest on {tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- the browser


IDLE = """
(quietMs) => {
  const busy = document.querySelector('[data-testid=stStatusWidget]') || document.querySelector('[data-stale=true]')
    || document.querySelector('[data-testid=stSkeleton]') || document.querySelector('[data-testid=stSpinner]');
  const charts = [...document.querySelectorAll('[data-testid=stPlotlyChart]')];
  const now = performance.now();
  if (busy || !charts.every(c => c.querySelector('.js-plotly-plot .main-svg'))) { window.__idleSince = undefined; return false; }
  if (window.__idleSince === undefined) window.__idleSince = now;
  return now - window.__idleSince >= quietMs;
}
"""


def wait_rendered(page, quiet_ms: int = 800, timeout_ms: int = 120_000) -> None:
    """Until no script runs, nothing is stale and every chart is drawn, for `quiet_ms`."""
    page.evaluate("() => { window.__idleSince = undefined; }")
    page.wait_for_function(IDLE, arg=quiet_ms, polling=100, timeout=timeout_ms)


@contextmanager
def served(tree: Path, folders: Path, checkpoint: Path) -> Iterator[str]:
    """`streamlit run` of `tree`'s app on a free port, in its own process group; yields its URL."""
    with serve_tree(tree, tree_env(tree, folders, checkpoint), folders / "streamlit.log") as url:
        yield url


RECORD = """
() => {
  window.__bench = {last: performance.now()};
  const main = document.querySelector('[data-testid=stMain]');
  new MutationObserver(() => { window.__bench.last = performance.now(); })
    .observe(main, {subtree: true, childList: true, attributes: true, characterData: true});
}
"""


class Tab:
    """One app in its own browser context, stepping through the iterations and timing each click."""

    def __init__(self, browser, url: str) -> None:
        self.context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
        self.context.set_default_timeout(120_000)
        self.page = self.context.new_page()
        self.received = 0  # bytes on the app's websocket
        self.page.on("websocket", lambda socket: socket.on("framereceived", self._count))
        self.cdp = self.context.new_cdp_session(self.page)
        self.cdp.send("Performance.enable")
        self.page.goto(f"{url}/routing?checkpoint=mnist&test={TEST_INDEX}&iterations=3", timeout=300_000)
        self.page.locator(".st-key-routing_prev").wait_for(timeout=300_000)
        wait_rendered(self.page)
        self.page.evaluate(RECORD)
        self.steps = self.toggles = 0

    def _count(self, payload: str | bytes) -> None:
        self.received += len(payload)

    def _busy_ms(self) -> float:
        metrics = {m["name"]: m["value"] for m in self.cdp.send("Performance.getMetrics")["metrics"]}
        return 1000 * metrics["TaskDuration"]

    def _timed(self, act, done) -> tuple[float, float, int]:
        """(settled ms, renderer busy ms, websocket bytes) of `act()`, once `done()` has seen its result drawn."""
        busy = self._busy_ms()
        self.received = 0
        start = self.page.evaluate("() => performance.now()")
        act()
        done()
        wait_rendered(self.page)
        last = self.page.evaluate("() => window.__bench.last")
        return last - start, self._busy_ms() - busy, self.received

    def step(self) -> tuple[float, float, int]:
        """One ◀ Previous / Next ▶ click (iteration 2, 3, 2, ...)."""
        key = STEP_KEYS[self.steps % 2]
        self.steps += 1
        header = re.compile(rf"iteration {2 if key == 'routing_prev' else 3} of 3", re.IGNORECASE)
        return self._timed(
            lambda: self.page.locator(f".st-key-{key} button").click(),
            lambda: self.page.get_by_test_id("stMarkdownContainer").filter(has_text=header).first.wait_for(),
        )

    def toggle(self) -> tuple[float, float, int]:
        """One click on the other 'Colour the strokes by' option: only the stroke overlay changes."""
        option, title = OVERLAY_OPTIONS[self.toggles % 2]
        self.toggles += 1
        return self._timed(
            lambda: self.page.locator(".st-key-overlay_mode").get_by_text(option).click(),
            lambda: self.page.locator(".st-key-vote_overlay .gtitle").filter(has_text=title).wait_for(),
        )


def browser_rounds(urls: dict[str, str], clicks: int) -> tuple[str, dict[str, dict[str, dict[str, float]]]]:
    """(Chromium's version, {interaction: {version: medians}}), the versions taking turns click by click."""
    from playwright.sync_api import sync_playwright

    rows: dict[str, dict[str, list]] = {what: {name: [] for name in urls} for what in INTERACTIONS}
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            tabs = {name: Tab(browser, url) for name, url in urls.items()}
            for tab in tabs.values():  # warm-up: both iterations and both overlays drawn once
                tab.step(), tab.step(), tab.toggle(), tab.toggle()
            for i in range(clicks):
                for name, tab in tabs.items():
                    rows["step"][name].append(tab.step())
                    if i % 2 == 0:  # half as many toggles
                        rows["toggle"][name].append(tab.toggle())
            version = browser.version
        finally:
            browser.close()
    medians = {
        what: {
            name: {
                key: statistics.median(r[i] for r in runs) for i, key in enumerate(("settled_ms", "busy_ms", "bytes"))
            }
            for name, runs in by_version.items()
        }
        for what, by_version in rows.items()
    }
    return version, medians


# ---------------------------------------------------------------- report


def machine() -> str:
    import torch

    model = platform.processor() or "?"
    try:
        model = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    load = " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return (
        f"{model}; {os.cpu_count()} logical CPUs; torch {torch.__version__}, "
        f"cpu capability {torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} torch threads "
        f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}); load average {load}; "
        f"Python {platform.python_version()}"
    )


def ratio(before: float, after: float) -> str:
    return f"{before / after:.2f}x" if after else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default=BASELINE, help=f"the commit 'before' is taken from (default {BASELINE})")
    parser.add_argument("--checkpoint", type=Path, default=REPO / "checkpoints" / "mnist.safetensors")
    parser.add_argument("--clicks", type=int, default=10, help="timed clicks per version (median reported)")
    parser.add_argument("--no-browser", action="store_true", help="skip the browser measurement")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        apptest_worker(args.clicks)
        return 0
    if not os.environ.get("CAPSNET_DATA_DIR"):
        print("warning: CAPSNET_DATA_DIR is not set; the test images may be missing", file=sys.stderr)

    import plotly
    import streamlit

    print(f"Machine: {machine()}")
    print(f"streamlit {streamlit.__version__}, plotly {plotly.__version__}; before = {args.baseline}, after = the "
          f"working tree; checkpoint {args.checkpoint.name}, test image #{TEST_INDEX}, r = 3\n")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        trees = make_trees(root, args.baseline)
        folders = {name: root / f"app-{name}" for name in trees}
        server = {name: apptest(tree, folders[name], args.checkpoint, args.clicks) for name, tree in trees.items()}
        before, after = server["before"], server["after"]

        print("Figure JSON of one run of the page (bytes)")
        print(f"| {'chart':<24} | {'before':>9} | {'after':>9} | {'ratio':>7} |")
        print(f"|{'-' * 26}|{'-' * 11}|{'-' * 11}|{'-' * 9}|")
        for key in sorted(set(before["charts"]) | set(after["charts"]), key=lambda k: -before["charts"].get(k, 0)):
            b, a = before["charts"].get(key, 0), after["charts"].get(key, 0)
            note = "" if a else "  (not drawn: its expander is closed)"
            print(f"| {key:<24} | {b:>9,} | {a:>9,} | {ratio(b, a):>7} |{note}")
        total_b, total_a = sum(before["charts"].values()), sum(after["charts"].values())
        print(f"| {'all charts':<24} | {total_b:>9,} | {total_a:>9,} | {ratio(total_b, total_a):>7} |")
        print(
            f"| {'changed by a click':<24} | {before['changed_bytes']:>9,.0f} | {after['changed_bytes']:>9,.0f} "
            f"| {ratio(before['changed_bytes'], after['changed_bytes']):>7} |\n"
        )
        print(f"Server: one click's rerun, AppTest, median of {args.clicks}")
        print(
            f"  before {before['click_ms']:.0f} ms, after {after['click_ms']:.0f} ms: "
            f"{ratio(before['click_ms'], after['click_ms'])}\n"
        )
        if args.no_browser:
            return 0
        try:
            with (
                served(trees["before"], folders["before"], args.checkpoint) as url_before,
                served(trees["after"], folders["after"], args.checkpoint) as url_after,
            ):
                chromium, browser = browser_rounds({"before": url_before, "after": url_after}, args.clicks)
        except (ImportError, RuntimeError) as error:
            print(f"Browser: skipped ({error})")
            return 0
        for what, label in INTERACTIONS.items():
            b, a = browser[what]["before"], browser[what]["after"]
            count = args.clicks if what == "step" else (args.clicks + 1) // 2
            print(f"Browser: {label}, headless Chromium {chromium}, versions taking turns, median of {count}")
            print(f"| {'measure':<34} | {'before':>10} | {'after':>10} | {'ratio':>7} |")
            print(f"|{'-' * 36}|{'-' * 12}|{'-' * 12}|{'-' * 9}|")
            for name, key, unit in (
                ("click to last change on the page", "settled_ms", "ms"),
                ("renderer main thread busy", "busy_ms", "ms"),
                ("bytes received (websocket)", "bytes", "B"),
            ):
                print(
                    f"| {name:<34} | {b[key]:>7,.0f} {unit:<2} | {a[key]:>7,.0f} {unit:<2} | {ratio(b[key], a[key]):>7} |"
                )
            print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
