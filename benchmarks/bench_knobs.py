"""How fast the dashboard answers the hand: the knobs (computed in the browser) against the server path.

    python benchmarks/bench_knobs.py                          # 40 of each, the working tree against 8effdf3
    python benchmarks/bench_knobs.py --count 5 --no-baseline  # the working tree alone, briefly
    python benchmarks/bench_knobs.py --checkpoint-em --out knobs.json

Serves the working tree ("new") and the app as of --baseline ("old": before the knobs) with `streamlit run`, on the
shipped MNIST model and test image #0, and drives both from one headless Chromium, the apps taking turns interaction
by interaction: a pose slider moved a step by a key press (slider), an iteration step (step: the knobs' ◀ ▶, and the
Streamlit buttons routing_prev / routing_next, a fragment rerun), a coupling rule (rule, new only), r between 3 and 4
(r: the knobs' buttons, to their redraw and to the end of the rerun they ask for; old: the slider), Routing <->
Capsule dimensions by the sidebar (page switch) and a mouse stroke on the Draw page's canvas (stroke, from pen up;
new: its knobs' redraw too, where the page has one).

Each is timed from a `performance.now()` taken in the page just before the input to the moment it settled, stamped in
the page: the knobs' `data-settled` counting up, or, for the server, the end of a script run begun after the input
once what it shows has changed (the reconstruction, the iteration, the page's first slider, the prediction). Script
runs are counted from the server's messages (new_session), less the sidebar fragment's own ticks (is_auto_rerun).
Prints median, p90, max (ms), the median script runs and websocket KB received per interaction; --out writes every
sample as JSON.
Needs $CAPSNET_DATA_DIR (the MNIST test set), Playwright and Chromium; the old app's Draw page needs the canvas it
was built with (`pip install streamlit-drawable-canvas==0.13.0`; the working tree has its own).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import statistics
import sys
import tempfile
import urllib.parse
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from browser_bench import REPO, VIEWPORT, archive_tree, cpu_summary, launch_chromium, served

BASELINE = "8effdf3"  # the last commit before the knobs
MODELS = ("mnist", "mnist-em")  # the shipped checkpoints the servers see (each with its side files)
QUIET_MS = 750  # after an interaction settled: no script run for this long before the next (a late rerun is counted)
KNOBS_MS = 15_000  # the longest wait for the knobs to settle
RUN_MS = 120_000  # ... for a server run to finish
READY_MS = 300_000  # ... for a page to open (the first load reads the model)
GIVE_UP = 4  # misses in a row before an interaction is dropped for that app

# Installed in every page before its scripts run. Stamps with performance.now():
# - each script run's start and end as the server tells the page (ForwardMsg new_session, script_finished), and each
#   change of stApp's data-test-script-state (React may commit a short run's "running" and "notRunning" at once, so
#   runs are counted from the messages);
# - each rerun request the page sends, the sidebar fragment's ticks (flagged is_auto_rerun) apart;
# - each change of data-settled inside a shadow root (the knobs), by an observer put on every shadow root made;
# - the last change in stMain's light DOM;
# and checks the goal of the interaction under way (kb.start) at each of them.
INIT_JS = r"""
(() => {
  if (window.__kb) return;
  const now = () => performance.now();
  const BUSY = new Set(['running', 'rerunRequested', 'stopRequested']);
  const kb = (window.__kb = {runs: 0, finished: 0, requests: 0, ticks: 0, settles: 0, bytes: 0, lastRunEvent: 0,
                             changedAt: 0, upAt: null, goal: null, roots: []});
  kb.hasKnobs = (view) => kb.roots.some((root) => root.host.isConnected
                                              && root.querySelector(view ? `.knobs[data-view="${view}"]` : '.knobs'));
  kb.scriptState = () => {
    const app = document.querySelector('[data-testid=stApp]');
    return app ? app.getAttribute('data-test-script-state') : null;
  };
  kb.busy = () => BUSY.has(kb.scriptState()) || kb.finished < kb.runs;
  kb.check = () => {
    const g = kb.goal;
    if (!g || g.doneAt !== null) return;
    const t = now();
    if (g.watch && g.watchAt === null) {
      let value = null;
      try { value = g.watch(); } catch (error) { value = null; }
      if (value && value !== g.value0) g.watchAt = t;
    }
    const idle = !kb.busy();
    const watched = !g.watch || g.watchAt !== null;
    if (g.run && g.serverAt === null && idle && kb.runs > g.runs0 && watched) g.serverAt = t;
    // settle 'present': the knobs' redraw if the page has knobs (the Draw page's, once it reads a drawing)
    const settled = !g.settle || g.settleAt !== null || (g.settle === 'present' && !kb.hasKnobs(g.view));
    if (settled && (!g.run || g.serverAt !== null) && watched && (idle || !g.run)) g.doneAt = t;
  };
  kb.start = (spec, watch) => {
    const g = {t0: now(), runs0: kb.runs, ticks0: kb.ticks, requests0: kb.requests, settles0: kb.settles,
               bytes0: kb.bytes, settle: spec.settle ?? false, view: spec.view ?? null, run: !!spec.run,
               watch: watch ?? null, value0: null, settleAt: null, serverAt: null, watchAt: null, doneAt: null};
    if (g.watch) { try { g.value0 = g.watch(); } catch (error) { g.value0 = null; } }
    kb.upAt = null;
    kb.goal = g;
    return g.t0;
  };
  kb.result = () => {
    const g = kb.goal;
    return {t0: g.t0, settleAt: g.settleAt, serverAt: g.serverAt, watchAt: g.watchAt, doneAt: g.doneAt,
            changedAt: kb.changedAt > g.t0 ? kb.changedAt : null, upAt: kb.upAt,
            runs: kb.runs - g.runs0, ticks: kb.ticks - g.ticks0, requests: kb.requests - g.requests0,
            settles: kb.settles - g.settles0, bytes: kb.bytes - g.bytes0, state: kb.scriptState()};
  };
  kb.quiet = (ms) => {
    const g = kb.goal;
    return !!g && g.doneAt !== null && !kb.busy() && now() - Math.max(kb.lastRunEvent, g.doneAt) >= ms;
  };
  kb.idle = (ms) => !kb.busy() && kb.scriptState() !== null && now() - kb.lastRunEvent >= ms;

  new MutationObserver(() => {
    kb.lastRunEvent = now();
    kb.check();
  }).observe(document, {subtree: true, attributes: true, attributeFilter: ['data-test-script-state']});
  new MutationObserver((records) => {
    for (const record of records) {
      const node = record.target.nodeType === 1 ? record.target : record.target.parentElement;
      if (node && node.closest('[data-testid=stMain]')) { kb.changedAt = now(); break; }
    }
    kb.check();
  }).observe(document, {subtree: true, childList: true, attributes: true, characterData: true});

  const attachShadow = Element.prototype.attachShadow;
  Element.prototype.attachShadow = function (init) {
    const root = attachShadow.call(this, init);
    kb.roots.push(root);  // a few per page visit: kept, and looked through only for knobs still in the page
    new MutationObserver((records) => {
      const g = kb.goal;
      for (const record of records) {
        kb.settles++;
        const view = record.target.dataset ? record.target.dataset.view : undefined;
        if (g && g.settleAt === null && (g.view === null || g.view === view)) g.settleAt = now();
      }
      kb.check();
    }).observe(root, {subtree: true, attributes: true, attributeFilter: ['data-settled']});
    return root;
  };

  // a rerun request (BackMsg field 11, a ClientState) whose is_auto_rerun (field 6) is set: a run_every tick
  const varint = (b, i) => {
    let v = 0, s = 1, x;
    do { x = b[i++]; v += (x & 0x7f) * s; s *= 128; } while (x & 0x80);
    return [v, i];
  };
  const fields = (b, i, end, each) => {
    while (i < end) {
      let key, n;
      [key, i] = varint(b, i);
      const wire = key & 7;
      if (wire === 0) { [n, i] = varint(b, i); each(key >>> 3, wire, n); }
      else if (wire === 2) { [n, i] = varint(b, i); each(key >>> 3, wire, i, i + n); i += n; }
      else if (wire === 1) i += 8;
      else if (wire === 5) i += 4;
      else return;
    }
  };
  const bytesOf = (data) => data instanceof ArrayBuffer ? new Uint8Array(data)
    : ArrayBuffer.isView(data) ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength) : null;
  const send = WebSocket.prototype.send;
  WebSocket.prototype.send = function (data) {
    try {  // BackMsg: rerun_script (11) is a ClientState, whose is_auto_rerun (6) marks a run_every tick
      const b = bytesOf(data);
      if (b) fields(b, 0, b.length, (no, wire, a, z) => {
        if (no !== 11 || wire !== 2) return;
        let auto = false;
        fields(b, a, z, (no2, wire2, v) => { if (no2 === 6 && wire2 === 0 && v) auto = true; });
        if (auto) kb.ticks++; else kb.requests++;
      });
    } catch (error) { /* not a message to read */ }
    return send.call(this, data);
  };
  const received = (event) => {
    try {  // ForwardMsg: new_session (4) opens a script run, script_finished (6) ends it
      const b = bytesOf(event.data);
      if (!b) return;
      kb.bytes += b.length;
      let changed = false;
      fields(b, 0, b.length, (no, wire) => {
        if (no === 4 && wire === 2) { kb.runs++; changed = true; }
        if (no === 6 && wire === 0) { kb.finished++; changed = true; }
      });
      if (changed) { kb.lastRunEvent = now(); kb.check(); }
    } catch (error) { /* not a message to read */ }
  };
  const Native = window.WebSocket;
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      this.addEventListener('message', received);
    }
  };
  window.addEventListener('pointerup', () => { if (kb.upAt === null) kb.upAt = now(); }, true);
})();
"""

CURRENT = ':not([data-stale="true"]):not([data-retained="true"])'
STEP_LABEL = (
    f"() => document.querySelector('.st-key-routing_step{CURRENT} [data-testid=stMarkdownContainer]')?.innerText"
)
RECONSTRUCTION = """() => [...document.querySelectorAll('[data-testid=stMain] [data-testid=stImage]')]
  .filter(e => !e.closest('[data-stale=true]') && e.innerText.includes('edited reconstruction'))
  .map(e => e.querySelector('img')?.src).join('|')"""
DRAW_RESULT = """() => [...document.querySelectorAll(
  '[data-testid=stMain] [data-testid=stImage] img, [data-testid=stMain] [data-testid=stMetricValue]')]
  .filter(e => !e.closest('[data-stale=true]')).map(e => e.src || e.textContent).join('|')"""


def present(selector: str) -> str:
    """A watch: "yes" once `selector` is in the page and laid out."""
    found = f"document.querySelector({json.dumps(selector)})"
    return f"() => {{ const e = {found}; return e && e.getClientRects().length ? 'yes' : null; }}"


PAGES = {  # sidebar title -> (the knobs' view, the old app's first slider: react-aria's visually hidden range input)
    "Capsule dimensions": ("dimensions", f".st-key-dim_0{CURRENT} input[type=range]"),
    "Routing": ("routing", f".st-key-routing_iterations{CURRENT} input[type=range]"),
}
STROKES = [  # fractions of the canvas; the canvas is cleared before each group, so every stroke changes the drawing
    [(0.5, 0.15), (0.5, 0.85)],
    [(0.2, 0.5), (0.8, 0.5)],
    [(0.25, 0.2), (0.75, 0.8)],
    [(0.75, 0.2), (0.25, 0.8)],
]
KINDS = ["slider", "step", "rule", "r", "page switch", "stroke"]


class Missed(Exception):
    """An interaction that did not settle in time: the rows it would have given, and what the page had seen."""

    def __init__(self, labels: list[str], message: str) -> None:
        super().__init__(message)
        self.labels = labels


# ---------------------------------------------------------------- one app in one browser context


class Tab:
    def __init__(self, browser, name: str, url: str, new: bool) -> None:
        self.name, self.url, self.new = name, url, new
        self.context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
        self.context.set_default_timeout(60_000)
        self.context.add_init_script(INIT_JS)
        self.page = self.context.new_page()
        self.strokes = 0
        self.draw_knobs = False  # whether its Draw page has shown knobs (then every stroke waits for their redraw)

    # ---- waits (all bounded)

    def wait_idle(self, quiet_ms: int = 1000, timeout_ms: int = RUN_MS) -> None:
        self.page.wait_for_function("(q) => window.__kb && window.__kb.idle(q)", arg=quiet_ms, polling=100,
                                    timeout=timeout_ms)  # fmt: skip

    def open(self, path: str) -> None:
        self.page.goto(self.url + path, wait_until="domcontentloaded", timeout=READY_MS)

    def ready(self, title: str, timeout_ms: int = READY_MS) -> None:
        """Until `title`'s page is shown and no script has run for a second."""
        self.page.get_by_test_id("stSidebarNav").wait_for(timeout=timeout_ms)
        if title == "Draw":
            marker = self.page.get_by_test_id("stMain").get_by_role("radio", name="Draw")
        elif self.new:
            marker = self.page.locator(f'.knobs[data-view="{PAGES[title][0]}"][data-settled]')
        else:
            marker = self.page.locator(PAGES[title][1])
        marker.first.wait_for(timeout=timeout_ms)
        self.wait_idle(timeout_ms=timeout_ms)

    def where(self) -> str:
        """The page shown, by its URL's path."""
        path = urllib.parse.urlparse(self.page.url).path.rstrip("/")
        return {"/routing": "Routing", "/dimensions": "Capsule dimensions"}.get(path[path.rfind("/") :], "Draw")

    def go(self, title: str) -> None:
        """To `title`'s page by the sidebar's link (untimed)."""
        if self.where() != title:
            self.page.get_by_test_id("stSidebarNav").get_by_role("link", name=title, exact=True).click()
            self.ready(title)
        if title == "Draw":
            radio = self.page.get_by_test_id("stMain").get_by_role("radio", name="Draw")
            if not radio.is_checked():
                radio.click()
                self.page.get_by_text("Draw a digit on the canvas").first.wait_for(timeout=RUN_MS)
                self.wait_idle()

    # ---- one timed interaction

    def timed(self, labels: list[str], spec: dict, watch: str | None, act: Callable[[], None], timeout_ms: int) -> dict:
        """Start the goal in the page, act, wait until it is reached and then until no run for QUIET_MS."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

        page = self.page
        page.evaluate(f"(spec) => window.__kb.start(spec, {watch or 'null'})", spec)
        act()
        try:
            page.wait_for_function("() => window.__kb.goal.doneAt !== null", polling=20, timeout=timeout_ms)
        except PlaywrightTimeoutError:
            seen = page.evaluate("() => window.__kb.result()")
            try:
                self.wait_idle(timeout_ms=RUN_MS)
            except PlaywrightTimeoutError:
                pass
            raise Missed(labels, f"{', '.join(labels)}: not settled in {timeout_ms / 1000:.0f} s: {seen}") from None
        try:
            page.wait_for_function("(q) => window.__kb.quiet(q)", arg=QUIET_MS, polling=50, timeout=RUN_MS)
            quiet = True
        except PlaywrightTimeoutError:
            quiet = False
        result = page.evaluate("() => window.__kb.result()")
        result["quiet"] = quiet
        return result

    def box_click(self, locator) -> Callable[[], None]:
        """A click at `locator`'s centre by the mouse alone (no actionability waits inside the timed span)."""
        locator.scroll_into_view_if_needed()
        box = locator.bounding_box()
        if box is None:
            raise Missed([self.name], f"{self.name}: nothing to click at {locator}")
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        return lambda: self.page.mouse.click(x, y)

    def key(self, locator, key: str) -> Callable[[], None]:
        locator.scroll_into_view_if_needed()
        locator.focus()
        return lambda: self.page.keyboard.press(key)


