"""Session state shared by the pages: the keys, their defaults, the current input, and the app's folders.

The chosen model and what is read from it live in `dashboard.models`.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import os
from pathlib import Path
from typing import Any, Final

import numpy as np
import streamlit as st
import torch
from threadpoolctl import threadpool_limits

from capsnet.device import inference_threads
from capsnet.nn.registry import named
from capsnet.runs import catalog
from capsnet.training import folder
from dashboard import pages

# session-state keys shared by the pages
MODEL_PATH = "model_path"  # the chosen checkpoint (str), or None
INPUT = "input_image"  # the current 28x28 input (np.ndarray) or None
INPUT_LABEL = "input_label"  # where it came from, for captions
INPUT_TRUE = "input_true_class"  # its label when it is a test image, else None
INPUT_DATASET = "input_dataset"  # the dataset whose test image it is, else None
PAGE = "current_page"
VIEWS_FOR = "views_for"  # the routing (`Routing.kind`) whose page views this run serves: the chosen model's
PAGE_CHANGED = "page_changed"
WATCHED_RUN = "watched_run"
FINISHED_RUN = "finished_run"
VISITED = "visited_pages"  # the url paths of the pages opened in this session (frozenset)
PRIMARY = "selected_primary"  # the primary capsule selected in any view (int index i), or None: the linked views
SWITCHED_FROM = "switched_from"  # the checkpoint a page's one-click switch replaced (the way back), or None
TEST_SOURCE = "Test image"  # the INPUT_SOURCE of a test image
# widgets whose values other modules set or read (a link sets them; they outlive their page): one name each
INPUT_SOURCE = "input_source"  # the Draw page's input: "Draw", "Test image" or "Upload"
TEST_INDEX = "test_index"  # the test image chosen on the Draw page (int)
KNOBS_HELD = "knobs_held"  # the groups of arrays sent to this browser session's knobs (dashboard.knobs), oldest first
ROUTING_KNOBS = "routing_knobs"  # the routing pages' live view (the knobs' component, one per model): r, capsule
ROUTING_CAPSULE = "routing_digit"  # the Routing page's capsule (a class index, or the prediction)
DIMENSIONS_CLASS = "dims_class"  # the Capsule dimensions page's capsule
EM_LAYER = "em_routing_layer"  # the EM Routing page's layer: "class capsules", "ConvCaps1" or "ConvCaps2"
EM_CHILD = "em_child_{}_{}"  # a convolutional EM layer's chosen child, by layer name and part (type, y, x)
# the widgets above keep their value across pages (`persist_state`): Streamlit otherwise drops a widget's value at
# the end of a run in which it is not drawn, and a page switch would forget it
ACROSS_PAGES: Final = "session"
# each model's routing count: {checkpoint path: r} as a link, a routing page's slider or Where routing matters set it,
# and the checkpoint whose r the slider holds; a model without one opens at the r it was trained with
ROUTING_BY_MODEL = "routing_by_model"
PAGE_ITERATIONS = 5  # the routing pages reach r = 5, or the model's own r if more; a link asks within that


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


def switch_checkpoint(path: str | os.PathLike) -> None:
    """Open the checkpoint at `path` for a page that reads another kind of input, remembering the one it replaces."""
    st.session_state[SWITCHED_FROM] = st.session_state.get(MODEL_PATH)
    choose_checkpoint(path)


def switched_from() -> str | None:
    """The checkpoint a page's switch replaced (to offer the way back), or None."""
    return st.session_state.get(SWITCHED_FROM) or None


def switch_back() -> None:
    """Reopen the checkpoint the last switch replaced."""
    previous = switched_from()
    st.session_state[SWITCHED_FROM] = None
    if previous:
        choose_checkpoint(previous)


def serve_views_for(chosen: catalog.CheckpointEntry | None) -> str:
    """The routing whose page views this run serves (`dashboard.pages.PageInfo.views`): the chosen model's; its
    own pages for a model routed by agreement, and with no model."""
    net = named(chosen.network) if chosen is not None else None
    st.session_state[VIEWS_FOR] = net.routing.kind if net is not None and net.routing is not None else "dynamic"
    return st.session_state[VIEWS_FOR]


