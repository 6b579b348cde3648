"""Helpers for the end-to-end browser tests (tests/test_browser.py): the app server, Chromium and page waits.

Every wait here is bounded; nothing sleeps longer than a short settle delay.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capsnet.runs.processes import LOCK_NAME

REPO = Path(__file__).resolve().parent.parent
APP = REPO / "dashboard" / "app.py"

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1400, "height": 1000}

# milliseconds: a rerun takes a few seconds on a busy 2-core machine, the first model load longer
RERUN_MS = 90_000
PAGE_LOAD_MS = 120_000
# an assertion's wait where none is given (Playwright's own is 5 s): a script run takes 10 s and more on a slower
# 2-core machine (AVX2 only, float32) while the other test worker trains; an assertion that holds returns at once
EXPECT_MS = 30_000


def find_chromium() -> str | None:
    """Debian's Chromium (Playwright cannot download its own browser here)."""
    for candidate in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---------------------------------------------------------------- the app server


@dataclass
class App:
    url: str
    runs_dir: Path
    checkpoints_dir: Path
    log: Path
    process: subprocess.Popen


def _log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def install(source: Path, target: Path) -> None:
    """Copy a checkpoint as the project ships it: with its `<name>.metrics.jsonl` beside it, if it has one (the
    claims' verdicts read the run's epochs, hours and curve there)."""
    shutil.copy(source, target)
    metrics = Path(source).with_name(Path(source).name.replace(".safetensors", ".metrics.jsonl"))
    if metrics.is_file():
        shutil.copy(metrics, target.with_name(target.name.replace(".safetensors", ".metrics.jsonl")))


