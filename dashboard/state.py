"""Shared state of the dashboard: the chosen model, the current input, and the caches.

The model is loaded once per checkpoint file (path + modification time) with
`st.cache_resource` and never mutated; everything computed from it goes through
bounded `st.cache_data` functions keyed by the checkpoint, so reruns (a slider
move, a page switch) only recompute what changed. Cached functions hold no widgets.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import streamlit as st
import torch

from capsnet import catalog, runs
from capsnet import explain as ex
from capsnet.checkpoint import Checkpoint, CheckpointError, load_checkpoint
from capsnet.data import DatasetNotFoundError, as_tensors, dataset_info, load_dataset
from capsnet.device import inference_threads
from dashboard import texts

# session-state keys shared by the pages
MODEL_PATH = "model_path"  # the chosen checkpoint (str), or None
INPUT = "input_image"  # the current 28x28 input (np.ndarray) or None
INPUT_LABEL = "input_label"  # where it came from, for captions
INPUT_TRUE = "input_true_class"  # its label when it is a test image, else None
PAGE = "current_page"
PAGE_CHANGED = "page_changed"
WATCHED_RUN = "watched_run"
FINISHED_RUN = "finished_run"

MNIST_DIGITS = [str(d) for d in range(10)]


def configure_torch() -> None:
    """Apply `inference_threads` to this server process (once; cheap to call on every rerun)."""
    threads = inference_threads()
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def init() -> None:
    """Set the session defaults once per browser session (and the process's torch threads)."""
    configure_torch()
    defaults: dict[str, Any] = {
        MODEL_PATH: None,
        INPUT: None,
        INPUT_LABEL: "",
        INPUT_TRUE: None,
        PAGE: None,
        PAGE_CHANGED: False,
        WATCHED_RUN: None,
        FINISHED_RUN: None,
        "canvas_nonce": 0,
        "canvas_json": None,
        "canvas_seed": None,
        "canvas_digit": None,
    }
    for key, value in defaults.items():
        if key not in st.session_state:
            st.session_state[key] = value


def note_page(url_path: str) -> None:
    """Remember which page runs, and whether it was just entered (to restore the canvas)."""
    st.session_state[PAGE_CHANGED] = st.session_state.get(PAGE) != url_path
    st.session_state[PAGE] = url_path


def runs_root() -> Path:
    return runs.runs_root()


def checkpoints_dir() -> Path:
    return catalog.checkpoints_dir()


# ---------------------------------------------------------------- models


@st.cache_data(ttl=3, max_entries=4, show_spinner=False)
def checkpoint_entries(checkpoints: str, root: str) -> list[catalog.CheckpointEntry]:
    """The picker's list (headers only), refreshed at most every 3 seconds."""
    return catalog.list_checkpoints(checkpoints, root)


@st.cache_resource(max_entries=4, show_spinner="Loading the model...")
def load_model(path: str, mtime: float) -> Checkpoint:
    """The checkpoint at `path` as it was at `mtime`, loaded once and shared by every session (read-only)."""
    return load_checkpoint(path, device="cpu")


@dataclass
class Model:
    """The chosen checkpoint and a cache key that changes when its file does."""

    checkpoint: Checkpoint
    key: str

    @property
    def net(self) -> Any:
        return self.checkpoint.model

    @property
    def class_names(self) -> list[str]:
        return self.checkpoint.class_names

    @property
    def dataset(self) -> str:
        return str(self.checkpoint.info.get("dataset") or "mnist")

    @property
    def info(self) -> dict[str, Any]:
        return self.checkpoint.info


def current_model(show_errors: bool = True) -> Model | None:
    """The model chosen in the sidebar, or None (no trained model, or it cannot be read)."""
    path = st.session_state.get(MODEL_PATH)
    if not path:
        return None
    try:
        mtime = os.path.getmtime(path)
        checkpoint = load_model(path, mtime)
    except (OSError, CheckpointError) as error:
        if show_errors:
            st.error(f"Cannot open the model: {error}")
        return None
    return Model(checkpoint=checkpoint, key=f"{path}@{mtime}")


def class_names(model: Model | None) -> list[str]:
    return model.class_names if model is not None else MNIST_DIGITS


def require_model() -> Model | None:
    """The model, or a notice saying how to get one (and None)."""
    model = current_model()
    if model is None and not st.session_state.get(MODEL_PATH):
        st.warning(texts.no_model_notice(str(_display_path(checkpoints_dir()))), icon=":material/model_training:")
    return model


def _display_path(path: Path) -> Path:
    try:
        return path.resolve().relative_to(Path.cwd())
    except ValueError:
        return path


# ---------------------------------------------------------------- the input


def set_input(image: np.ndarray | None, label: str = "", true_class: int | None = None) -> None:
    st.session_state[INPUT] = image
    st.session_state[INPUT_LABEL] = label
    st.session_state[INPUT_TRUE] = true_class


def current_input() -> np.ndarray | None:
    return st.session_state.get(INPUT)


def require_input() -> np.ndarray | None:
    """The current input, or a pointer to the Draw page (and None)."""
    image = current_input()
    if image is None:
        st.info("No input yet: draw a digit, pick a test image or upload one on the **Draw** page.")
        st.page_link("app_pages/draw.py", label="Go to the Draw page", icon=":material/draw:")
    return image


def input_digest(image: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(image, dtype=np.float32).tobytes()).hexdigest()[:16]


# ---------------------------------------------------------------- cached computations


@st.cache_data(max_entries=64, show_spinner=False)
def explanation(
    model_key: str, image: np.ndarray, iterations: int | None, decode_class: int | None, _model: Any
) -> ex.Explanation:
    """`capsnet.explain.explain`, cached per model, input, iterations and decoded class."""
    return ex.explain(_model, image, iterations, decode_class)


@st.cache_data(max_entries=256, show_spinner=False)
def decoded(model_key: str, vector: tuple[float, ...], class_index: int, _model: Any) -> np.ndarray:
    """One decode of an edited 16-D vector (a slider move)."""
    return ex.decode_vector(_model, np.asarray(vector, dtype=np.float32), class_index)


@st.cache_data(max_entries=16, show_spinner="Decoding 176 variants...")
def perturbations(model_key: str, vector: tuple[float, ...], class_index: int, _model: Any) -> np.ndarray:
    """Figure 4's grid (D, 11, 28, 28) around one capsule vector, one batched decode."""
    return ex.perturbation_grid(_model, np.asarray(vector, dtype=np.float32), class_index)


@st.cache_resource(max_entries=2, show_spinner="Loading the test set...")
def test_set(name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The test images (N, 1, 28, 28) and labels of a dataset, shared read-only by all sessions.

    Raises DatasetNotFoundError (not cached) when it is missing and cannot be downloaded.
    """
    return as_tensors(load_dataset(name, train=False))


def try_test_set(name: str) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The test set, or an error message on the page (and None)."""
    try:
        return test_set(name)
    except DatasetNotFoundError as error:
        st.error(f"The {dataset_info(name).title} test set is not available: {error}", icon=":material/folder_off:")
        return None


@st.cache_data(max_entries=6, show_spinner=False)
def evaluation(model_key: str, dataset: str, limit: int, _model: Any) -> dict[str, Any]:
    """Accuracy, confusion matrix, predictions and lengths of a model on the first `limit` test images."""
    from capsnet.evaluate import evaluate

    images, labels = test_set(dataset)
    images, labels = images[:limit], labels[:limit]
    result = evaluate(_model, images, labels, batch_size=250)
    return {
        "accuracy": result.accuracy,
        "loss": result.loss,
        "correct": result.correct,
        "total": result.total,
        "class_accuracy": result.class_accuracy(),
        "class_correct": result.class_correct,
        "class_total": result.class_total,
        "confusion": result.confusion.numpy(),
        "predictions": result.predictions.numpy(),
        "lengths": result.lengths.numpy(),
        "labels": labels.numpy(),
    }


@st.cache_data(max_entries=16, show_spinner=False)
def reconstructions(model_key: str, dataset: str, indices: tuple[int, ...], _model: Any) -> ex.Reconstructions:
    """Reconstructions (from the predicted capsule) of some test images."""
    images, _ = test_set(dataset)
    return ex.reconstruct(_model, images[list(indices)])
