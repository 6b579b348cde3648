"""Routing playground: dynamic routing and EM routing side by side on a dozen votes in a plane that you can move, then
dynamic routing on the real model's votes."""

from __future__ import annotations

import numpy as np
import streamlit as st

from capsnet.nn import em_routing
from capsnet.nn.config import CapsNetConfig
from capsnet.readings import playground as pg
from dashboard import guards, models, routing_texts, state, texts, widgets
from dashboard.figures import playground as figs

MAX_ITERATIONS = 5
PRESET, VOTES, VOTES_OF = "playground_preset", "playground_votes", "playground_votes_of"
ITERATIONS, STEP = "playground_iterations", "playground_step"
CHILD, PARENT, X, Y = "playground_child", "playground_parent", "playground_x", "playground_y"
CHART = "playground_chart"
NORM = "playground_norm"  # the |s| moved along the curves
REAL_ITERATIONS, REAL_STEP, REAL_PARENT = "playground_real_iterations", "playground_real_step", "playground_real_parent"
NAMES = [f"parent {j + 1}" for j in range(pg.PARENTS)]
PAPER = CapsNetConfig()  # the margin loss's m+, m- and lambda as the paper sets them

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


# ---------------------------------------------------------------- state and callbacks


def _init() -> None:
    """The session's defaults (and the widgets' values back after a visit to another page)."""
    if VOTES not in st.session_state:
        st.session_state[VOTES_OF] = pg.PRESETS[0]
        st.session_state[VOTES] = pg.preset_votes(pg.PRESETS[0])
    defaults = {
        PRESET: st.session_state[VOTES_OF],
        ITERATIONS: 3,
        STEP: 1,
        CHILD: 0,
        PARENT: 0,
        REAL_STEP: 1,
        NORM: 1.0,
    }
    for key, value in defaults.items():
        st.session_state.setdefault(key, value)
    if X not in st.session_state or Y not in st.session_state:
        _follow_choice()


def _follow_choice() -> None:
    """Point the x and y inputs at the chosen vote."""
    x, y = st.session_state[VOTES][st.session_state[PARENT], st.session_state[CHILD]]
    st.session_state[X], st.session_state[Y] = round(float(x), 2), round(float(y), 2)


def _load_preset() -> None:
    name = st.session_state[PRESET] or st.session_state[VOTES_OF]
    st.session_state[PRESET] = st.session_state[VOTES_OF] = name
    st.session_state[VOTES] = pg.preset_votes(name)
    _follow_choice()


def _choose_preset() -> None:
    """Another situation: its votes, opened at its first iteration (a reset keeps the iteration shown)."""
    st.session_state[STEP] = 1
    _load_preset()


def _move_vote() -> None:
    st.session_state[VOTES] = pg.move_vote(
        st.session_state[VOTES], st.session_state[PARENT], st.session_state[CHILD],
        (st.session_state[X], st.session_state[Y]),
    )  # fmt: skip


def _vote_of(point: dict) -> tuple[int, int] | None:
    """(child, parent) of a clicked point from its customdata, or None for a mark that is not a vote.

    The browser sends a row of a packed (binary) customdata array as an object {"0": ..., "1": ...}, a listed one as a list.
    """
    data = point.get("customdata")
    values = [data[k] for k in sorted(data, key=int)] if isinstance(data, dict) else list(data or [])
    if len(values) < 2:
        return None
    child, parent = int(values[0]), int(values[1])
    return (child, parent) if 0 <= child < pg.CHILDREN and 0 <= parent < pg.PARENTS else None


def _clicked() -> None:
    """A click on a vote in the chart chooses it (its customdata holds the child and the parent)."""
    points = st.session_state[CHART].selection.points if CHART in st.session_state else []
    chosen = [vote for vote in map(_vote_of, points) if vote is not None]
    if chosen:
        st.session_state[CHILD], st.session_state[PARENT] = chosen[0]
        _follow_choice()


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


def _child_reading(routing: pg.Routing, step: int, child: int) -> str:
    c, a = routing.coupling[step - 1, child], routing.agreement[step - 1, child]
    shares = ", ".join(f"**{c[j]:.3f}** to {NAMES[j]}" for j in range(len(NAMES)))
    agree = ", ".join(f"{a[j]:+.2f}" for j in range(len(NAMES)))
    return f"Child {child + 1} sends {shares}. Its agreements û·v_j after this iteration: {agree}."