@contextmanager
def streamlit_app(
    workdir: Path,
    checkpoint: Path,
    startup_s: float = 120.0,
    multimnist: Path | None = None,
    baselines: dict[str, Path] | None = None,
    em: Path | None = None,
) -> Iterator[App]:
    """`streamlit run dashboard/app.py` on a free port, its runs and checkpoints in `workdir`.

    The checkpoint is copied in as the shipped `mnist.safetensors` (and `multimnist`, if given, as
    `multimnist.safetensors`; each of `baselines` as the CNN `baselines/<dataset>-cnn.safetensors`; `em` as the EM
    network's `mnist-em.safetensors`). The server runs in its own process group, killed on exit; a
    training run it started is stopped too.
    """
    runs_dir, checkpoints_dir = workdir / "runs", workdir / "checkpoints"
    runs_dir.mkdir(parents=True, exist_ok=True)
    checkpoints_dir.mkdir(parents=True, exist_ok=True)
    install(checkpoint, checkpoints_dir / "mnist.safetensors")
    if multimnist is not None:
        install(multimnist, checkpoints_dir / "multimnist.safetensors")
    if em is not None:
        install(em, checkpoints_dir / "mnist-em.safetensors")
    for dataset, source in (baselines or {}).items():
        (checkpoints_dir / "baselines").mkdir(exist_ok=True)
        install(source, checkpoints_dir / "baselines" / f"{dataset}-cnn.safetensors")
    port = free_port()
    env = dict(
        os.environ,
        CAPSNET_RUNS_DIR=str(runs_dir),
        CAPSNET_CHECKPOINTS_DIR=str(checkpoints_dir),
        PYTHONUNBUFFERED="1",
    )
    command = [
        sys.executable, "-m", "streamlit", "run", str(APP),
        "--server.port", str(port),
        "--server.address", "127.0.0.1",
        "--server.headless", "true",
        "--server.fileWatcherType", "none",
        "--server.runOnSave", "false",
        "--browser.gatherUsageStats", "false",
    ]  # fmt: skip
    log = workdir / "streamlit.log"
    with open(log, "w", encoding="utf-8") as out:
        process = subprocess.Popen(
            command, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    app = App(f"http://127.0.0.1:{port}", runs_dir, checkpoints_dir, log, process)
    try:
        _wait_healthy(app, startup_s)
        yield app
    finally:
        _stop_group(process)
        stop_training(runs_dir)


def _wait_healthy(app: App, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if app.process.poll() is not None:
            raise RuntimeError(f"streamlit exited with code {app.process.returncode}:\n{_log_tail(app.log)}")
        try:
            with urllib.request.urlopen(app.url + "/_stcore/health", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"streamlit did not answer {app.url}/_stcore/health in {timeout_s:.0f} s:\n{_log_tail(app.log)}")


def _stop_group(process: subprocess.Popen) -> None:
    """SIGTERM the server's process group (it is the leader of its own), then SIGKILL if it lingers."""
    if process.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def stop_training(runs_dir: Path, timeout_s: float = 30.0) -> None:
    """Stop a trainer that the app under test started into `runs_dir` (its pid is in the run lock).

    Only a process whose command line names this temporary runs folder is signalled.
    """
    try:
        pid = int(json.loads((runs_dir / LOCK_NAME).read_text()).get("pid") or 0)
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except (OSError, ValueError, AttributeError):
        return
    if pid <= 1 or b"-m capsnet train" not in cmdline or str(runs_dir).encode() not in cmdline:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not Path(f"/proc/{pid}").exists():
                return
            try:
                if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                    return  # finished; its parent (the server, now gone) no longer reaps it
            except (OSError, IndexError):
                return
            time.sleep(0.2)


# ---------------------------------------------------------------- waiting on the page

# the element a page shows now: while a fragment reruns, Streamlit keeps the last run's copy of an element beside
# the new one (data-retained) or marks it stale; a locator with this suffix finds the current one alone
CURRENT = ':not([data-stale="true"]):not([data-retained="true"])'

_IDLE_JS = """
(quietMs) => {
  const busy = document.querySelector('[data-testid=stStatusWidget]')
    || document.querySelector('[data-testid=stSkeleton]')
    || document.querySelector('[data-stale=true]')
    || document.querySelector('[data-testid=stSpinner]');
  const now = performance.now();
  if (busy) { window.__e2eIdleSince = undefined; return false; }
  if (window.__e2eIdleSince === undefined) window.__e2eIdleSince = now;
  return now - window.__e2eIdleSince >= quietMs;
}
"""

_RENDERED_JS = """
() => {
  const charts = [...document.querySelectorAll('[data-testid=stPlotlyChart]')];
  if (!charts.every(c => c.querySelector('.js-plotly-plot .main-svg'))) return false;
  const images = [...document.querySelectorAll('[data-testid=stMain] img, [data-testid=stSidebar] img')];
  if (!images.every(i => i.complete && i.naturalWidth > 0)) return false;
  const tables = [...document.querySelectorAll('[data-testid=stDataFrame]')];
  return tables.every(t => t.querySelector('canvas'));
}
"""


_BUSY_JS = """
() => [
  ...[...document.querySelectorAll('[data-testid=stStatusWidget]')].map(e => `status widget "${e.innerText.trim()}"`),
  ...[...document.querySelectorAll('[data-testid=stSkeleton]')].map(() => 'a skeleton'),
  ...[...document.querySelectorAll('[data-stale=true]')].map(e =>
      `stale ${e.getAttribute('data-testid') || e.className.split(' ')[0]} "${e.innerText.trim().slice(0, 40)}"`),
  ...[...document.querySelectorAll('[data-testid=stSpinner]')].map(e => `spinner "${e.innerText.trim()}"`),
]
"""


def wait_idle(page: Any, quiet_ms: int = 800, timeout_ms: int = RERUN_MS) -> None:
    """Until no script run, spinner, skeleton or stale element has been seen for `quiet_ms`.

    A page that never settles fails with what kept it busy at the end (one sample a second for 5 s).
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

    page.evaluate("() => { window.__e2eIdleSince = undefined; }")
    try:
        page.wait_for_function(_IDLE_JS, arg=quiet_ms, polling=100, timeout=timeout_ms)
    except PlaywrightTimeoutError:
        seen = []
        for _ in range(5):
            seen.append(page.evaluate(_BUSY_JS)[:8])
            time.sleep(1)
        raise AssertionError(
            f"the page was never idle for {quiet_ms} ms in {timeout_ms / 1000:.0f} s: busy with {seen}"
        ) from None


def wait_rendered(page: Any, timeout_ms: int = RERUN_MS) -> None:
    """Until the run is over and every chart, image and table on the page has been drawn."""
    wait_idle(page, timeout_ms=timeout_ms)
    page.wait_for_function(_RENDERED_JS, polling=200, timeout=timeout_ms)


@dataclass(frozen=True)
class Screenshots:
    """The README's screenshots, taken only when asked for: $CAPSNET_SCREENSHOTS_DIR names their folder."""

    folder: Path | None

    def take(self, page: Any, name: str) -> Path | None:
        return None if self.folder is None else full_page_screenshot(page, self.folder / name)


def full_page_screenshot(page: Any, path: Path, max_height: int = 6000) -> Path:
    """The whole page: Streamlit scrolls inside stMain and the sidebar, so the viewport is stretched to fit both."""
    wait_rendered(page)
    size = dict(page.viewport_size or VIEWPORT)
    height = page.evaluate(
        """() => Math.ceil(Math.max(document.documentElement.scrollHeight,
             ...['stMain', 'stSidebarContent'].map(id => document.querySelector(`[data-testid=${id}]`))
                .filter(Boolean).map(e => e.scrollHeight)))"""
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size({"width": size["width"], "height": max(size["height"], min(int(height), max_height))})
    try:
        # no focus ring, no hover state (the canvas's toolbar, the sidebar's collapse button) in the picture
        page.evaluate("() => document.activeElement && document.activeElement.blur()")
        page.mouse.move(size["width"] - 10, min(int(height), max_height) - 10)
        page.wait_for_timeout(400)  # let plotly's resize handlers run
        wait_rendered(page)
        page.screenshot(path=str(path), full_page=True, animations="disabled")
    finally:
        page.set_viewport_size(size)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"no PNG written at {path}"
    return path


def click_until(page: Any, target: Any, done: Callable[[int], None], wait_ms: int = 20_000, tries: int = 3) -> None:
    """Click `target` until `done(timeout_ms)` (an assertion that waits up to timeout_ms) holds.

    On a busy 2-core machine a click that lands while Streamlit replaces its element (a fragment's tick, the end
    of a run) can be lost. After a miss the page is waited on until no script runs, and clicked again only if
    `done` still fails then: a click that was taken but is slow to show is never doubled.
    """
    for attempt in range(1, tries + 1):
        target.click()
        try:
            done(wait_ms)
            return
        except AssertionError:
            wait_idle(page)
            try:
                done(1_000)
                return
            except AssertionError:
                if attempt == tries:
                    raise


# ---------------------------------------------------------------- the app's parts


def sidebar(page: Any) -> Any:
    return page.get_by_test_id("stSidebar")


def choose_option(page: Any, combobox: Any, name: str | re.Pattern[str], timeout_ms: int = RERUN_MS) -> list[str]:
    """Pick the option `name` in a Streamlit select box; returns the texts of all the options it listed.

    A rerun that lands between the click that opens the list and the click on the option (a
    fragment's tick, the end of the page's script) closes the list: it is opened again until the
    option is picked or `timeout_ms` has passed (an option that only a later rerun lists, too).
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

    options = page.get_by_role("option")
    wanted = page.get_by_role("option", name=name).first
    deadline = time.monotonic() + timeout_ms / 1000
    listed: list[str] = []  # what the list showed when it was last open
    while True:
        try:
            if not wanted.is_visible():
                combobox.click(timeout=10_000)
            options.first.wait_for(state="visible", timeout=3_000)
            listed = options.all_inner_texts()
            wanted.wait_for(state="visible", timeout=3_000)
            listed = options.all_inner_texts()
            wanted.click(timeout=3_000)
            return listed
        except PlaywrightTimeoutError:
            if time.monotonic() > deadline:
                raise AssertionError(f"no option {name!r} to pick; the list last showed {listed}") from None
            page.keyboard.press("Escape")  # close whatever is open, then try again
            try:  # in a quiet moment: a fragment's tick lands less often in the next few seconds
                wait_idle(page, timeout_ms=15_000)
            except PlaywrightTimeoutError:
                pass


def go_to(page: Any, title: str) -> None:
    """In-app navigation (keeps the session, and so the drawing), by the sidebar's page link."""
    page.get_by_test_id("stSidebarNav").get_by_role("link", name=title, exact=True).click()


def canvas_box(page: Any) -> dict[str, float]:
    """The drawing canvas in page coordinates: the main area's last 280x280 canvas (the knobs' drawing canvas).

    Only the main area's: a page drawn in the sidebar (Streamlit's container stack left on the sidebar by a fragment,
    `dashboard.sidebar.write_to_main`) puts its canvas there, below the window, where a stroke is lost."""
    canvases = page.get_by_test_id("stMain").locator("canvas")
    try:
        canvases.last.wait_for(state="visible", timeout=PAGE_LOAD_MS)
    except Exception as error:
        in_sidebar = page.get_by_test_id("stSidebar").locator("canvas").count()
        raise AssertionError(f"no canvas in the main area ({in_sidebar} in the sidebar)") from error
    for index in reversed(range(canvases.count())):
        box = canvases.nth(index).bounding_box()
        if box and abs(box["width"] - 280) < 2 and abs(box["height"] - 280) < 2:
            return box
    raise AssertionError("no 280x280 drawing canvas in the main area")


def stroke(page: Any, points: Sequence[tuple[float, float]], steps: int = 4) -> None:
    """One mouse stroke through `points` (fractions of the canvas: 0..1, 0..1)."""
    box = canvas_box(page)

    def at(p: tuple[float, float]) -> tuple[float, float]:
        return box["x"] + p[0] * box["width"], box["y"] + p[1] * box["height"]

    page.mouse.move(*at(points[0]))
    page.mouse.down()
    for point in points[1:]:
        page.mouse.move(*at(point), steps=steps)
    page.mouse.up()


def draw_one(page: Any) -> None:
    """A "1": one vertical stroke down the middle."""
    stroke(page, [(0.5, 0.15), (0.5, 0.85)], steps=25)


def draw_zero(page: Any) -> None:
    """A "0": a closed tall ellipse."""
    points = [(0.5 + 0.24 * math.sin(t), 0.5 - 0.34 * math.cos(t)) for t in (2 * math.pi * k / 36 for k in range(38))]
    stroke(page, points, steps=2)


NARROW = {"width": 1100, "height": 4200}  # a laptop window; tall, so that a whole page is laid out at once
_OVERFLOW_JS = """
() => {
  const out = [];
  const r2 = (r) => [Math.round(r.left), Math.round(r.top), Math.round(r.right), Math.round(r.bottom)];
  const inside = (a, b, tol) => a.left >= b.left - tol && a.right <= b.right + tol && a.top >= b.top - tol && a.bottom <= b.bottom + tol;
  const overlap = (a, b, tol) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > tol && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > tol;
  // an axis's own tick labels are laid out by plotly (rotated labels have overlapping boxes, not overlapping glyphs)
  const sameAxis = (a, b) => { const g = a.closest('g[class$="axislayer-above"]'); return g !== null && g === b.closest('g[class$="axislayer-above"]'); };
  const keyOf = (el) => { const k = el.closest('[class*="st-key-"]'); return k ? [...k.classList].find(c => c.startsWith('st-key-')) : ''; };
  // 1. plotly: every text inside the figure's box, and no two texts over each other
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    const box = plot.getBoundingClientRect();
    if (box.width === 0) continue;
    const texts = [...plot.querySelectorAll('svg text')].filter(t => t.textContent.trim() && !t.closest('.hoverlayer'))
      .map(t => ({t, r: t.getBoundingClientRect()})).filter(x => x.r.width > 0);
    for (const {t, r} of texts) if (!inside(r, box, 1)) out.push(`plot ${keyOf(plot)}: "${t.textContent.trim()}" cut ${r2(r)} outside ${r2(box)}`);
    for (let i = 0; i < texts.length; i++) for (let j = i + 1; j < texts.length; j++)
      if (overlap(texts[i].r, texts[j].r, 2) && !sameAxis(texts[i].t, texts[j].t)) out.push(`plot ${keyOf(plot)}: "${texts[i].t.textContent.trim()}" over "${texts[j].t.textContent.trim()}"`);
  }
  // 2. page text: nothing wider than the box that clips it
  const main = document.querySelector('[data-testid=stMain]') || document.body;
  for (const el of main.querySelectorAll('*')) {
    const table = el.classList.contains('dvn-scroller');  // a dataframe's grid: its text is drawn on a canvas
    if ((!table && !el.textContent.trim()) || el.closest('.js-plotly-plot') || el.closest('.katex-mathml')) continue;
    if (el.closest('[data-testid=stSidebar]')) continue;
    const style = getComputedStyle(el);
    const clips = ['hidden', 'clip', 'auto', 'scroll'].includes(style.overflowX) || style.textOverflow === 'ellipsis';
    if (clips && el.scrollWidth > el.clientWidth + 3) out.push(`text ${keyOf(el)} ${el.tagName}.${el.className}: "${el.textContent.trim().slice(0, 60)}" is ${el.scrollWidth} px in ${el.clientWidth}`);
  }
  return out;
}
"""


def overflowing_text(page: Any) -> list[str]:
    """Every text of the page's main area that does not fit its box, one line each.

    A chart's text (titles, annotations, legends, bar labels, colour-bar ticks) must lie inside the chart and not
    over another text (an axis's own tick labels excepted: plotly lays them out); a page text (markdown, a metric's
    label, a button, a formula, a table's grid) must not be wider than a box that clips it (3 px of slack: KaTeX's
    glyphs overhang their box by 2 px).
    """
    return list(page.evaluate(_OVERFLOW_JS))


# ---------------------------------------------------------------- the knobs (dashboard/knobs)


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def _fields(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """A protobuf message's fields (number, wire type, and a varint's value or a length-delimited field's span)."""
    out, i = [], start
    while i < end:
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
            out.append((number, wire, value, value))
        elif wire == 2:
            length, i = _varint(data, i)
            out.append((number, wire, i, i + length))
            i += length
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            break
    return out


def asks_for_a_run(frame: bytes) -> bool:
    """Whether a message the page sends Streamlit asks for a script run (BackMsg rerun_script, field 11) of its own,
    not the sidebar fragment's timed tick (its ClientState's is_auto_rerun, field 6)."""
    try:
        for number, wire, start, end in _fields(frame, 0, len(frame)):
            if number == 11 and wire == 2:
                return not any(n == 6 and w == 0 and v for n, w, v, _ in _fields(frame, start, end))
    except IndexError:  # not a message of that shape
        return False
    return False


@dataclass
class RunRequests:
    """The script runs the page asks the server for, counted from `start()` on (`watch_run_requests`)."""

    counting: bool = False
    count: int = 0

    def start(self) -> None:
        self.counting, self.count = True, 0

    def frame(self, payload: Any) -> None:
        if self.counting and isinstance(payload, bytes) and asks_for_a_run(payload):
            self.count += 1


def watch_run_requests(page: Any) -> RunRequests:
    """Before the page opens: watch what it sends Streamlit, to count the runs an interaction asks for."""
    requests = RunRequests()
    page.on("websocket", lambda socket: socket.on("framesent", requests.frame))
    return requests


def knobs(page: Any, view: str) -> Any:
    """The knobs' view `view` ("dimensions", "routing") on the page: the component's root, in its shadow root."""
    return page.locator(f".knobs[data-view={view}]")


def knob_values(root: Any) -> dict[str, Any]:
    """The numbers the knobs' view shows now (`root.values`, set as each change is drawn)."""
    return root.evaluate("el => el.values")
