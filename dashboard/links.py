"""Linked and shareable state: the URL says what is shown, and a click on a test image makes it the input.

The state that matters lives in the URL's query parameters, so a link opens exactly a view:

    /routing?checkpoint=mnist&test=1234&iterations=3&capsule=7

checkpoint: a shipped model's file name without `.safetensors`, or a run's folder name; test: a
test-image index (the input); iterations: routing iterations (Routing); capsule: a class index
(the capsule the Routing and Capsule dimensions pages show). The page is the URL's path. A link is
read on a session's first run; afterwards the URL follows the session's state on every run. A
value that cannot be used is dropped with a notice, never an exception.
"""

from __future__ import annotations

import re
from urllib.parse import urlparse

import numpy as np
import streamlit as st

from capsnet.checkpoints.checkpoint import read_checkpoint_info
from capsnet.data import image_folder
from capsnet.data.datasets import DATASETS, dataset_info
from capsnet.data.pictures import as_pictures
from capsnet.data.tasks import task
from capsnet.errors import CapsNetError
from capsnet.runs.catalog import CheckpointEntry
from dashboard import guards, pages, state, texts, widgets

APPLIED = "url_applied"  # the session's first run has read its link
DEFAULT_TEST_IMAGE = 0  # a first visit's input: test image #0 (a 7 in MNIST, an ankle boot in Fashion-MNIST)
CAPSULE_OF_PAGE = {"routing": state.ROUTING_CAPSULE, "dimensions": state.DIMENSIONS_CLASS}  # a link's capsule=
NOTICES = "url_notices"  # what could not be used, said once


def checkpoint_name(entry: CheckpointEntry) -> str:
    """How a link names a checkpoint: `mnist` for checkpoints/mnist.safetensors, the folder name for a run."""
    return entry.run if entry.source == "run" else entry.path.stem


def read_link(entries: list[CheckpointEntry]) -> None:
    """On a session's first run: set the session's state from the URL's query parameters."""
    if st.session_state.get(APPLIED):
        return
    st.session_state[APPLIED] = True
    params = st.query_params
    notices: list[str] = []
    asked = _asked_page()
    if asked and asked not in {p.url_path for p in pages.PAGES}:
        notices.append(
            f"The link's page {texts.literal(asked)} does not exist here: the {pages.DRAW.title} page is shown."
        )
    usable = [e for e in entries if not e.error]
    chosen = state.chosen_checkpoint(entries)  # the model the sidebar will open
    if "checkpoint" in params:
        wanted = params["checkpoint"]
        match = next((e for e in usable if checkpoint_name(e) == wanted), None)
        if match is None and _looks_like_a_path(wanted):  # the server's path or another: not said back
            notices.append("The link's checkpoint names a file by its path; a link names a model by its name (as the "
                           "sidebar lists it): the default model is shown.")  # fmt: skip
        elif match is None:
            notices.append(f"The link's checkpoint {texts.literal(wanted, 60)} is not on this server: the default "
                           "model is shown.")  # fmt: skip
        else:
            chosen = match
            state.choose_checkpoint(match.path)
    if "iterations" in params:
        most = _page_iterations(chosen)
        value = _whole(params["iterations"], 1, most)
        if value is None:
            notices.append(f"The link's iterations {texts.literal(params['iterations'], 20)} is not a number from 1 "
                           f"to {most}: ignored.")  # fmt: skip
        else:
            state.set_routing_iterations(value)  # the r of the model the link opens
    # the chosen model's dataset where this version knows it (a header may name a dataset this version lacks)
    known = chosen.dataset if chosen is not None and chosen.dataset in DATASETS else None
    classes = len(dataset_info(known).classes) if known else 10
    if "capsule" in params:
        value = _whole(params["capsule"], 0, classes - 1)
        if value is None:
            notices.append(f"The link's capsule {texts.literal(params['capsule'], 20)} is not a class from 0 to "
                           f"{classes - 1}: ignored.")  # fmt: skip
        else:
            state.choose_capsule(value)
    if "test" in params and known and not task(known).one_picture:
        title = dataset_info(known).title
        notices.append(
            f"The link's test image {texts.literal(params['test'], 20)} is one 28x28 image, and the model the link opens "
            f"reads {title}: ignored (pick its examples on its own page)."
        )
    elif "test" in params:
        dataset = chosen.dataset if chosen is not None and chosen.dataset else "mnist"
        data = guards.try_test_set(dataset, quiet=True)
        count = len(data[0]) if data is not None else 0
        value = _whole(params["test"], 0, count - 1)
        if data is None:
            title = dataset_info(dataset).title if dataset in DATASETS else texts.literal(dataset, 60)
            notices.append(f"The link's test image {texts.literal(params['test'], 20)} cannot be opened: the {title} test "
                           "set is not available here.")  # fmt: skip
        elif value is None:
            notices.append(f"The link's test image {texts.literal(params['test'], 20)} is not an index from 0 to "
                           f"{count - 1:,}.")  # fmt: skip
        else:
            open_test_image(value, dataset)
    # the dataset whose test images are the inputs: the model's own where this version reads it (a folder too)
    own = chosen.dataset if chosen is not None and chosen.dataset else ""
    opened = own if own in DATASETS or image_folder.parse(own) is not None else "mnist"
    if state.current_input() is None and task(opened).one_picture:
        # a first visit has an input: every page that reads one shows it at once (the Draw page says which)
        open_test_image(DEFAULT_TEST_IMAGE, opened)
    st.session_state[NOTICES] = notices


