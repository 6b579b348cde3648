"""Fixtures shared by the dashboard tests: a tiny checkpoint trained once per session, app folders, and helpers
that read the charts AppTest drew.

pytest only reads conftest.py, so the test files import these by name.
"""

from __future__ import annotations

import base64
import functools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import made_once
from streamlit.components.v2 import manifest_scanner
from streamlit.testing.v1 import AppTest

# Each new AppTest scans every installed package's metadata for Streamlit components (0.2 s of a core; test_app.py
# makes 66 apps); the server scans once per process, and nothing is installed while the tests run: so do they.
manifest_scanner.scan_component_manifests = functools.cache(manifest_scanner.scan_component_manifests)

RUN_NAME = "20250101-000000-mnist"
APP = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")


@pytest.fixture(scope="session")
def app_run(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder named like the app's, holding a tiny CapsNet trained for one epoch on 300 MNIST images.

    Smaller than conftest's `tiny_run` (a few seconds on a CPU): the app tests need a trained model, not a good one.
    Trained once for the whole session (`made_once`: the xdist workers share it); tests copy it before changing it.
    """
    from capsnet.training.options import TrainOptions
    from capsnet.training.trainer import train

    def make(run_dir: Path) -> None:
        train(
            TrainOptions(
                dataset="mnist",
                epochs=1,
                batch_size=50,
                preset="tiny",
                train_size=300,
                test_size=200,
                device="cpu",
                out=str(run_dir),
                progress=False,
                data_dir=str(data_dir),
            )
        )

    run_dir = made_once(tmp_path_factory, RUN_NAME, make)
    assert (run_dir / "best.safetensors").is_file()
    return run_dir


@pytest.fixture
def app_dirs(data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """Empty runs and checkpoints folders, set as the app's through the environment. The app reads its test images
    from $CAPSNET_DATA_DIR, which `data_dir` sets: without it, whether an app found them depended on which test of
    the process had asked for the data first (an empty CAPSNET_DATA_DIR made the first visit open on Draw)."""
    runs_root, checkpoints = tmp_path / "runs", tmp_path / "checkpoints"
    runs_root.mkdir()
    checkpoints.mkdir()
    monkeypatch.setenv("CAPSNET_RUNS_DIR", str(runs_root))
    monkeypatch.setenv("CAPSNET_CHECKPOINTS_DIR", str(checkpoints))
    return runs_root, checkpoints


@pytest.fixture
def app_with_run(app_dirs: tuple[Path, Path], app_run: Path) -> tuple[Path, Path]:
    """The app's folders with the tiny run in its runs root (and nothing shipped)."""
    runs_root, checkpoints = app_dirs
    shutil.copytree(app_run, runs_root / app_run.name)
    return runs_root, checkpoints


def clear_streamlit_caches() -> None:
    """Each AppTest shares the process's st.cache_*: clear them so tests do not see each other's models."""
    import streamlit as st

    st.cache_data.clear()
    st.cache_resource.clear()


# ---------------------------------------------------------------- reading what AppTest drew


def plotly_values(array: list | dict) -> np.ndarray:
    """A data array of a plotly JSON spec: a list, or numbers packed as base64 ("bdata" with its "dtype")."""
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"])
    return np.asarray(array)


def chart(at: AppTest, key: str) -> dict:
    """The plotly spec of the chart drawn with `key`."""
    for element in at.get("plotly_chart"):
        if element.key == key:
            return json.loads(element.proto.spec)
    raise AssertionError(f"no chart {key!r}; have {[e.key for e in at.get('plotly_chart')]}")


# ---------------------------------------------------------------- shipping models into an app's folders


def ship_affine_pair(checkpoints: Path, capsnet: float, cnn: float) -> None:
    """A tiny CapsNet and CNN for 40x40 "shipped" as trained on mnist-40, with the affNIST-like accuracies given
    (as `capsnet.runs.export` records them) and two epochs of 1,000 digits in their metrics."""
    from capsnet.checkpoints.checkpoint import save_checkpoint
    from capsnet.nn.capsnet import CapsNet
    from capsnet.nn.cnn import BaselineCNN, CNNConfig
    from capsnet.nn.config import CapsNetConfig

    (checkpoints / "baselines").mkdir(exist_ok=True)
    for model, path, accuracy in (
        (CapsNet(CapsNetConfig.preset("tiny", image_size=40)), checkpoints / "mnist-40.safetensors", capsnet),
        (BaselineCNN(CNNConfig.preset("tiny", image_size=40)), checkpoints / "baselines" / "mnist-40-cnn.safetensors", cnn),
    ):  # fmt: skip
        header = {"dataset": "mnist-40", "test_accuracy": 0.9, "epochs": 2, "recipe": {"lr": 1e-3},
                  "affnist_like_accuracy": accuracy, "affnist_like_examples": 10_000}  # fmt: skip
        save_checkpoint(path, model, header)
        records = [{"epoch": e, "train_images": 1000, "test_accuracy": 0.5 + e / 10} for e in (1, 2)]
        path.with_suffix(".metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def knobs_payload(at: AppTest, view: str) -> tuple[dict, dict[str, np.ndarray]]:
    """The header and arrays of the knobs' payload (dashboard/knobs) that draws `view` in the app's last run."""
    from dashboard.knobs import payload

    for element in at.get("bidi_component"):
        header, arrays = payload.unpack(element.proto.bytes)
        if header["view"] == view:  # a group of arrays this run carried, under its own names (`js/store.js`)
            return header, {name.rsplit("/", 1)[-1]: array for name, array in arrays.items()}
    raise AssertionError(f"no knobs view {view!r} on the page")


def forget_knobs_held(at: AppTest) -> AppTest:
    """As if the browser were new: the next run carries every group of arrays again (a decoder, the votes)."""
    at.session_state["knobs_held"] = []
    return at


def turn_routing_knobs(at: AppTest, iterations: int | None = None, capsule: int | None = None) -> AppTest:
    """What the routing knobs' report does when the hand picks r or the capsule in focus (the browser tests turn the
    real ones): the session keeps r for the chosen model, and the capsule for the page."""
    if iterations is not None:
        try:
            kept = dict(at.session_state["routing_by_model"] or {})
        except KeyError:
            kept = {}
        kept[at.session_state["model_path"]] = iterations
        at.session_state["routing_by_model"] = kept
    if capsule is not None:
        at.session_state["routing_digit"] = capsule
    return at
