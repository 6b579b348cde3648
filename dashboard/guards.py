"""What a page checks before it draws: a model of the right kind, an input, a readable test set.

Each guard shows its own notice (why the page cannot go on, and what to do) and returns None when
the page must stop. The data layer below (`dashboard.models`, `dashboard.baselines`) never draws:
it returns values, or raises or returns the reason, and these functions say it on the page.
"""

from __future__ import annotations

import numpy as np
import streamlit as st
import torch

from capsnet.data import image_folder
from capsnet.data.datasets import DATASETS, DatasetDamagedError, DatasetNotFoundError
from capsnet.data.tasks import task
from capsnet.nn.family import RoutingKind
from capsnet.nn.registry import named
from capsnet.runs import catalog
from dashboard import baselines, models, pages, state, texts


def current_model(show_errors: bool = True) -> models.Model | None:
    """The model chosen in the sidebar, or None (none chosen, or it cannot be read: said unless `show_errors` is off)."""
    model, error = models.open_current()
    if error and show_errors:
        st.error(f"Cannot open the model: {error}")
    return model


EVERY_ROUTING = None  # `require_model(routings=...)` of a page that reads any network's scores (Evaluate)


def require_model(pairs: bool = False, routings: tuple[RoutingKind, ...] | None = ("dynamic",)) -> models.Model | None:
    """The model, or a notice saying how to get one (and None). `pairs`: the page reads MultiMNIST overlays;
    `routings`: the routings it has views for, or EVERY_ROUTING (a model routed otherwise is told in one line why not,
    with one click to a model the page reads)."""
    model = current_model()
    if model is not None and routings is not None and model.routing not in routings:
        st.info(texts.not_for(model.routing, model.network.routes().title), icon=":material/swap_horiz:")
        other = _model_reading(pairs, routings)
        if other is not None:
            st.button(f"Open {other.label}", key="switch_model", icon=":material/swap_horiz:", type="primary",
                      on_click=state.switch_checkpoint, args=(str(other.path),))  # fmt: skip
        st.page_link(state.page_path(pages.EVALUATE), label=f"Evaluate the {model.network.title} model on the "
                     f"{pages.EVALUATE.title} page", icon=pages.EVALUATE.icon)  # fmt: skip
        return None
    if model is None and state.chosen_path() is None:
        st.warning(
            texts.no_model_notice(str(models.display_path(state.checkpoints_dir()))), icon=":material/model_training:"
        )
    if model is not None and model.reads_pairs != pairs:
        st.info(texts.wrong_kind_of_model(model.reads_pairs), icon=":material/swap_horiz:")
        other = _model_reading(pairs, routings)
        if other is not None:  # one click to a model that reads what this page does (and, on it, one click back)
            st.button(f"Open {other.label}", key="switch_model", icon=":material/swap_horiz:", type="primary",
                      on_click=state.switch_checkpoint, args=(str(other.path),))  # fmt: skip
        if model.reads_pairs:
            st.page_link(
                state.page_path(pages.OVERLAP), label=f"Go to the {pages.OVERLAP.title} page", icon=pages.OVERLAP.icon
            )
        return None
    if model is not None and state.switched_from():
        st.button("Back to the model you had open", key="switch_back", icon=":material/undo:",
                  on_click=state.switch_back)  # fmt: skip
    if model is not None and not pairs and model.task.kind == "placed":  # mnist-40: the affNIST experiment
        st.info(texts.larger_canvas(model.config.image_size), icon=":material/swap_horiz:")
        return None
    return model


def _model_reading(
    pairs: bool, routings: tuple[RoutingKind, ...] | None = ("dynamic",)
) -> catalog.CheckpointEntry | None:
    """A usable checkpoint of a network routed in one of `routings` whose inputs are pairs (or single 28x28 images):
    a shipped one first, else the newest run."""
    entries = models.checkpoint_entries(str(state.checkpoints_dir()), str(state.runs_root()))
    for entry in entries:
        read = task(entry.dataset) if entry.dataset in DATASETS else None
        net = named(entry.network)
        usable = (
            not entry.error
            and net is not None
            and net.routing is not None
            and (routings is None or net.routing.kind in routings)
        )
        if usable and read is not None and (read.pairs if pairs else read.takes_drawings):
            return entry
    return None


def require_input() -> np.ndarray | None:
    """The current input, or a pointer to the Draw page (and None): a picture of the model's own shape, (side, side)
    grey or (side, side, 3) colour; an input left from a model of other pictures is not this one's."""
    image = state.current_input()
    model = current_model(show_errors=False)
    if image is not None and model is not None and not model.task.pairs and image.shape != model.task.picture_shape:
        image = None  # a colour or larger picture read for another model: this model's input is still to choose
    if image is None:
        st.info("No input yet: draw a digit, pick a test image or upload one on the **Draw** page.")
        st.page_link(state.page_path(pages.DRAW), label=f"Go to the {pages.DRAW.title} page", icon=pages.DRAW.icon)
    return image


def try_test_set(name: str, quiet: bool = False) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The test set, or an error message on the page (and None).

    `quiet`: no message, for what the app does before the page is drawn (the page that needs the set says why).
    """
    if name not in DATASETS and image_folder.parse(name) is None:  # a dataset this version does not know
        if not quiet:
            st.error(
                f"This model's dataset {name[:60]!r} is unknown to this version: no test images.",
                icon=":material/folder_off:",
            )
        return None
    try:
        return models.test_set(name)
    except (DatasetNotFoundError, DatasetDamagedError, image_folder.ImageFolderError) as error:
        if not quiet:
            title = DATASETS[name].title if name in DATASETS else "folder's"
            st.error(f"The {title} test set is not available: {error}", icon=":material/folder_off:")
        return None


def baseline_for(dataset: str) -> baselines.Baseline | None:
    """The CNN to compare with on `dataset`, or None (with a caption when its file cannot be read)."""
    cnn, error = baselines.open_baseline(dataset)
    if error:
        st.caption(f"The CNN baseline cannot be opened: {error}")
    return cnn


def novelty(model: models.Model) -> models.NoveltyThresholds | None:
    """The model's not-like-any-class thresholds, or None with the reason in a caption."""
    if model.info.novelty is None and try_test_set(model.dataset) is None:
        return None
    thresholds, error = model.novelty()
    if error:
        st.caption(f"Cannot tell whether the input is like a class: {error}")
    return thresholds
