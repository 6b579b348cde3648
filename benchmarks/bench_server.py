"""The dashboard server's own CPU: Streamlit's garbage collection after every script run, with and without the freeze.

    python benchmarks/bench_server.py                 # the shipped models, 30 s idle, 3 rounds of page visits
    python benchmarks/bench_server.py --idle-s 60 --rounds 5

Streamlit runs `gc.collect(2)` after every script run (`runner.postScriptGC`, on by default). With torch, plotly and
the models loaded, a collection walks every Python object the server holds, after every click and every tick of the
sidebar's progress panel (a fragment rerun every 5 s while a page is open). `dashboard/app.py` moves what the
imports built to the collector's permanent generation once per process (`gc.freeze` in
`dashboard.state.freeze_imports`), so each collection walks only
what later runs made. This script serves the app three times, opens each in one headless Chromium (the browser
tests' flags) and reads each server process's CPU time from /proc:

- as shipped: the freeze, then Streamlit's collection after every run;
- without the freeze (a `sitecustomize` that turns `gc.freeze` into a no-op in that server);
- no collection after runs at all (`--runner.postScriptGC false`, the floor: not shipped, since it changes when
  Streamlit's garbage is freed rather than how much of the heap each collection walks).

Measured per server:

- idle: a page left open (the Start here page), CPU seconds per minute of the server;
- visits: the same pages opened in turn in every app (Draw on test image #3, Routing, Architecture, Evaluate,
  Start here), alternating app by app so that load on the machine hits all alike; the server's CPU per visit, and
  the time from the request until the page has been idle (no script run, spinner or stale element) for 800 ms.

Needs Playwright, Chromium (/usr/bin/chromium) and $CAPSNET_DATA_DIR (the MNIST test set). Linux only (/proc).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip
PAGES = ("/?test=3", "/routing?test=3", "/architecture?test=3", "/evaluate", "/start")
IDLE_JS = """
(quietMs) => {
  const busy = document.querySelector('[data-testid=stStatusWidget]')
    || document.querySelector('[data-testid=stSkeleton]')
    || document.querySelector('[data-stale=true]')
    || document.querySelector('[data-testid=stSpinner]');
  const now = performance.now();
  if (busy) { window.__benchIdleSince = undefined; return false; }
  if (window.__benchIdleSince === undefined) window.__benchIdleSince = now;
  return now - window.__benchIdleSince >= quietMs;
}
"""
SHIPPED, UNFROZEN, NO_GC = "as shipped (gc.freeze once)", "without the freeze", "postScriptGC = false"
# name: (extra server options, whether gc.freeze works in that server)
VARIANTS = {SHIPPED: ([], True), UNFROZEN: ([], False), NO_GC: (["--runner.postScriptGC", "false"], True)}
NO_FREEZE = "import gc\n\ngc.freeze = lambda: None  # bench_server.py: this server keeps every object in the collector's reach\n"


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def served(extra: list[str], runs: Path, freeze: bool = True) -> Iterator[tuple[str, subprocess.Popen]]:
    """`streamlit run dashboard/app.py` with `extra` options on a free port, the shipped checkpoints, its own runs.

    `freeze=False` puts a `sitecustomize` first on the server's path that makes `gc.freeze` do nothing.
    """
    port = free_port()
    env = dict(os.environ, CAPSNET_RUNS_DIR=str(runs))
    if not freeze:
        site = runs / "site"
        site.mkdir(parents=True, exist_ok=True)
        (site / "sitecustomize.py").write_text(NO_FREEZE)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "streamlit", "run", str(REPO / "dashboard" / "app.py"),
               "--server.port", str(port), "--server.address", "127.0.0.1", "--server.headless", "true",
               "--server.fileWatcherType", "none", *extra]  # fmt: skip
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(url + "/_stcore/health", timeout=5):
                    break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError(f"streamlit did not start ({' '.join(extra) or 'as configured'})") from None
                time.sleep(0.5)
        yield url, process
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


def visit(page, url: str) -> float:
    """Open `url` and wait until the page has been idle for 800 ms; the seconds it took."""
    start = time.perf_counter()
    page.goto(url, timeout=120_000)
    page.get_by_test_id("stSidebarNav").wait_for(timeout=120_000)
    page.wait_for_function(IDLE_JS, arg=800, polling=100, timeout=120_000)
    return time.perf_counter() - start - 0.8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle-s", type=float, default=30.0, help="seconds a page stays open, untouched")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of page visits (each visits every page once)")
    args = parser.parse_args()
    import streamlit
    import torch
    from playwright.sync_api import sync_playwright

    from capsnet.device import describe_device

    print(f"{describe_device(torch.device('cpu'))}, {os.cpu_count()} cores; python {sys.version.split()[0]}, "
          f"streamlit {streamlit.__version__}")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        with ExitStack() as servers:
            apps = {
                name: servers.enter_context(served(extra, Path(tmp, str(number)), freeze))
                for number, (name, (extra, freeze)) in enumerate(VARIANTS.items())
            }
            pages = {name: browser.new_page(viewport={"width": 1400, "height": 1000}) for name in VARIANTS}
            for name, (url, _) in apps.items():  # warm-up: models loaded, caches filled
                for path in PAGES:
                    visit(pages[name], url + path)
            visits = {name: ([], []) for name in VARIANTS}
            for _ in range(args.rounds):
                for path in PAGES:
                    for name, (url, process) in apps.items():
                        before = cpu_s(process.pid)
                        visits[name][0].append(visit(pages[name], url + path))
                        visits[name][1].append(cpu_s(process.pid) - before)
            idle = {}
            before = {name: cpu_s(process.pid) for name, (_, process) in apps.items()}
            time.sleep(args.idle_s)  # both pages open on Start here, untouched
            for name, (_, process) in apps.items():
                idle[name] = (cpu_s(process.pid) - before[name]) * 60 / args.idle_s
        browser.close()
    print("\n| server | idle: CPU s per minute | CPU per page visit | page visit (to idle) |")
    print("|---|---|---|---|")
    for name in VARIANTS:
        times, cpus = visits[name]
        print(f"| {name} | {idle[name]:.2f} s | {statistics.median(cpus):.2f} s | {statistics.median(times):.2f} s |")
    ratio = lambda key: statistics.median(visits[UNFROZEN][key]) / max(statistics.median(visits[SHIPPED][key]), 1e-9)  # noqa: E731
    print(f"\nas shipped against without the freeze: idle CPU {idle[UNFROZEN] / max(idle[SHIPPED], 1e-9):.1f}x less, "
          f"CPU per visit {ratio(1):.2f}x less, visit time {ratio(0):.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