def ms(result: dict, at: str, since: str = "t0") -> float | None:
    return None if result.get(at) is None or result.get(since) is None else result[at] - result[since]


def sample(result: dict, at: str, since: str = "t0") -> dict:
    """One row's sample: the time to `at`, the runs caused (ticks taken off), the last change seen in stMain."""
    return {
        "ms": ms(result, at, since),
        "settle_ms": ms(result, "settleAt", since),  # the knobs' first redraw
        "server_ms": ms(result, "serverAt", since),  # the end of the first run after the input (with its change shown)
        "runs": max(0, result["runs"] - result["ticks"]),
        "ticks": result["ticks"],
        "requests": result["requests"],
        "settles": result["settles"],
        "bytes": result["bytes"],  # received on the websocket, to the end of the quiet spell
        "last_change_ms": ms(result, "changedAt", since),
        "quiet": result["quiet"],
    }


# ---------------------------------------------------------------- the interactions (each returns {row: sample})


def slider(tab: Tab, i: int) -> dict[str, dict]:
    key = "ArrowRight" if i % 2 == 0 else "ArrowLeft"
    if tab.new:
        act = tab.key(tab.page.locator('.knobs input[type=range][data-dim="0"]'), key)
        result = tab.timed([tab.name], {"settle": True, "view": "dimensions"}, None, act, KNOBS_MS)
        return {tab.name: sample(result, "settleAt")}
    act = tab.key(tab.page.locator(PAGES["Capsule dimensions"][1]), key)
    return {tab.name: sample(tab.timed([tab.name], {"run": True}, RECONSTRUCTION, act, RUN_MS), "doneAt")}


