"""What each stage of Efficient-CapsNet computes on the current input (the Architecture page's view beside a stage's
formulas): the last convolution's maps, the primary capsules, one capsule's votes, its attention and the class
capsules, and the redraw, all from the one forward pass its Routing view reads (`Model.reading`)."""

from __future__ import annotations

import numpy as np
import streamlit as st

from capsnet.nn.efficient_capsnet import EfficientCapsNetConfig
from capsnet.readings import stages as arch
from capsnet.readings.explain_attention import AttentionExplanation
from dashboard import pages, state
from dashboard.figures import architecture as arch_fig
from dashboard.figures import pixel_image
from dashboard.models import Model

MAPS = 16  # the most active maps tiled


def efficient_stage_view(stage: str, model: Model, image: np.ndarray, config: EfficientCapsNetConfig) -> None:
    """Draw what stage `stage` of Efficient-CapsNet computes on `image`."""
    reading = model.reading(image)
    attention = reading.routing
    assert isinstance(attention, AttentionExplanation), "a view of Efficient-CapsNet opened with another network"
    names, prediction = model.class_names, reading.prediction
    longest = int(attention.primary_lengths.argmax())  # the primary capsule the views below follow
    if stage == "input":
        st.image(pixel_image(reading.image, 8), caption=f"x: {config.image_size}x{config.image_size}, in [0, 1]")
    elif stage == "convs":
        channels = arch.strongest_maps(attention.features, MAPS)
        st.plotly_chart(
            arch_fig.feature_maps_figure(attention.features[channels], channels, None, 1, height=360),
            key="arch_eff_convs", config={"displayModeBar": False},
        )  # fmt: skip
        st.caption(
            f"The {len(channels)} most active of the last convolution's {attention.features.shape[0]} maps "
            f"({attention.features.shape[1]}x{attention.features.shape[2]} each), which PrimaryCaps reads whole; "
            "hover for the map's number."
        )
    elif stage == "primary":
        st.plotly_chart(
            arch_fig.lengths_figure(attention.primary_lengths, [str(i + 1) for i in range(config.num_primary)],
                                    longest, "primary capsule i", "|u_i|", "capsule %{x}<br>|u| = "),
            key="arch_eff_primary", config={"displayModeBar": False},
        )  # fmt: skip
        st.caption(
            f"The lengths |u_i| of the {config.num_primary} primary capsules: each is one group of {config.primary_dim} "
            "of the depthwise convolution's outputs, squashed, and sees the whole image. The longest, "
            f"capsule {longest + 1}, has this pose:"
        )
        st.plotly_chart(
            arch_fig.pose_figure(attention.primary[longest], f"u_{longest + 1} ({config.primary_dim}-D)", 240),
            key="arch_eff_pose", config={"displayModeBar": False},
        )  # fmt: skip
    elif stage == "votes":
        st.plotly_chart(
            arch_fig.vote_lengths_figure(attention.vote_lengths[longest], names, prediction),
            key="arch_eff_votes", config={"displayModeBar": False},
        )  # fmt: skip
        st.caption(
            f"The votes of primary capsule {longest + 1} (the longest) for every class, |û_j|i|: its "
            f"{config.num_classes} guesses of each class capsule's pose, through its own {config.digit_dim}x"
            f"{config.primary_dim} matrices."
        )
    elif stage == "routing":
        st.plotly_chart(
            arch_fig.routing_figure(attention.coupling[longest][None], reading.scores[None], names, height=200),
            key="arch_eff_routing", config={"displayModeBar": False},
        )  # fmt: skip
        st.caption(
            f"In one pass primary capsule {longest + 1} sends {attention.coupling[longest, prediction]:.0%} of its vote "
            f"to class {names[prediction]} (uniform: {1 / config.num_classes:.0%}, before the learned bias); the "
            f"network predicts **{names[prediction]}** (|v| = {reading.scores[prediction]:.2f})."
        )
        st.page_link(state.page_path(pages.ROUTING), label="Turn this input's attention on the Routing page",
                     icon=pages.ROUTING.icon)  # fmt: skip
    elif reading.reconstruction is None:
        st.info("This Efficient-CapsNet has no decoder: it redraws nothing.", icon=":material/block:")
    else:
        input_col, output_col, _ = st.columns([1, 1, 1])
        input_col.image(pixel_image(reading.image, 5), caption="input x")
        output_col.image(pixel_image(reading.reconstruction, 5),
                         caption=f"x̂ from class capsule {names[reading.decode_class]}")  # fmt: skip