def _page_iterations(entry: CheckpointEntry | None) -> int:
    """The routing pages' range for the model a link opens: 1 to 5 (`state.PAGE_ITERATIONS`), or to the r it was
    trained with if more (read from its header alone)."""
    try:
        trained = getattr(read_checkpoint_info(entry.path)[0], "routing_iterations", 0) if entry is not None else 0
    except CapsNetError:  # the sidebar says what is wrong with the file
        trained = 0
    return max(state.PAGE_ITERATIONS, int(trained))


def _asked_page() -> str:
    """The page the browser's address names: its path's last part ("" for the app's root, or when unknown)."""
    try:
        url = st.context.url or ""
    except (AttributeError, RuntimeError):  # no browser session (a script run, an older Streamlit)
        return ""
    base = str(st.get_option("server.baseUrlPath") or "").strip("/")
    path = urlparse(url).path.strip("/")
    path = path[len(base) :].strip("/") if base and path.startswith(base) else path
    return path.rsplit("/", 1)[-1]


def show_notices() -> None:
    for notice in st.session_state.pop(NOTICES, None) or []:
        st.warning(notice, icon=":material/link_off:")


def write_link(entry: CheckpointEntry | None, page: str) -> None:
    """Mirror the state that matters on `page` (a url_path) in the URL, so that it can be shared."""
    params: dict[str, str] = {}
    if entry is not None:
        params["checkpoint"] = checkpoint_name(entry)
    if state.chosen_test_image() is not None:
        params["test"] = str(state.chosen_test_image())
    if page == "routing" and state.routing_iterations() is not None:
        params["iterations"] = str(state.routing_iterations())
    capsule = CAPSULE_OF_PAGE.get(page)
    if capsule is not None:
        chosen = widgets.capsule_choice(st.session_state.get(capsule))
        if chosen is not None:
            params["capsule"] = str(chosen)
    if dict(st.query_params) != params:
        st.query_params.from_dict(params)


def open_test_image(index: int, dataset: str) -> None:
    """Make test image `index` of `dataset` the current input of every page (and the Draw page's choice).

    Nothing happens (and nothing is said) when the test set cannot be read: the page that needs it says why, once.
    """
    if dataset in DATASETS and not task(dataset).one_picture:  # 36x36 pairs, 40x40 digits: not an input
        return
    data = guards.try_test_set(dataset, quiet=True)
    if data is None:
        return
    images, labels = data
    index = int(np.clip(index, 0, len(images) - 1))
    state.choose_test_image(index)
    picture = as_pictures(images[index : index + 1])[0]  # (H, W), or (H, W, 3) in colour
    state.set_input(picture, f"test image #{index}", int(labels[index]), dataset)


def follow_the_model(entry: CheckpointEntry | None) -> None:
    """A test image is an index into the model's own test set (the link names the index): a model of other data
    opens the same index of its own set, not the other set's picture, and not "No input yet"."""
    index = state.chosen_test_image()
    dataset = entry.dataset if entry is not None else None
    if index is not None and dataset and state.input_dataset() not in (None, dataset):
        open_test_image(index, dataset)


def _looks_like_a_path(text: str) -> bool:
    """A file's path (absolute, relative, home, a drive letter or backslashes), not a model's name."""
    return text.startswith(("/", "~", "./", "../")) or "\\" in text or re.match(r"^[A-Za-z]:", text) is not None


def _whole(text: str, low: int, high: int) -> int | None:
    try:
        value = int(text)
    except (TypeError, ValueError):
        return None
    return value if low <= value <= high else None