def _direction(back, forth, i: int):
    if forth.is_disabled():
        return back
    if back.is_disabled():
        return forth
    return back if i % 2 == 0 else forth


def step(tab: Tab, i: int) -> dict[str, dict]:
    page, out = tab.page, {}
    if tab.new:
        back, forth = (page.locator(f'.knobs button[aria-label="{w} iteration"]') for w in ("previous", "next"))
        act = tab.box_click(_direction(back, forth, i))
        label = f"{tab.name} (knobs)"
        out[label] = sample(tab.timed([label], {"settle": True, "view": "routing"}, None, act, KNOBS_MS), "settleAt")
    back, forth = (page.locator(f".st-key-routing_{w}{CURRENT} button") for w in ("prev", "next"))
    act = tab.box_click(_direction(back, forth, i))
    label = f"{tab.name} (server path)" if tab.new else tab.name
    out[label] = sample(tab.timed([label], {"run": True}, STEP_LABEL, act, RUN_MS), "doneAt")
    return out


def rule(tab: Tab, i: int) -> dict[str, dict]:
    buttons = tab.page.locator('.knobs .segmented[aria-label="couplings"] button')
    on = int(buttons.evaluate_all("bs => bs.findIndex(b => b.getAttribute('aria-checked') === 'true')"))
    act = tab.box_click(buttons.nth((on + 1) % 3))
    return {
        tab.name: sample(tab.timed([tab.name], {"settle": True, "view": "routing"}, None, act, KNOBS_MS), "settleAt")
    }


