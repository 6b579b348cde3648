"""Shared fixtures: the real datasets, seeding, a tiny trained checkpoint, and the browser.

The browser tests share one headless Chromium for the session (Playwright's sync API allows one instance per
process) and take a fresh tab per test (`page`); each module serves its own app (`browser_support.streamlit_app`).
Without Chromium they fail in CI and skip elsewhere.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from browser_support import CHROMIUM_ARGS, EXPECT_MS, PAGE_LOAD_MS, RERUN_MS, VIEWPORT, Screenshots, find_chromium

from capsnet.checkpoints.measurements import CACHE_ENV

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - the dev extra installs it
    sync_playwright = None  # type: ignore[assignment]

REPO = Path(__file__).resolve().parents[1]


def _find_data_dir() -> Path | None:
    for candidate in (os.environ.get("CAPSNET_DATA_DIR"), REPO.parent / "shared" / "datasets", REPO / "data"):
        if candidate and (Path(candidate) / "MNIST" / "raw" / "t10k-images-idx3-ubyte").is_file():
            return Path(candidate).resolve()
    return None


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (`make test` runs three workers) each worker takes its share of the cores (at least one),
    and so do the apps and commands it starts: two workers of two threads each on two cores would wait on each
    other."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        share = (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        os.environ.setdefault("OMP_NUM_THREADS", str(max(1, share)))
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


BROWSER_RERUNS = 1  # a browser test that fails is run once more (see pytest_collection_modifyitems)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A browser test that fails is run once more before it counts as failed: a real Chromium on a busy 2-core
    machine loses a click or a stroke now and then (Streamlit replacing the element under it), which no wait in the
    test can rule out. A test that fails twice fails, and `-p no:rerunfailures` turns this off."""
    for item in items:
        if item.get_closest_marker("browser") and item.config.pluginmanager.hasplugin("rerunfailures"):
            item.add_marker(pytest.mark.flaky(reruns=BROWSER_RERUNS, reruns_delay=2))


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The folder holding MNIST and Fashion-MNIST; in CI a missing one is a failure, not a skip."""
    found = _find_data_dir()
    if found is None:
        message = "no MNIST under $CAPSNET_DATA_DIR, ../shared/datasets or ./data"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message + "; set CAPSNET_DATA_DIR to run the real-data tests")
    os.environ["CAPSNET_DATA_DIR"] = str(found)
    return found


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(scope="session", autouse=True)
def _measurement_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The measurement store of the whole session (and of the apps it starts): a temporary folder, never ~/.cache."""
    before = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("cache"))
    yield Path(os.environ[CACHE_ENV])
    if before is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = before


@pytest.fixture(scope="module")
def model():
    """An untrained tiny CapsNet in eval mode, seeded: for tests of what is read from a network, not how well."""
    from capsnet.nn.capsnet import CapsNet
    from capsnet.nn.config import CapsNetConfig

    torch.manual_seed(0)
    return CapsNet(CapsNetConfig.preset("tiny")).eval()


def made_once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], object]) -> Path:
    """The folder `name`, made by `make(folder)` once for the whole test session: under pytest-xdist the first worker
    that asks makes it while the others wait on a lock, then every worker reads the same files (a trained model is
    not trained again in each worker). Tests copy what they change; the folder itself is only read."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's folder, shared by its workers
    folder, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a worker that failed half-way leaves no half-made folder
            folder.mkdir()
            make(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def tiny_run(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder trained for real: tiny preset, 5,000 MNIST images, 2 epochs (about 20 s on 2 cores)."""
    from capsnet.training.options import TrainOptions
    from capsnet.training.trainer import train

    def make(out: Path) -> None:
        train(
            TrainOptions(
                dataset="mnist",
                preset="tiny",
                epochs=2,
                train_size=5000,
                test_size=1000,
                out=str(out),
                progress=False,
                data_dir=str(data_dir),
            )
        )

    return made_once(tmp_path_factory, "tiny-run", make)


@pytest.fixture(scope="session")
def tiny_checkpoint(tiny_run: Path) -> Path:
    return tiny_run / "best.safetensors"


