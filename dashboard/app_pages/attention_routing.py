"""Routing, for a network routed by self-attention (Efficient-CapsNet): each primary capsule's attention over the class
capsules for the current input, in one pass, and where the evidence goes.

Mazzia, Salvetti & Chiaberge (2021), https://arxiv.org/abs/2101.12491. The pass runs in the knobs' component
(`dashboard.knobs`, `js/attention_view.js`): the server reads the class layer's votes once per input, and the
attention's sharpness, the learned bias and random couplings are recomputed in the browser. The page registry
declares this view for the networks routed by attention (`dashboard.pages.ROUTING`); dynamic routing's is
`routing.py`, EM's `em_routing.py`.
"""

from __future__ import annotations

import streamlit as st

from dashboard import guards
from dashboard.knobs import views
from dashboard.knobs.component import knobs

KNOBS = "attention_knobs"
LEAD = (
    "One pass, no iterations: each primary capsule spreads its vote over the classes by how well it agrees with each "
    "class's whole set of votes. Turn the sharpness to see how much the answer leans on that attention: 0 is uniform "
    "(no routing), 1 as trained; or put random couplings in its place."
)
HOW = r"""
**How self-attention routing works.** Each primary capsule $u_i$ votes for each class $j$, $\hat u_{j|i} = W_{ij} u_i$.
Its attention to class $j$ is how well its vote agrees with all of that class's votes, a softmax over the classes,
plus a learned bias; the class capsule is the weighted sum, squashed. There is no second pass: where dynamic routing
repeats the agreement $r$ times, this reads it once. The sharpness $\tau$ above scales the agreement before the
softmax (the network reads with $\tau = 1$).
"""
ATTENTION_LATEX = (
    r"c_{ij} = \operatorname{softmax}_j\!\Big(\tau\, \hat u_{j|i} \cdot \textstyle\sum_m \hat u_{j|m} / \sqrt{d}\Big)"
    r" + b_{ij}",
    r"v_j = \operatorname{squash}\Big(\textstyle\sum_i c_{ij}\, \hat u_{j|i}\Big), \quad "
    r"\operatorname{squash}(s) = (1 - e^{-\lVert s \rVert})\, s / \lVert s \rVert",
)

st.title("Self-attention routing", anchor=False)
model = guards.require_model(routings=("attention",))
image = guards.require_input() if model is not None else None
if model is None or image is None:
    st.stop()
knobs(views.attention(model, image, LEAD), key=KNOBS)
with st.expander("How self-attention routing works", icon=":material/functions:"):
    st.markdown(HOW)
    for line in ATTENTION_LATEX:
        st.latex(line)