def iterations(tab: Tab, i: int) -> dict[str, dict]:
    if tab.new:
        buttons = tab.page.locator('.knobs .segmented[aria-label="routing iterations"] button')
        on = int(buttons.evaluate_all("bs => bs.findIndex(b => b.getAttribute('aria-checked') === 'true')"))
        act = tab.box_click(buttons.nth(3 if on + 1 == 3 else 2))  # r 3 -> 4, anything else -> 3
        labels = [f"{tab.name} (knobs)", f"{tab.name} (server rerun)"]
        result = tab.timed(labels, {"settle": True, "view": "routing", "run": True}, STEP_LABEL, act, RUN_MS)
        return {labels[0]: sample(result, "settleAt"), labels[1]: sample(result, "serverAt")}
    thumb = tab.page.locator(PAGES["Routing"][1])
    r = int(float(thumb.input_value()))
    act = tab.key(thumb, "ArrowRight" if r <= 3 else "ArrowLeft")
    return {tab.name: sample(tab.timed([tab.name], {"run": True}, STEP_LABEL, act, RUN_MS), "doneAt")}


def switch(tab: Tab, i: int) -> dict[str, dict]:
    target = "Capsule dimensions" if tab.where() == "Routing" else "Routing"
    act = tab.box_click(tab.page.get_by_test_id("stSidebarNav").get_by_role("link", name=target, exact=True))
    label = f"{tab.name} -> {target}"
    if tab.new:
        result = tab.timed([label], {"settle": True, "view": PAGES[target][0], "run": True}, None, act, RUN_MS)
    else:
        result = tab.timed([label], {"run": True}, present(PAGES[target][1]), act, RUN_MS)
    return {label: sample(result, "doneAt")}


