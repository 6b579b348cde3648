"""What the browser benchmarks share: a tree of the app as of a commit, `streamlit run` of a tree, Chromium.

Imported by bench_knobs.py (run from the repository root or from benchmarks/: Python puts
a script's own folder first on the path). Every wait here is bounded.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHROMIUM_ARGS = [  # as the browser tests run it
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
VIEWPORT = {"width": 1400, "height": 1000}


def archive_tree(commit: str, target: Path, paths: Sequence[str] = ("capsnet", "dashboard")) -> Path:
    """`paths` as they were at `commit`, extracted into `target` (`git archive`: the repository is not touched)."""
    target.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", commit, *paths], cwd=REPO, capture_output=True, check=True, timeout=120)
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True, timeout=120)
    return target


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_group(process: subprocess.Popen) -> None:
    """SIGTERM the process group `process` leads, then SIGKILL if it lingers."""
    for sig, wait_s in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
        if process.poll() is not None:
            return
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def served(tree: Path, env: dict[str, str], log: Path, startup_s: float = 180.0) -> Iterator[str]:
    """`streamlit run` of `tree`'s app from `tree` (its .streamlit/config.toml applies, if it has one) on a free port,
    in its own process group, stopped on exit; yields its URL once /_stcore/health answers."""
    port = free_port()
    command = [
        sys.executable, "-m", "streamlit", "run", str(tree / "dashboard" / "app.py"),
        "--server.port", str(port), "--server.address", "127.0.0.1", "--server.headless", "true",
        "--server.fileWatcherType", "none", "--server.runOnSave", "false", "--browser.gatherUsageStats", "false",
    ]  # fmt: skip
    with open(log, "w", encoding="utf-8") as sink:
        process = subprocess.Popen(
            command, cwd=tree, env=env, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_s
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"streamlit did not start:\n{log.read_text(errors='replace')[-2000:]}")
            try:
                with urllib.request.urlopen(url + "/_stcore/health", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        yield url
    finally:
        stop_group(process)


def chromium_path() -> str | None:
    candidates = ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser"))
    return next((c for c in candidates if c and Path(c).is_file()), None)


def launch_chromium(playwright):
    """Headless Chromium with the browser tests' flags."""
    chromium = chromium_path()
    if chromium is None:
        raise RuntimeError("no Chromium at /usr/bin/chromium or on PATH")
    return playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, timeout=60_000)


def cpu_summary() -> dict[str, object]:
    """The CPU as lscpu names it, whether it has AVX-512 (F, BF16) and AMX, its cores and logical CPUs, the load."""
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        lscpu = ""
    fields = dict(line.split(":", 1) for line in lscpu.splitlines() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    model = fields.get("Model name") or platform.processor() or "?"
    try:
        cores: int | None = int(fields["Core(s) per socket"]) * int(fields["Socket(s)"])
    except (KeyError, ValueError):
        cores = None
    try:
        flags = set(
            next(
                line.split(":", 1)[1].split()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("flags")
            )
        )
    except (OSError, StopIteration):
        flags = set()
    return {
        "model": model,
        "avx512f": "avx512f" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
        "amx": sorted(f for f in flags if re.fullmatch(r"amx_\w+", f)),
        "cores": cores,
        "logical_cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
    }