def _em_reading(em: pg.EMRouting, step: int, child: int) -> str:
    r, std = em.assignments[step - 1, child], em.stds[step - 1]
    shares = ", ".join(f"**{r[j]:.3f}** to {NAMES[j]}" for j in range(len(NAMES)))
    spreads = ", ".join(f"σ = {std[j].mean():.2f}" for j in range(len(NAMES)))
    return (f"Under EM, child {child + 1} gives {shares}. The Gaussians this M-step fitted: {spreads} "
            f"(λ = {em.inverse_temperatures[step - 1]:.3f} in this iteration).")  # fmt: skip


# ---------------------------------------------------------------- the toy


@st.fragment
def _toy() -> None:
    """Everything about the toy votes: a click, a step or a moved vote reruns this alone."""
    top = st.columns([1.3, 1, 1.1], vertical_alignment="bottom")
    top[0].selectbox("Situation", pg.PRESETS, key=PRESET, on_change=_choose_preset)
    top[1].slider("Routing iterations r", 1, MAX_ITERATIONS, key=ITERATIONS)
    top[2].button("Reset to the preset", key="playground_reset", icon=":material/restart_alt:", on_click=_load_preset,
                  help="Put every moved vote back where the situation has it.")  # fmt: skip
    st.caption(PRESET_HELP[st.session_state[VOTES_OF]])
    votes = st.session_state[VOTES]
    routing = pg.route(votes, int(st.session_state[ITERATIONS]))
    plane = pg.toy_plane(routing)
    em = pg.em_route(votes, int(st.session_state[ITERATIONS]))
    step = _stepper(STEP, routing.iterations, "playground")  # one iteration for both algorithms
    child, parent = int(st.session_state[CHILD]), int(st.session_state[PARENT])

    chart_col, em_col = st.columns(2, gap="medium")
    with chart_col:
        st.markdown("**Dynamic routing** (Sabour et al. 2017): c_ij, s_j and v_j")
        st.plotly_chart(
            figs.plane_figure(plane.points, plane.coupling, plane.agreement, plane.sums, plane.poses,
                              plane.parents, NAMES, step - 1, selected=(parent, child)),
            key=CHART, on_select=_clicked, selection_mode="points", config={"displayModeBar": False},
        )  # fmt: skip
    with em_col:
        st.markdown("**EM routing** (Hinton et al. 2018): R_ij, each parent's Gaussian and a_j")
        st.plotly_chart(
            figs.em_plane_figure(votes, em.assignments, em.means, em.stds, em.activations, NAMES, step - 1,
                                 selected=(parent, child)),
            key="playground_em_chart", config={"displayModeBar": False},
        )  # fmt: skip
    with st.container(key="playground_comparison"):
        st.markdown(routing_texts.routing_comparison(routing.coupling, routing.lengths, em.assignments,
                                                     em.activations, NAMES, step))  # fmt: skip
        st.caption(routing_texts.CONTRAST)  # what holds in general: once, under what this state shows
    bars_col, em_bars_col = st.columns(2, gap="medium")
    with bars_col:
        st.plotly_chart(
            figs.coupling_bars_figure(plane.coupling[step - 1], plane.parents, NAMES, selected=child),
            key="playground_bars", config={"displayModeBar": False},
        )  # fmt: skip
        with st.container(key="playground_child_reading"):
            st.markdown(_child_reading(routing, step, child))
    with em_bars_col:
        st.plotly_chart(
            figs.coupling_bars_figure(em.assignments[step - 1], plane.parents, NAMES, selected=child, symbol="R"),
            key="playground_em_bars", config={"displayModeBar": False},
        )  # fmt: skip
        with st.container(key="playground_em_reading"):
            st.markdown(_em_reading(em, step, child))

    move_col, lengths_col = st.columns([1, 1.25], gap="large")
    with move_col:
        st.markdown("**Move a vote.** Click a point in the chart, or choose it here, then set where it points.")
        which = st.columns(2)
        which[0].selectbox("Child", range(pg.CHILDREN), format_func=lambda i: f"child {i + 1}", key=CHILD,
                           on_change=_follow_choice)  # fmt: skip
        which[1].selectbox("Its vote for", range(pg.PARENTS), format_func=NAMES.__getitem__, key=PARENT,
                           on_change=_follow_choice)  # fmt: skip
        where = st.columns(2)
        bound = pg.MAX_COORDINATE
        where[0].number_input("x", -bound, bound, step=0.1, format="%.2f", key=X, on_change=_move_vote)
        where[1].number_input("y", -bound, bound, step=0.1, format="%.2f", key=Y, on_change=_move_vote)
        moved = int(np.sum(np.any(np.abs(votes - pg.preset_votes(st.session_state[VOTES_OF])) > 1e-6, axis=-1)))
        st.caption(f"{moved} vote{'s' if moved != 1 else ''} moved from the preset." if moved else "No vote moved yet.")
    with lengths_col:
        st.plotly_chart(figs.lengths_figure(routing.lengths, plane.parents, NAMES, step - 1), key="playground_lengths",
                        config={"displayModeBar": False})  # fmt: skip
        low, high = float(em.activations.min()), float(em.activations.max())
        pad = max(0.02, (high - low) * 0.15)
        st.plotly_chart(
            figs.lengths_figure(em.activations, plane.parents, NAMES, step - 1, quantity="a_j",
                                span=(max(0.0, low - pad), min(1.0, high + pad))),
            key="playground_em_activations", config={"displayModeBar": False},
        )  # fmt: skip