def canvas_box(tab: Tab) -> dict[str, float]:
    """The drawing canvas (280x280: the knobs' own, or the old app's Fabric top canvas) in page coordinates."""
    canvases = tab.page.get_by_test_id("stMain").locator("canvas")
    canvases.last.wait_for(state="visible", timeout=RUN_MS)
    for index in reversed(range(canvases.count())):
        box = canvases.nth(index).bounding_box()
        if box and abs(box["width"] - 280) < 2 and abs(box["height"] - 280) < 2:
            return box
    raise Missed([tab.name], f"{tab.name}: no 280x280 drawing canvas")


def stroke(tab: Tab, i: int) -> dict[str, dict]:
    page = tab.page
    if tab.strokes % len(STROKES) == 0 and tab.strokes:
        if tab.new:  # the knobs' canvas has its own Clear
            page.get_by_test_id("stMain").get_by_role("button", name="Clear", exact=True).click()
        else:
            page.locator(f".st-key-clear_canvas{CURRENT} button").click()
        page.get_by_text("Draw a digit on the canvas").first.wait_for(timeout=RUN_MS)
        tab.wait_idle()
    points = STROKES[tab.strokes % len(STROKES)]
    tab.strokes += 1
    box = canvas_box(tab)
    at = [(box["x"] + x * box["width"], box["y"] + y * box["height"]) for x, y in points]

    def act() -> None:
        page.mouse.move(*at[0])
        page.mouse.down()
        for point in at[1:]:
            page.mouse.move(*point, steps=20)
        page.mouse.up()

    # the knobs' redraw too, where the page has knobs: after a Clear they mount only once the stroke is read
    settle = True if tab.draw_knobs else "present"
    result = tab.timed([tab.name], {"run": True, "settle": settle, "view": "dimensions"}, DRAW_RESULT, act, RUN_MS)
    tab.draw_knobs = tab.draw_knobs or tab.page.locator('.knobs[data-view="dimensions"]').count() > 0
    return {tab.name: sample(result, "doneAt", since="upAt")}


