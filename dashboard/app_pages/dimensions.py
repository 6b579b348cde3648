"""Capsule dimensions: 16 sliders over a digit capsule, and the paper's Figure 4."""

from __future__ import annotations

import numpy as np
import streamlit as st

from capsnet.nn.config import CapsNetConfig
from capsnet.readings import decoding
from dashboard import figures, guards, state, texts, widgets

PER_ROW = 4


def _slider_key(d: int) -> str:
    return f"dim_{d}"


def _set_sliders(values: np.ndarray) -> None:
    for d, value in enumerate(values):
        st.session_state[_slider_key(d)] = float(value)


st.title("Capsule dimensions", anchor=False)

model = guards.require_model(
    routings=("dynamic", "em")
)  # the EM network too, when it has a decoder: its 16 pose entries
if model is not None and not model.redraws:
    st.info(texts.NO_EM_DECODER, icon=":material/brush:")
    st.stop()
st.markdown(texts.dimensions(model.config if model is not None else CapsNetConfig()))
image = guards.require_input() if model is not None else None
if model is None or image is None:
    st.stop()

names = model.class_names
result = model.reading(image)  # poses (K, 16) and the prediction, whatever the network
prediction = result.prediction
choice = widgets.capsule_selectbox(
    "Capsule to edit",
    names,
    key=state.DIMENSIONS_CLASS,
    persist_state=state.ACROSS_PAGES,
    predicted_label="the winning capsule",
    help=f"Edit the winner (now {names[prediction]}), or see what another class's capsule holds for this input.",
)
klass = prediction if choice is None else choice
base = result.poses[klass]  # (D,) the capsule as read from the input
digit_dim = base.shape[0]
ranges = decoding.dimension_ranges(model.info, klass, base, digit_dim)
low, high = ranges.low, ranges.high

# new input, model or capsule: the sliders start from the capsule as read
origin = (model.key, state.input_digest(image), klass)
if st.session_state.get("dims_origin") != origin or any(
    _slider_key(d) not in st.session_state for d in range(digit_dim)
):
    _set_sliders(base)
    st.session_state["dims_origin"] = origin

st.caption(
    f"Input: **{state.input_label() or 'current input'}** · capsule **{names[klass]}**"
    + (" (the winner)" if choice is None else "")
    + ", "
    + f"{texts.SCORE_NAMES[result.symbol]} {result.symbol} = {result.scores[klass]:.2f}. "
    + texts.dimension_ranges(ranges.from_statistics, names[klass])
)

sliders_col, images_col = st.columns([2.2, 1], gap="large")
with sliders_col:
    for row in range(0, digit_dim, PER_ROW):
        cols = st.columns(PER_ROW)
        for d in range(row, min(row + PER_ROW, digit_dim)):
            span = float(high[d] - low[d])
            cols[d - row].slider(
                texts.POSE_LABELS[model.routing](d),  # EM: the row and column of the 4x4 pose
                min_value=float(low[d]),
                max_value=float(high[d]),
                step=max(round(span / 100, 4), 1e-4),
                format="%.3f",
                key=_slider_key(d),
            )
    st.button(
        "Reset", key="reset_dims", icon=":material/restart_alt:", on_click=_set_sliders, args=(base,),
        help="Back to the capsule as read from the input.",
    )  # fmt: skip

edited = np.array([st.session_state[_slider_key(d)] for d in range(digit_dim)], dtype=np.float32)
reconstruction = model.decode(edited, klass)
with images_col:
    original = model.decode(base, klass)
    st.image(
        [figures.pixel_image(image, 4), figures.pixel_image(original, 4)],
        caption=["input", f"from capsule {names[klass]}"],
        width=28 * 4,
        output_format="PNG",
    )
    # as wide as the column (a fixed 224 px ran out of the page at 1,100 px)
    st.image(
        figures.pixel_image(reconstruction, 8), caption="edited reconstruction", width="stretch", output_format="PNG"
    )
    moved = int(np.sum(~np.isclose(edited, base, atol=1e-6)))
    st.caption(f"{moved} of {digit_dim} dimensions moved." if moved else "No dimension moved yet: drag a slider.")

st.plotly_chart(
    figures.dimension_profile_figure(base, edited, low, high),
    key="dimension_profile",
    config={"displayModeBar": False},
)

st.subheader("Each dimension, perturbed (Figure 4 of the paper)", anchor=False)
steps = model.perturbation_steps.tolist()
st.markdown(texts.figure4(model.config, steps))
with st.spinner(texts.decoding_spinner(model.config, len(steps)), show_time=False):
    grid = model.perturbations(base, klass)  # (D, 11, H, W), or (D, 11, H, W, 3) in colour
st.plotly_chart(
    figures.perturbation_figure(grid, steps, [texts.POSE_LABELS[model.routing](d) for d in range(len(grid))]),
    key="perturbation_grid",
    config={"displayModeBar": False},
)
