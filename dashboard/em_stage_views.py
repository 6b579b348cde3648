"""What each stage of the EM network computes on the current input (the Architecture page's view beside a stage's
formulas): Conv1's maps, every capsule grid's activations, the class activations and the redraw, all from the one
forward pass that the EM routing views read (`Model.reading(..., layers=True)`)."""

from __future__ import annotations

import numpy as np
import streamlit as st

from capsnet.nn.em_capsnet import EMCapsNetConfig
from capsnet.readings import stages as arch
from dashboard import pages, state
from dashboard.figures import activations_bar, pixel_image
from dashboard.figures import architecture as arch_fig
from dashboard.models import Model

MAPS = 16  # the most active maps or capsule types tiled


def _grid(acts: np.ndarray, caption: str, key: str) -> None:
    """The MAPS most active capsule types of a grid (T, n, n), tiled, each its activations a_i."""
    types = arch.strongest_maps(acts, MAPS)
    st.plotly_chart(
        arch_fig.feature_maps_figure(acts[types], types, None, 1, height=360, name="type", scale="a_i"),
        key=key, config={"displayModeBar": False},
    )  # fmt: skip
    st.caption(caption.format(shown=len(types), types=acts.shape[0], side=acts.shape[-1]))


def em_stage_view(stage: str, model: Model, image: np.ndarray, config: EMCapsNetConfig) -> None:
    """Draw what stage `stage` of the EM network computes on `image`."""
    reading = model.reading(image, layers=True)
    em = model.explain_em(image, layers=True)  # the same pass's EM account
    first, second = reading.layers
    names, r = model.class_names, reading.iterations
    if stage == "input":
        st.image(pixel_image(reading.image, 8), caption=f"x: {config.image_size}x{config.image_size}, in [0, 1]")
    elif stage == "conv1":
        assert em.features is not None  # kept with the layers
        channels = arch.strongest_maps(em.features, MAPS)
        st.plotly_chart(
            arch_fig.feature_maps_figure(em.features[channels], channels, None, 1, height=360),
            key="arch_em_conv1", config={"displayModeBar": False},
        )  # fmt: skip
        st.caption(
            f"The {len(channels)} most active of Conv1's {em.features.shape[0]} feature maps "
            f"({em.features.shape[1]}x{em.features.shape[2]} each); hover for the map's number."
        )
    elif stage == "primary":
        _grid(first.child_activations, "The {shown} most active of the {types} primary capsule types: each cell is a "
              "capsule, a 4x4 pose and this activation a_i, read from the feature maps under it by a 1x1 "
              "convolution ({side}x{side} cells).", "arch_em_primary")  # fmt: skip
    elif stage in ("convcaps1", "convcaps2"):
        layer = first if stage == "convcaps1" else second
        _grid(layer.parent_activations[-1], f"{layer.name}: the {{shown}} most active of its {{types}} capsule types "
              f"({{side}}x{{side}} cells), each cell's activation after {r} EM iteration{'s' if r != 1 else ''} over "
              f"its {layer.kernel}x{layer.kernel} window of the grid before.", f"arch_em_{stage}")  # fmt: skip
        st.page_link(state.page_path(pages.ROUTING), label=f"Step through {layer.name}'s EM routing of this input",
                     icon=pages.ROUTING.icon)  # fmt: skip
    elif stage == "classes":
        st.plotly_chart(activations_bar(reading.scores, names, reading.prediction), key="arch_em_classes",
                        config={"displayModeBar": False})  # fmt: skip
        st.caption(
            f"Every capsule of the last grid votes for each class; after {r} EM iteration{'s' if r != 1 else ''} the "
            f"tightest cluster wins: **{names[reading.prediction]}** "
            f"(a = {reading.scores[reading.prediction]:.2f})."
        )
    elif reading.reconstruction is None:
        st.info("This EM network has no decoder: it redraws nothing.", icon=":material/block:")
    else:
        input_col, output_col, _ = st.columns([1, 1, 1])
        input_col.image(pixel_image(reading.image, 5), caption="input x")
        output_col.image(pixel_image(reading.reconstruction, 5),
                         caption=f"x̂ from class capsule {names[reading.decode_class]}'s 16 pose entries")  # fmt: skip