INTERACTIONS: dict[str, tuple[str, Callable[[Tab, int], dict[str, dict]], bool]] = {
    # kind: (the page it runs on, the function, whether the old app takes part)
    "slider": ("Capsule dimensions", slider, True),
    "page switch": ("Capsule dimensions", switch, True),
    "step": ("Routing", step, True),
    "rule": ("Routing", rule, False),
    "r": ("Routing", iterations, True),
    "stroke": ("Draw", stroke, True),
}


# ---------------------------------------------------------------- the run


def run_kind(kind: str, tabs: list[Tab], count: int, warmup: int, rows: dict, problems: list[str]) -> None:
    """`count` of `kind` (after `warmup` untimed) in each tab that takes part, the tabs taking turns."""
    from playwright.sync_api import Error as PlaywrightError

    title, function, with_old = INTERACTIONS[kind]
    tabs = [t for t in tabs if (t.new or with_old) and (kind in ("slider", "step") or not t.name.endswith("EM"))]
    misses = dict.fromkeys((t.name for t in tabs), 0)
    for tab in tabs:
        try:
            tab.go(title)
        except PlaywrightError as error:
            problems.append(f"{kind}: {tab.name} never reached {title}: {str(error)[:300]}")
            misses[tab.name] = GIVE_UP
    for i in range(warmup + count):
        for tab in tabs:
            if misses[tab.name] >= GIVE_UP:
                continue
            missed: Missed | None = None
            try:
                got = function(tab, i)
                misses[tab.name] = 0
            except PlaywrightError as error:  # a control that is not there (or not in time)
                missed = Missed([tab.name], f"{tab.name}: {str(error)[:300]}")
            except Missed as error:
                missed = error
            if missed is not None:
                misses[tab.name] += 1
                problems.append(f"{kind}{' (warm-up)' if i < warmup else ''}: {missed}")
                if misses[tab.name] >= GIVE_UP:
                    problems.append(f"{kind}: {tab.name} dropped after {GIVE_UP} misses in a row")
                for label in missed.labels if i >= warmup else ():
                    rows.setdefault(kind, {}).setdefault(label, []).append({"ms": None, "missed": str(missed)[:400]})
                continue
            if i < warmup:
                continue
            for label, one in got.items():
                rows.setdefault(kind, {}).setdefault(label, []).append(one)
                if not one["quiet"]:
                    problems.append(f"{kind}: {label}: script runs went on for {RUN_MS / 1000:.0f} s after it settled")
        print(f"  {kind}: {i + 1 - warmup if i >= warmup else 0}/{count}", end="\r", file=sys.stderr, flush=True)
    if kind == "page switch":  # back where the next interaction expects each tab
        for tab in tabs:
            try:
                tab.go("Routing")
            except PlaywrightError as error:
                problems.append(f"{kind}: {tab.name} never got back to Routing: {str(error)[:300]}")
    print(file=sys.stderr)


