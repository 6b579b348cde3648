"""Routing, for a network routed by self-attention (Efficient-CapsNet): each primary capsule's attention over the class
capsules for the current input, in one pass, and where the evidence goes.

Mazzia, Salvetti & Chiaberge (2021), https://arxiv.org/abs/2101.12491. The page registry declares this view for the
networks routed by attention (`dashboard.pages.ROUTING`); dynamic routing's is `routing.py`, EM's `em_routing.py`.
"""

from __future__ import annotations

import streamlit as st

from dashboard import figures, guards, state

LEAD = (
    "One pass, no iterations: each primary capsule spreads its vote over the classes by how well it agrees with each "
    "class's whole set of votes. Look for the rows that lean to the predicted class."
)
HOW = r"""
**How self-attention routing works.** Each primary capsule $u_i$ votes for each class $j$, $\hat u_{j|i} = W_{ij} u_i$.
Its attention to class $j$ is how well its vote agrees with all of that class's votes, a softmax over the classes,
plus a learned bias; the class capsule is the weighted sum, squashed. There is no second pass: where dynamic routing
repeats the agreement $r$ times, this reads it once.
"""
ATTENTION_LATEX = (
    r"c_{ij} = \operatorname{softmax}_j\!\Big(\hat u_{j|i} \cdot \textstyle\sum_m \hat u_{j|m} / \sqrt{d}\Big) + b_{ij}",
    r"v_j = \operatorname{squash}\Big(\textstyle\sum_i c_{ij}\, \hat u_{j|i}\Big), \quad "
    r"\operatorname{squash}(s) = (1 - e^{-\lVert s \rVert})\, s / \lVert s \rVert",
)

st.title("Self-attention routing", anchor=False)
model = guards.require_model(routings=("attention",))
image = guards.require_input() if model is not None else None
if model is None or image is None:
    st.stop()
names = model.class_names
reading = model.reading(image)  # one pass, cached: the scores, and the couplings below
attention = model.explain_attention(image)
st.markdown(LEAD)
left, right = st.columns([1.4, 1], gap="large")
with left:
    st.plotly_chart(figures.attention_figure(attention.coupling, attention.primary_lengths, names),
                    key="attention_map", config={"displayModeBar": False})  # fmt: skip
with right:
    prediction = reading.prediction
    st.metric("Prediction", names[prediction], delta=f"|v| = {reading.scores[prediction]:.2f}", delta_color="off",
              delta_arrow="off", border=True)  # fmt: skip
    st.caption(f"Input: **{state.input_label() or 'current input'}**. The couplings' mean entropy is "
               f"{attention.entropy:.3f} (1: every class alike).")  # fmt: skip
    st.plotly_chart(
        figures.attention_share_figure(attention.coupling, attention.primary_lengths, names, prediction),
        key="attention_share", config={"displayModeBar": False},
    )  # fmt: skip
with st.expander("How self-attention routing works", icon=":material/functions:"):
    st.markdown(HOW)
    for line in ATTENTION_LATEX:
        st.latex(line)
