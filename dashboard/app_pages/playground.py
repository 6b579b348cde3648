"""Routing playground: dynamic routing and EM routing side by side on a dozen votes in a plane that you can move, then
dynamic routing on the real model's votes.

The toy runs in the knobs' component (`dashboard.knobs.playground`): the server sends every preset's votes once, and
choosing a preset, stepping, changing r, dragging a vote and moving |s| along the curves run no server. The real
model's part below stays a Streamlit fragment."""

from __future__ import annotations

import numpy as np
import streamlit as st

from capsnet.nn import em_routing
from capsnet.nn.config import CapsNetConfig
from capsnet.readings import playground as pg
from dashboard import guards, models, routing_texts, state, texts, widgets
from dashboard.figures import playground as figs
from dashboard.knobs import playground as toy_knobs
from dashboard.knobs.component import knobs

KNOBS = "playground_knobs"
MAX_ITERATIONS = toy_knobs.MAX_ITERATIONS
REAL_ITERATIONS, REAL_STEP, REAL_PARENT = "playground_real_iterations", "playground_real_step", "playground_real_parent"
PAPER = CapsNetConfig()  # the margin loss's m+, m- and lambda as the paper sets them
LEAD = (
    "Drag a vote in either plane, step through the iterations (◀ ▶) or pick another situation, and both routings run "
    "again at once: look for the votes that gain weight, and for those that dynamic routing (c_ij) and EM (R_ij) "
    "weigh differently."
)

INTRO = (
    "Routing by agreement with everything in view: **3 parent capsules** and **12 child capsules**, whose votes "
    "û_j|i are points in a plane (in the real network they have 16 dimensions). Each child splits one unit of "
    "weight among the parents (c_ij); each parent sums the votes it gets (s_j), squashes the sum (v_j), and every "
    "vote that points the same way as v_j earns its child more weight for that parent in the next iteration. "
    "Beside it, **EM routing** (the second capsule paper) routes the same votes: each parent fits a Gaussian to the "
    "votes assigned to it (R_ij), becomes active (a_j) when they cluster tightly, and each child's votes go to the "
    "parents under whose Gaussian they are likely. Pick a situation, step through the iterations, and move a vote to "
    "see what changes in both."
)
PRESET_HELP = {
    pg.PRESETS[0]: "Eight children agree on parent 1, four point elsewhere: watch the eight send parent 1 "
    "ever more of their weight, and the four outliers take theirs away.",
    pg.PRESETS[1]: "Parent 1's votes form two groups on opposite sides, seven against five: v_1 follows the larger "
    "group, and the smaller one moves its weight to parents 2 and 3, whose votes agree on nothing.",
    pg.PRESETS[2]: "Every parent's votes point all round the circle and cancel: each s_j stays short, the squash "
    "makes v_j shorter still, and the couplings hardly leave 1/3.",
    pg.PRESETS[
        3
    ]: "Every child votes for parent 1 in a tight, short cluster and for parent 2 in a wide one twice as far "
    "out: dynamic routing sends the children to the long sum (parent 2), EM to the tight Gaussian (parent 1).",
    pg.PRESETS[4]: "Eleven votes for parent 1 agree; child 12's points the same way, three times as far: dynamic "
    "routing gives it almost all of child 12 (a long vote agrees by the dot product), EM almost none (it lies far "
    "outside parent 1's Gaussian).",
    pg.PRESETS[5]: "Children 1-8 vote for parents 1 and 2 alike, a little tighter for parent 1: dynamic routing lets "
    "both parents keep them (both v_j grow long), EM's parents compete and parent 1 takes most of the data.",
}
SQUASH_LATEX = r"v_j = \frac{\lVert s_j\rVert^2}{1 + \lVert s_j\rVert^2}\,\frac{s_j}{\lVert s_j\rVert}"


def _explained() -> None:
    """What the toy shows, its formulas and the two curves', folded: the page leads with the live toy."""
    with st.expander("How the toy routes: Procedure 1, EM's two steps and the two curves", icon=":material/functions:"):
        intro_col, formula_col = st.columns([1.25, 1], gap="large")
        with intro_col:
            st.markdown(INTRO)
        with formula_col:
            for line in routing_texts.PROCEDURE_LATEX:
                st.latex(line)
            st.caption("b_ij starts at 0, so the first iteration's couplings are uniform: 1/3 here.")
        st.markdown("**EM routing's M-step and E-step**")
        m_col, e_col = st.columns(2, gap="large")
        for column, lines in ((m_col, routing_texts.EM_M_STEP_LATEX), (e_col, routing_texts.EM_E_STEP_LATEX)):
            for line in lines:
                column.latex(line)
        st.caption(
            f"R_ij starts uniform (1/3 here); λ grows each iteration ({em_routing.LAMBDA_FINAL:g} (1 − "
            f"{em_routing.LAMBDA_RATE:g}^t))."
        )
        st.markdown("**The two curves: squash (equation 1) and the margin loss (equation 4)**")
        squash_col, margin_col = st.columns(2, gap="large")
        with squash_col:
            st.latex(SQUASH_LATEX)
            st.caption("Short sums shrink to almost nothing (|v| grows like |s|² near 0), long ones approach 1 but "
                       "never reach it: a length can be read as a probability.")  # fmt: skip
        with margin_col:
            st.latex(texts.MARGIN_LATEX)
            st.caption(f"Training pushes the true class's |v_k| above m⁺ = {PAPER.m_plus} and every other class's "
                       f"below m⁻ = {PAPER.m_minus}; λ = {PAPER.down_weight} halves the absent classes' part.")  # fmt: skip