def summary(samples: list[dict]) -> dict[str, Any]:
    times = sorted(s["ms"] for s in samples if s.get("ms") is not None)
    runs = [s["runs"] for s in samples if s.get("ms") is not None]
    out: dict[str, Any] = {"n": len(times), "missed": sum(1 for s in samples if s.get("ms") is None)}
    if times:
        p90 = statistics.quantiles(times, n=10, method="inclusive")[8] if len(times) > 1 else times[0]
        received = [s["bytes"] for s in samples if s.get("ms") is not None]
        out.update(
            median_ms=statistics.median(times),
            p90_ms=p90,
            max_ms=times[-1],
            runs_median=statistics.median(runs),
            received_kb_median=statistics.median(received) / 1024,
        )
        last = [s["last_change_ms"] for s in samples if s.get("last_change_ms") is not None]
        out["last_change_median_ms"] = statistics.median(last) if last else None
    return out


def table(results: dict[str, dict[str, dict]]) -> str:
    head = (
        "| interaction | app | n | median ms | p90 ms | max ms | script runs (median) | received KB (median) | missed |"
    )
    lines = [head, "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for kind in KINDS:
        for label, s in results.get(kind, {}).items():
            if s["n"]:
                lines.append(
                    f"| {kind} | {label} | {s['n']} | {s['median_ms']:,.1f} | {s['p90_ms']:,.1f} | {s['max_ms']:,.1f} "
                    f"| {s['runs_median']:g} | {s['received_kb_median']:,.0f} | {s['missed']} |"
                )
            else:
                lines.append(f"| {kind} | {label} | 0 | - | - | - | - | - | {s['missed']} |")
    return "\n".join(lines)


def checkpoints_folder(folder: Path) -> Path:
    """The shipped MNIST and EM models with their side files (metrics, routing and evaluation summaries)."""
    folder.mkdir(parents=True)
    for name in MODELS:
        for source in (REPO / "checkpoints").glob(f"{name}.*"):
            if source.name.split(".")[0] == name and source.suffix in (".safetensors", ".json", ".jsonl"):
                (folder / source.name).write_bytes(source.read_bytes())
    return folder


def app_env(root: Path, name: str, checkpoints: Path, tree: Path) -> dict[str, str]:
    runs = root / f"runs-{name}"
    runs.mkdir()
    return dict(
        os.environ,
        PYTHONPATH=str(tree),  # ahead of the editable install: `capsnet` and `dashboard` from this tree
        CAPSNET_CHECKPOINTS_DIR=str(checkpoints),
        CAPSNET_RUNS_DIR=str(runs),
        PYTHONUNBUFFERED="1",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=40, help="timed interactions of each kind per app (default 40)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed interactions of each kind first (default 2)")
    parser.add_argument("--baseline", default=BASELINE, help=f"the old app's commit (default {BASELINE})")
    parser.add_argument("--no-baseline", action="store_true", help="the new app only")
    parser.add_argument("--checkpoint-em", action="store_true", help="also slider and step on the new app's EM model")
    parser.add_argument("--only", nargs="+", choices=KINDS, default=KINDS, help="these interactions only")
    parser.add_argument("--out", type=Path, help="write the summary and every sample here (JSON)")
    args = parser.parse_args(argv)
    if not os.environ.get("CAPSNET_DATA_DIR"):
        print("warning: CAPSNET_DATA_DIR is not set; the test images may be missing", file=sys.stderr)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the servers, the tree and Chromium go too

    import streamlit
    from playwright.sync_api import sync_playwright

    started = datetime.datetime.now().astimezone()
    cpu = cpu_summary()  # the load average before the run
    rows: dict[str, dict[str, list[dict]]] = {}
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-knobs-") as tmp, ExitStack() as stack:
        root = Path(tmp)
        checkpoints = checkpoints_folder(root / "checkpoints")
        trees = {"new": REPO}
        if not args.no_baseline:
            trees["old"] = archive_tree(args.baseline, root / "old", ("capsnet", "dashboard", ".streamlit"))
        urls = {
            name: stack.enter_context(served(tree, app_env(root, name, checkpoints, tree), root / f"{name}.log"))
            for name, tree in trees.items()
        }
        playwright = stack.enter_context(sync_playwright())
        browser = launch_chromium(playwright)
        stack.callback(browser.close)
        chromium = browser.version
        tabs = [Tab(browser, name, url, new=name == "new") for name, url in urls.items()]
        if args.checkpoint_em:
            tabs.insert(1, Tab(browser, "new EM", urls["new"], new=True))
        for tab in tabs:  # all load at once; the first visit reads the model
            tab.open("/dimensions?checkpoint=mnist-em" if tab.name.endswith("EM") else "/dimensions")
        for tab in tabs:
            tab.ready("Capsule dimensions")
        print(f"apps: {', '.join(t.name for t in tabs)}; {args.count} of each interaction", file=sys.stderr)
        for kind in INTERACTIONS:
            if kind in args.only:
                run_kind(kind, tabs, args.count, args.warmup, rows, problems)

    results = {kind: {label: summary(samples) for label, samples in by.items()} for kind, by in rows.items()}
    machine = {
        **cpu,
        "chromium": chromium,
        "streamlit": streamlit.__version__,
        "python": sys.version.split()[0],
        "date": started.isoformat(timespec="seconds"),
    }
    old = "no baseline" if args.no_baseline else f"old = {args.baseline}"
    print(
        f"Machine: {machine['model']}, {machine['cores']} cores / {machine['logical_cpus']} logical CPUs, "
        f"avx512f {machine['avx512f']}, "
        f"avx512_bf16 {machine['avx512_bf16']}, amx {','.join(machine['amx']) or 'none'}; Chromium {chromium}, "
        f"streamlit {machine['streamlit']}; {machine['date']}"
    )
    print(f"new = the working tree, {old}; MNIST model, test image #0; ms from the input (stroke: from pen up)\n")
    print(table(results))
    if problems:
        print("\nProblems seen:")
        for line in problems:
            print(f"- {line}")
    if args.out:
        settings = {**{k: v for k, v in vars(args).items() if k != "out"}, "quiet_ms": QUIET_MS}
        report = {"machine": machine, "settings": settings, "results": results, "samples": rows, "problems": problems}
        args.out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
