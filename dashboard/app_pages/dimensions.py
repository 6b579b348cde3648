"""Capsule dimensions: 16 sliders over a class capsule, redrawn in the browser at every move, and the paper's
Figure 4.

The sliders, the capsule in focus and the redraws run in the knobs' component (`dashboard.knobs`): the server reads
the input once, and runs again only when the capsule in focus changes (the link and Figure 4 follow it)."""

from __future__ import annotations

import streamlit as st

from capsnet.nn.config import CapsNetConfig
from capsnet.readings import decoding
from dashboard import figures, guards, state, texts
from dashboard.knobs import views
from dashboard.knobs.component import knobs

KNOBS = "dimensions_knobs"
LEAD = "Drag a slider: the capsule's pose changes and the decoder redraws it at once. Look for a slider that moves "
LEAD += "one aspect of the drawing (thickness, slant, width) and leaves the rest alone."


def _capsule_moved() -> None:
    """The component chose another capsule: the page's link and Figure 4 follow it."""
    chosen = (st.session_state.get(KNOBS) or {}).get("capsule")
    if chosen is not None:  # -1: the prediction's, whatever the input (`state.page_capsule`)
        state.set_page_capsule(state.DIMENSIONS_CLASS, int(chosen))


st.title("Capsule dimensions", anchor=False)
model = guards.require_model(routings=guards.EVERY_ROUTING)  # any network with poses and a decoder
if model is not None and not model.redraws:
    st.info(texts.no_decoder(model.network.title, model.network.name, model.network.presets), icon=":material/brush:")
    st.stop()
image = guards.require_input() if model is not None else None
if model is None or image is None:
    with st.expander("What do the dimensions encode?", icon=":material/info:"):
        st.markdown(texts.dimensions(model.config if model is not None else CapsNetConfig()))
    st.stop()

names = model.class_names
result = model.reading(image)  # poses (K, 16) and the prediction, whatever the network
chosen = state.page_capsule(state.DIMENSIONS_CLASS)
klass = result.prediction if chosen is None else chosen
ranges = decoding.dimension_ranges(model.info, klass, result.poses[klass], result.poses.shape[1])
st.caption(
    f"Input: **{state.input_label() or 'current input'}** · the network reads **{names[result.prediction]}** "
    f"({texts.SCORE_NAMES[result.symbol]} {result.symbol} = {result.scores[result.prediction]:.2f}). "
    + texts.dimension_ranges(ranges.from_statistics, names[klass])
)
knobs(views.dimensions(model, image, chosen, LEAD), key=KNOBS, reports=("capsule",), on_change=_capsule_moved)
with st.expander("What do the dimensions encode?", icon=":material/info:"):
    st.markdown(texts.dimensions(model.config))

base = result.poses[klass]
st.subheader(f"Each dimension of capsule {names[klass]}, perturbed (Figure 4 of the paper)", anchor=False)
steps = model.perturbation_steps.tolist()
st.markdown(texts.figure4(model.config, steps))
with st.spinner(texts.decoding_spinner(model.config, len(steps)), show_time=False):
    grid = model.perturbations(base, klass)  # (D, 11, H, W), or (D, 11, H, W, 3) in colour
st.plotly_chart(
    figures.perturbation_figure(grid, steps, [texts.pose_label(model.routing)(d) for d in range(len(grid))]),
    key="perturbation_grid",
    config={"displayModeBar": False},
)