def page_path(page: pages.PageInfo) -> str:
    """The file that shows `page` in this run's navigation (its view for the chosen model's routing): what
    `st.page_link` and `st.switch_page` take."""
    return page.path_for(st.session_state.get(VIEWS_FOR, "dynamic"))


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


@functools.cache  # once per process: this module is imported once, app.py runs again on every rerun
def freeze_imports() -> None:
    """Move what the imports built to the garbage collector's permanent generation, once per process.

    Streamlit collects garbage after every script run (runner.postScriptGC), walking every object the process holds:
    with torch, plotly and this package loaded, 0.2-0.4 s of a core after each click and each 5-second tick of the
    sidebar's progress panel. Frozen, each collection walks only what later runs made (benchmarks/bench_server.py).
    Frozen objects are still freed when no longer referenced; only reference cycles among them (a few of the first
    session's) outlive it. Once is known from the cache, not from `gc.get_freeze_count()`, which walks the whole
    permanent generation: 65 ms of a core with the dashboard's 420,000 frozen objects, on every rerun.
    """
    gc.freeze()


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
        INPUT_SOURCE: "Draw",  # the Draw page's input; a link or a click on a test image may set it
        TEST_INDEX: 0,
    }
    for key, value in defaults.items():
        if key not in st.session_state:
            st.session_state[key] = value


def em_child_keys(layer: str) -> tuple[str, str, str]:
    """The widget keys of `layer`'s chosen child: its type (from 1), row and column."""
    return EM_CHILD.format(layer, "type"), EM_CHILD.format(layer, "y"), EM_CHILD.format(layer, "x")


def em_child(layer: str) -> tuple[int, int, int] | None:
    """`layer`'s chosen child as (type from 1, row, column), or None before one is chosen."""
    kept: list[Any] = [st.session_state.get(key) for key in em_child_keys(layer)]
    return None if any(v is None for v in kept) else (int(kept[0]), int(kept[1]), int(kept[2]))


def choose_em_child(layer: str, kind: int, y: int, x: int) -> None:
    """Set `layer`'s chosen child (type from 1) before its inputs are drawn."""
    for key, value in zip(em_child_keys(layer), (kind, y, x)):
        st.session_state[key] = value


def routing_iterations() -> int | None:
    """The chosen model's routing count as the session holds it (None before a page or a link set it for it)."""
    value = st.session_state.get(ROUTING_BY_MODEL, {}).get(st.session_state.get(MODEL_PATH))
    return None if value is None else int(value)


def set_routing_iterations(value: int) -> None:
    """Open the chosen model's routing pages at `value` iterations (a link, an image opened from Where routing
    matters): that model's r, not every model's."""
    keep_routing_iterations(value)


def keep_routing_iterations(value: int) -> None:
    """Remember `value` as the chosen model's routing count (what its routing pages show)."""
    kept = dict(st.session_state.get(ROUTING_BY_MODEL) or {})
    kept[st.session_state.get(MODEL_PATH)] = int(value)
    st.session_state[ROUTING_BY_MODEL] = kept


def page_iterations(trained: int) -> int:
    """The r the chosen model's routing pages show: the one this session gave that model, else `trained` (the r it
    was trained with), at most the pages' bound (or `trained`, if that is more)."""
    return min(routing_iterations() or trained, max(PAGE_ITERATIONS, trained))


def chosen_test_image() -> int | None:
    """The test image that is the current input, or None when the input is a drawing or an upload."""
    if st.session_state.get(INPUT_SOURCE) != TEST_SOURCE or st.session_state.get(TEST_INDEX) is None:
        return None
    return int(st.session_state[TEST_INDEX])


def test_index() -> int:
    """The Draw page's test-image index (0 before one is chosen)."""
    return int(st.session_state.get(TEST_INDEX) or 0)


