"""Routing: dynamic routing by agreement on the current input, animated one iteration per frame."""

from __future__ import annotations

import numpy as np
import streamlit as st

from capsnet import explain as ex
from capsnet.config import CapsNetConfig
from dashboard import figures, models, state, texts, widgets

MAX_ITERATIONS = 5  # the slider's end (or the model's own r, if more)
WEIGHTINGS = {"length": "weighted by primary-capsule length", "mean": "plain mean"}

st.title("Routing by agreement", anchor=False)
st.markdown(
    "Between the primary capsules and the digit capsules there are no fixed weights deciding *who talks to whom*: "
    "**routing** decides it anew for every input, in a few iterations. Press **▶ Play** under a chart to watch it."
)

model = models.require_model()
config = model.config if model is not None else CapsNetConfig()
explain_col, formula_col = st.columns([1.4, 1], gap="large")
with explain_col:
    st.markdown(texts.procedure(config))
with formula_col:
    for line in texts.PROCEDURE_LATEX:
        st.latex(line)
    st.caption("Repeated r times (3 in the paper). The squash keeps each |v_j| below 1.")

image = state.require_input() if model is not None else None
if model is None or image is None:
    st.stop()

names = model.class_names
c1, c2, c3 = st.columns([1.2, 1, 1])
iterations = c1.slider(
    "Routing iterations",
    min_value=1,
    max_value=max(MAX_ITERATIONS, config.routing_iterations),
    value=config.routing_iterations,
    key="routing_iterations",
    help=f"How many times to run the loop for this input. The model was trained with {config.routing_iterations}.",
)
weighting = c2.radio(
    "Aggregate couplings per type",
    list(WEIGHTINGS),
    format_func=WEIGHTINGS.get,
    key="coupling_weighting",
    help=f"How the {config.primary_grid**2} couplings of one primary-capsule type are summarised into one number.",
)
result = model.explain(image, int(iterations))
prediction = result.prediction
choice = widgets.capsule_selectbox(
    "Digit capsule for the spatial maps",
    names,
    key="routing_digit",
    predicted_label="the prediction",
    help=f"Whose couplings the maps show: the predicted capsule (now {names[prediction]}) or any other.",
    container=c3,
)
digit = prediction if choice is None else choice

first, last = result.iteration_lengths[0], result.iteration_lengths[-1]
st.markdown(
    f"Input: **{st.session_state.get(state.INPUT_LABEL) or 'current input'}**. With **{result.iterations}** "
    f"iteration{'s' if result.iterations != 1 else ''} the network predicts **{names[prediction]}** "
    f"(|v| = {last[prediction]:.2f}; after the first iteration, with uniform couplings, it was {first[prediction]:.2f})."
)
if int(np.argmax(first)) != prediction:
    st.info(
        f"Routing changed the answer: with uniform couplings capsule {names[int(np.argmax(first))]} was longest.",
        icon=":material/alt_route:",
    )

by_type = ex.coupling_by_type(
    result.coupling, result.primary_lengths, result.primary_types, result.primary_grid, weighting
)  # (r, types, K)
st.plotly_chart(
    figures.routing_animation(by_type, result.iteration_lengths, names, config.m_plus, config.m_minus),
    key="routing_animation",
    config={"displayModeBar": False},
)
with st.expander("How is the heatmap computed?", icon=":material/functions:"):
    st.markdown(texts.aggregation(config))

maps_col, lines_col = st.columns([1.5, 1], gap="large")
with maps_col:
    maps = ex.coupling_maps(result.coupling, digit, result.primary_types, result.primary_grid)  # (r, types, 6, 6)
    st.plotly_chart(
        figures.coupling_maps_figure(maps, names[digit]),
        key="coupling_maps",
        config={"displayModeBar": False},
    )
    st.caption(
        f"Every one of the {result.primary_types * result.primary_grid**2:,} primary capsules: its coupling to capsule "
        f"{names[digit]}{' (the prediction)' if choice is None else ''}. Bright cells send most of their vote there; "
        f"at iteration 1 every cell is 1/{len(names)}."
    )
with lines_col:
    st.plotly_chart(
        figures.iteration_lengths_figure(result.iteration_lengths, names, config.m_plus, config.m_minus),
        key="iteration_lengths",
        config={"displayModeBar": False},
    )

with st.expander("Which primary capsules are active?", icon=":material/grid_on:"):
    st.markdown(
        "A primary capsule's length says how sure it is that *its* feature (a stroke, an edge, a curve) is present "
        "at its place. Only active capsules have a say in routing."
    )
    st.plotly_chart(
        figures.primary_lengths_figure(
            ex.primary_maps(result.primary_lengths, result.primary_types, result.primary_grid)
        ),
        key="primary_lengths",
        config={"displayModeBar": False},
    )
