"""Session state shared by the pages: the keys, their defaults, the current input, and the app's folders.

The chosen model and what is read from it live in `dashboard.models`.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np
import streamlit as st
import torch
from threadpoolctl import threadpool_limits

from capsnet.device import inference_threads
from capsnet.training import catalog, run_folder

# session-state keys shared by the pages
MODEL_PATH = "model_path"  # the chosen checkpoint (str), or None
INPUT = "input_image"  # the current 28x28 input (np.ndarray) or None
INPUT_LABEL = "input_label"  # where it came from, for captions
INPUT_TRUE = "input_true_class"  # its label when it is a test image, else None
PAGE = "current_page"
PAGE_CHANGED = "page_changed"
WATCHED_RUN = "watched_run"
FINISHED_RUN = "finished_run"
VISITED = "visited_pages"  # the url paths of the pages opened in this session (frozenset)
PRIMARY = "selected_primary"  # the primary capsule selected in any view (int index i), or None: the linked views


def selected_primary() -> int | None:
    """The primary capsule selected anywhere (i = type * G^2 + y * G + x), or None."""
    value = st.session_state.get(PRIMARY)
    return None if value is None else int(value)


def select_primary(index: int | None) -> None:
    """Select primary capsule `index` (or none) for every view that shows primary capsules."""
    st.session_state[PRIMARY] = None if index is None else int(index)


def chosen_checkpoint(entries: list[catalog.CheckpointEntry]) -> catalog.CheckpointEntry | None:
    """The one chosen checkpoint: the session's choice while it is a usable entry, else the catalogue's default
    (which becomes the choice); None when no checkpoint is usable. Every caller asks here."""
    usable = [e for e in entries if not e.error]
    chosen = next((e for e in usable if str(e.path) == st.session_state.get(MODEL_PATH)), None)
    chosen = chosen or catalog.default_checkpoint(usable)
    st.session_state[MODEL_PATH] = str(chosen.path) if chosen is not None else None
    return chosen


def choose_checkpoint(path: str | os.PathLike) -> None:
    """Make the checkpoint at `path` the chosen one (a link, the picker)."""
    st.session_state[MODEL_PATH] = str(path)


def chosen_path() -> str | None:
    """The chosen checkpoint's path as the session holds it (None before one is chosen or when none is usable)."""
    return st.session_state.get(MODEL_PATH) or None


def configure_torch() -> None:
    """Apply `inference_threads` to this server process's torch and NumPy's BLAS (once; cheap on every rerun).

    NumPy's BLAS (an SVD in the vote views) would otherwise start a thread per core, and wait for cores a training
    run holds: 190 ms instead of 0.5 ms for one 2-D view of the votes.
    """
    threads = inference_threads()
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
        threadpool_limits(threads, user_api="blas")


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
        PRIMARY: None,
        "canvas_nonce": 0,
        "canvas_json": None,
        "canvas_seed": None,
        "canvas_digit": None,
        "input_source": "Draw",  # the Draw page's input; a link or a click on a test image may set it
        "test_index": 0,
    }
    for key, value in defaults.items():
        if key not in st.session_state:
            st.session_state[key] = value


# widget values that must outlive their page: Streamlit drops a widget's value from the session at the end of a
# run in which the widget is not drawn; assigning each to itself at the start of every run keeps it
KEPT_WIDGETS = ("input_source", "test_index", "routing_iterations", "routing_digit", "dims_class", "reconstruct_as")


def keep_widget_values() -> None:
    for key in KEPT_WIDGETS:
        if key in st.session_state:
            st.session_state[key] = st.session_state[key]


def note_page(url_path: str) -> None:
    """Remember which page runs, whether it was just entered (to restore the canvas), and that it was visited."""
    st.session_state[PAGE_CHANGED] = st.session_state.get(PAGE) != url_path
    st.session_state[PAGE] = url_path
    st.session_state[VISITED] = visited_pages() | {url_path}


def visited_pages() -> frozenset[str]:
    """The url paths of the pages this session has opened ("" is the Draw page): the guided path ticks them."""
    return frozenset(st.session_state.get(VISITED) or ())


def page_just_entered() -> bool:
    """Whether this run is the first on its page since another page ran."""
    return bool(st.session_state.get(PAGE_CHANGED))


# ---------------------------------------------------------------- the training run the sidebar follows


def watched_run() -> str | None:
    """The name of the run the sidebar follows while it trains, or None."""
    return st.session_state.get(WATCHED_RUN)


def watch_run(name: str | None) -> None:
    """Follow run `name` (None: stop following; a finished run is then announced with `finish_run`)."""
    st.session_state[WATCHED_RUN] = name


def finished_run() -> str | None:
    """The followed run that has just ended, to announce once, or None."""
    return st.session_state.get(FINISHED_RUN)


def finish_run(name: str | None) -> None:
    st.session_state[FINISHED_RUN] = name


def runs_root() -> Path:
    return run_folder.runs_root()


def checkpoints_dir() -> Path:
    return catalog.checkpoints_dir()


# ---------------------------------------------------------------- the input


def set_input(image: np.ndarray | None, label: str = "", true_class: int | None = None) -> None:
    st.session_state[INPUT] = image
    st.session_state[INPUT_LABEL] = label
    st.session_state[INPUT_TRUE] = true_class


def current_input() -> np.ndarray | None:
    return st.session_state.get(INPUT)


def input_label() -> str:
    """Where the current input came from ("test image #674", "your drawing"), or ""."""
    return str(st.session_state.get(INPUT_LABEL) or "")


def input_digest(image: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(image, dtype=np.float32).tobytes()).hexdigest()[:16]