def set_test_index(index: int) -> None:
    st.session_state[TEST_INDEX] = int(index)


def input_source() -> str | None:
    """The Draw page's input source as the session holds it: "Draw", "Test image" or "Upload"."""
    return st.session_state.get(INPUT_SOURCE)


def show_test_images() -> None:
    """Make the Draw page's input a test image (a model of a dataset that cannot be drawn opens there)."""
    st.session_state[INPUT_SOURCE] = TEST_SOURCE


def knobs_held() -> list[str]:
    """The groups of arrays this session sent the knobs, oldest first: the browser's page holds them (a reload starts a
    new session, and so sends them again)."""
    return list(st.session_state.get(KNOBS_HELD) or [])


def note_knobs_held(keys: list[str], most: int) -> None:
    """`keys` were sent now: remembered, the `most` recent only (fewer than the browser keeps)."""
    kept = [k for k in knobs_held() if k not in keys] + list(keys)
    st.session_state[KNOBS_HELD] = kept[-most:]


def forget_knobs_held(keys: list[str]) -> None:
    """The browser lacks `keys` (a payload it was sent was never drawn): the next payload carries them."""
    st.session_state[KNOBS_HELD] = [k for k in knobs_held() if k not in keys]


def page_capsule(key: str) -> int | None:
    """The capsule a page shows (`ROUTING_CAPSULE`, `DIMENSIONS_CLASS`): a class index, or None for the prediction."""
    value = st.session_state.get(key)
    return None if value is None or int(value) < 0 else int(value)


def set_page_capsule(key: str, index: int | None) -> None:
    """Show capsule `index` (None or a negative number: the prediction) on the page whose capsule `key` holds."""
    st.session_state[key] = -1 if index is None or index < 0 else int(index)


def choose_capsule(index: int) -> None:
    """Show capsule `index` on the pages that pick a capsule (Routing, Capsule dimensions): a link's capsule=."""
    st.session_state[ROUTING_CAPSULE] = st.session_state[DIMENSIONS_CLASS] = int(index)


def choose_test_image(index: int) -> None:
    """Make test image `index` the Draw page's choice (the input itself is set with `set_input`)."""
    st.session_state[INPUT_SOURCE] = TEST_SOURCE
    st.session_state[TEST_INDEX] = int(index)


def note_page(url_path: str, network: str | None = None) -> None:
    """Remember which page runs, whether it was just entered (to restore the canvas), and that it was visited (and
    with which network: "routing@em")."""
    st.session_state[PAGE_CHANGED] = st.session_state.get(PAGE) != url_path
    st.session_state[PAGE] = url_path
    with_network = {f"{url_path}@{network}"} if network is not None else set()
    st.session_state[VISITED] = visited_pages() | {url_path} | with_network


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
    return folder.runs_root()


def checkpoints_dir() -> Path:
    return catalog.checkpoints_dir()


# ---------------------------------------------------------------- the input


def set_input(
    image: np.ndarray | None, label: str = "", true_class: int | None = None, dataset: str | None = None
) -> None:
    """Make `image` the input of every page: `label` says where it came from, `true_class` and `dataset` are the
    class and the dataset of a test image (None for a drawing or an upload)."""
    st.session_state[INPUT] = image
    st.session_state[INPUT_LABEL] = label
    st.session_state[INPUT_TRUE] = true_class
    st.session_state[INPUT_DATASET] = dataset


def input_dataset() -> str | None:
    """The dataset whose test image the input is, or None (a drawing, an upload, no input)."""
    return st.session_state.get(INPUT_DATASET)


def current_input() -> np.ndarray | None:
    return st.session_state.get(INPUT)


def input_label() -> str:
    """Where the current input came from ("test image #674", "your drawing"), or ""."""
    return str(st.session_state.get(INPUT_LABEL) or "")


def input_digest(image: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(image, dtype=np.float32).tobytes()).hexdigest()[:16]