@st.fragment
def _curves() -> None:
    """Equation 1 and equation 4 as curves, with one vector's |s| to move along them."""
    norm = float(st.slider("Length of a sum |s_j|", 0.0, 5.0, step=0.05, key=NORM))
    length = pg.squash_length(norm)
    present, absent = pg.margin_point(PAPER, length)
    st.markdown(
        f"|s_j| = **{norm:.2f}** squashes to |v_j| = **{length:.3f}**. As a class capsule of that length it would "
        f"cost **{present:.3f}** if its class were present, **{absent:.3f}** if absent."
    )
    squash_col, margin_col = st.columns(2, gap="large")
    with squash_col:
        st.latex(SQUASH_LATEX)
        norms, lengths = pg.squash_curve()
        st.plotly_chart(figs.squash_figure(norms, lengths, np.array([[norm, length]]), [0], ["v"]),
                        key="playground_squash", config={"displayModeBar": False})  # fmt: skip
        st.caption("Short sums shrink to almost nothing (|v| grows like |s|² near 0), long ones approach 1 but never "
                   "reach it: a length can be read as a probability.")  # fmt: skip
    with margin_col:
        st.latex(texts.MARGIN_LATEX)
        axis, present_curve, absent_curve = pg.margin_curves(PAPER)
        st.plotly_chart(
            figs.margin_figure(axis, present_curve, absent_curve, PAPER.m_plus, PAPER.m_minus, np.array([length]),
                               ["|v|"]),
            key="playground_margin", config={"displayModeBar": False},
        )  # fmt: skip
        st.caption(f"Training pushes the true class's |v_k| above m⁺ = {PAPER.m_plus} and every other class's below "
                   f"m⁻ = {PAPER.m_minus}; λ = {PAPER.down_weight} halves the absent classes' part.")  # fmt: skip


# ---------------------------------------------------------------- the real model


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
intro_col, formula_col = st.columns([1.25, 1], gap="large")
with intro_col:
    st.markdown(INTRO)
with formula_col:
    for line in routing_texts.PROCEDURE_LATEX:
        st.latex(line)
    st.caption("b_ij starts at 0, so the first iteration's couplings are uniform: 1/3 here.")
with st.expander("EM routing's M-step and E-step"):  # the page's width: its formulas are long
    m_col, e_col = st.columns(2, gap="large")
    for column, lines in ((m_col, routing_texts.EM_M_STEP_LATEX), (e_col, routing_texts.EM_E_STEP_LATEX)):
        for line in lines:
            column.latex(line)
    st.caption(
        f"R_ij starts uniform (1/3 here); λ grows each iteration ({em_routing.LAMBDA_FINAL:g} (1 − "
        f"{em_routing.LAMBDA_RATE:g}^t))."
    )
_init()
_toy()
st.subheader("The two curves behind it", anchor=False)
_curves()

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