def _train_tiny(tmp_path_factory: pytest.TempPathFactory, name: str, dataset: str, model: str = "capsnet") -> Path:
    """One epoch of a tiny network on 1,000 images (or pairs) of `dataset`, made once (`made_once`): its best
    checkpoint (a few seconds)."""
    from capsnet.training.options import TrainOptions
    from capsnet.training.trainer import train

    def make(out: Path) -> None:
        train(TrainOptions(dataset=dataset, network=model, preset="tiny", epochs=1, train_size=1000, test_size=200,
                           out=str(out), progress=False, device="cpu"))  # fmt: skip

    return made_once(tmp_path_factory, name, make) / "best.safetensors"


@pytest.fixture(scope="session")
def tiny_multimnist(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny MultiMNIST CapsNet, trained for one epoch on 1,000 pairs."""
    return _train_tiny(tmp_path_factory, "tiny-mm", "multimnist")


@pytest.fixture(scope="session")
def tiny_em(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny EM network, trained for one epoch on 1,000 MNIST digits."""
    return _train_tiny(tmp_path_factory, "tiny-em", "mnist", "em")


@pytest.fixture(scope="session")
def tiny_baselines(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny CNN baselines for MNIST and MultiMNIST, one epoch each on 1,000 images or pairs."""
    return {d: _train_tiny(tmp_path_factory, f"tiny-cnn-{d}", d, "cnn") for d in ("mnist", "multimnist")}


# ---------------------------------------------------------------- the browser


def missing(message: str) -> None:
    """No browser: a failure in CI (the browser tests must run there), a skip elsewhere."""
    if os.environ.get("CI"):
        pytest.fail(message + " (the browser tests must run in CI)")
    pytest.skip(message)


@pytest.fixture(scope="session")
def chromium() -> str:
    """Chromium's path, checked before an app fixture trains a model for tests that cannot run."""
    if sync_playwright is None:
        missing("the playwright package is missing: pip install -e '.[dev]'")
    path = find_chromium()
    if path is None:
        missing("no Chromium at /usr/bin/chromium or on PATH: install Chromium: apt-get install chromium")
    return path  # type: ignore[return-value]


@pytest.fixture(scope="session")
def browser(chromium: str) -> Iterator:
    from playwright.sync_api import expect

    expect.set_options(timeout=EXPECT_MS)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, timeout=60_000)
        try:
            yield launched
        finally:
            launched.close()


class BrowserConsoleWarning(UserWarning):
    """What a failed browser test's tab logged as errors and warnings."""


CONSOLE = pytest.StashKey[list[str]]()  # a browser test's console errors and warnings, kept on its test item


@pytest.fixture
def page(browser, request: pytest.FixtureRequest) -> Iterator:
    """A new browser session (each test starts from a fresh session state), 1400 px wide.

    The tab's console errors and warnings, and its uncaught exceptions, are shown beside a failure.
    """
    context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
    context.set_default_timeout(RERUN_MS)
    context.set_default_navigation_timeout(PAGE_LOAD_MS)
    tab = context.new_page()
    seen = request.node.stash[CONSOLE] = []  # fresh for each try: a rerun runs the same item again
    tab.on("console", lambda m: seen.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
    tab.on("pageerror", lambda error: seen.append(f"uncaught: {error}"))
    try:
        yield tab
    finally:
        context.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator:
    """Add the browser console's errors to a failed browser test's report."""
    outcome = yield
    report = outcome.get_result()
    seen = item.stash.get(CONSOLE, None)
    if report.failed and seen:
        console = "\n".join(seen[-40:])
        report.sections.append(("browser console", console))
        # also a warning, which the summary shows even when the rerun of a failed browser test passes
        message = f"{item.nodeid} failed with its browser console saying:\n{console}"
        warnings.warn(BrowserConsoleWarning(message), stacklevel=1)


@pytest.fixture(scope="session")
def screenshots() -> Screenshots:
    """The README's screenshots, written to $CAPSNET_SCREENSHOTS_DIR when it is set (and not at all otherwise)."""
    folder = os.environ.get("CAPSNET_SCREENSHOTS_DIR")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
    return Screenshots(Path(folder) if folder else None)