# ---------------------------------------------------------------- the real model


def _move(key: str, delta: int, r: int) -> None:
    st.session_state[key] = int(np.clip(st.session_state.get(key, 1) + delta, 1, r))


def _stepper(key: str, r: int, prefix: str) -> int:
    """Previous / Next over iterations 1..r; returns the iteration shown (from 1)."""
    step = int(np.clip(st.session_state.get(key, 1), 1, r))
    st.session_state[key] = step
    label, back, forward = st.columns([1.6, 1, 1], vertical_alignment="center")
    with label.container(key=f"{prefix}_shown"):
        st.markdown(f"Iteration **{step} of {r}**")
    back.button("◀ Previous", key=f"{prefix}_prev", on_click=_move, args=(key, -1, r), disabled=step == 1,
                use_container_width=True)  # fmt: skip
    forward.button("Next ▶", key=f"{prefix}_next", on_click=_move, args=(key, 1, r), disabled=step == r,
                   use_container_width=True)  # fmt: skip
    return step


@st.fragment
def _real(model: models.Model, image: np.ndarray) -> None:
    """The same stepping on the real model's votes for one digit capsule."""
    names, config = model.class_names, model.config
    controls = st.columns([1, 1], vertical_alignment="bottom")
    r = controls[0].slider(
        "Routing iterations r", 1, max(MAX_ITERATIONS, config.routing_iterations), key=REAL_ITERATIONS,
        value=None if REAL_ITERATIONS in st.session_state else config.routing_iterations,  # None: the kept value
    )  # fmt: skip
    reading = model.explain(image, int(r))
    votes, prediction = reading.votes, reading.prediction
    choice = widgets.capsule_selectbox(
        "Capsule", names, key=REAL_PARENT, predicted_label="the prediction", container=controls[1],
        help=f"Whose votes to show: the longest capsule (now {names[prediction]}) or any other.",
    )  # fmt: skip
    digit = prediction if choice is None else choice
    plane = model.vote_plane(image, int(r), digit)  # cached: a step only redraws
    step = _stepper(REAL_STEP, plane.iterations, "playground_real")
    chart_col, side_col = st.columns([1.25, 1], gap="medium")
    with chart_col:
        st.plotly_chart(
            figs.plane_figure(plane.points, plane.coupling, plane.agreement, plane.sums, plane.poses, plane.parents,
                              [f"capsule {names[digit]}"], step - 1, label_children=False),
            key="playground_real_chart", config={"displayModeBar": False},
        )  # fmt: skip
    with side_col:
        st.plotly_chart(
            figs.lengths_figure(votes.lengths, range(len(names)), [f"capsule {n}" for n in names], step - 1),
            key="playground_real_lengths", config={"displayModeBar": False},
        )  # fmt: skip
        change = pg.coupling_change(plane)[:, 0]  # (N,)
        c = plane.coupling[step - 1, :, 0]
        st.markdown(
            f"{config.num_primary:,} votes for capsule **{names[digit]}**, projected on the plane of v_j and the votes' "
            f"main spread. In iteration {step} their couplings run from {c.min():.3f} to {c.max():.3f} "
            f"(1/K = {1 / len(names):.3f}); by iteration {plane.iterations}, {np.mean(change > 0.01):.0%} of them "
            f"rose by more than 0.01, {np.mean(change < -0.01):.0%} fell."
        )


st.title("Routing playground", anchor=False)
knobs(toy_knobs.toy(PRESET_HELP, LEAD), key=KNOBS)
_explained()

st.divider()
st.subheader("The same on the real model's votes", anchor=False)
st.markdown(
    "The network's own routing for the current input: every primary capsule's vote for one digit capsule, "
    "16-D, drawn on the plane of its final v_j and of the votes' main spread (the Routing page's view)."
)
model = guards.require_model()
image = guards.require_input() if model is not None else None
if model is not None and image is not None:
    st.caption(f"Input: **{state.input_label() or 'current input'}**.")
    _real(model, image)
