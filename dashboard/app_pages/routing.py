"""Routing, for a CapsNet: dynamic routing by agreement on the current input, shown through the votes it weighs.

The page registry declares this view for the networks routed by agreement (`dashboard.pages.ROUTING`); EM's is
`em_routing.py`."""

from __future__ import annotations

import numpy as np
import streamlit as st

from capsnet.nn.config import CapsNetConfig
from capsnet.readings import agreement as ag
from capsnet.readings import explain as ex
from dashboard import figures, guards, routing_texts, state, widgets

OVERLAYS = {"votes": "the capsule each stroke votes for", "coupling": "how strongly it votes for the chosen capsule"}
STEP_CAPTION = "◀ ▶ step every chart below, and the stroke overlay, through the routing iterations together."
LEAD = (
    "Step through the iterations (◀ ▶), change r or the couplings: the class capsules are routed again in your browser. "
    "Look for the capsules that grow as votes that agree gain weight."
)


VOTE_PLOTS = ("votes_chosen", "votes_other")  # the two vote plots' keys: a click on a vote selects its capsule
CLICKED = "routing_vote_clicked"  # the last click taken, so that it is taken once
SELECT_CAPTION = (
    "Click a vote, or choose a primary capsule below: its vote is ringed in both plots, its receptive field is "
    "outlined on the input, and its couplings are drawn beside it. The choice holds on every page."
)


def _procedure(config: CapsNetConfig) -> None:
    """Procedure 1 in words and formulas, folded: the page leads with its live view."""
    with st.expander("How routing by agreement works (Procedure 1)", icon=":material/functions:"):
        st.markdown(
            "Between the primary capsules and the class capsules there are no fixed weights deciding *who talks to "
            "whom*: **routing** decides it anew for every input. Every primary capsule casts a **vote** for every "
            "class capsule; votes that **agree** with the consensus get more weight, in a few iterations."
        )
        explain_col, formula_col = st.columns([1.25, 1], gap="large")
        with explain_col:
            st.markdown(routing_texts.procedure(config))
        with formula_col:
            for line in routing_texts.PROCEDURE_LATEX:
                st.latex(line)
            st.caption("Repeated r times (3 in the paper). The squash keeps each |v_j| below 1.")


def _select_clicked_vote() -> None:
    """A vote clicked since the last run selects its primary capsule (the plots keep their click: take it once)."""
    for key in VOTE_PLOTS:
        event = st.session_state.get(key) or {}
        points = [p for p in (event.get("selection") or {}).get("points", []) if p.get("curve_number") == 0]
        if points and (key, points[0].get("point_index")) != st.session_state.get(CLICKED):
            st.session_state[CLICKED] = (key, points[0].get("point_index"))
            state.select_primary(int(points[0]["point_index"]))


st.title("Routing by agreement", anchor=False)
model = guards.require_model()
config = model.config if model is not None else CapsNetConfig()
image = guards.require_input() if model is not None else None
if model is None or image is None:
    _procedure(config)
    st.stop()

names, k = model.class_names, config.num_classes
iterations, choice = widgets.live_routing(model, image, LEAD)
_procedure(config)
result = model.explain(image, int(iterations))  # one forward pass: its trace carries the votes too
prediction = result.prediction
digit = prediction if choice is None else choice
other = result.runner_up if digit == prediction else prediction  # beside it: the runner-up, or the winner
r = result.iterations
widgets.away_from_trained(model, r)
st.subheader(f"Every vote, at r = {r}", anchor=False)
notice = st.empty()  # always there, filled or not: the charts below keep their place in the page when it changes
if r > 1 and result.first_prediction != prediction:
    notice.info(
        f"Routing changed the answer: with uniform couplings capsule {names[result.first_prediction]} was longest.",
        icon=":material/alt_route:",
    )


def _every_vote(
    config: CapsNetConfig,
    names: list[str],
    image: np.ndarray,
    votes: ag.Votes,
    digit: int,
    other: int,
    step: int,
    r: int,
) -> tuple[ag.PrimaryReading, ag.VoteView]:
    """The votes for the class in focus and its rival, one primary capsule selected in both: that capsule's reading
    and the focus's vote view."""
    k = config.num_classes
    _select_clicked_vote()
    st.caption(SELECT_CAPTION)
    chosen = widgets.primary_capsule_picker(config, default=ag.first_primary(votes, image, config))
    one = ag.primary_reading(votes, config, chosen)
    views = [ag.vote_view(votes, j) for j in (digit, other)]
    reach = max(float(np.abs(v.change).max()) for v in views)  # one colour scale for both plots
    for column, view in zip(st.columns(2, gap="medium"), views):
        with column:
            st.plotly_chart(
                figures.votes_figure(
                    view.points, view.coupling, view.agreement, view.sums, view.poses, names[view.digit], k,
                    config.primary_grid, step - 1, reach=reach, selected=chosen,
                ),
                key=VOTE_PLOTS[0] if view.digit == digit else VOTE_PLOTS[1],
                config={"displayModeBar": False},
                on_select="rerun",
                selection_mode="points",
            )  # fmt: skip
    main = views[0]
    st.markdown(routing_texts.votes_reading(names[digit], main.moved_share, config.num_primary, k, r))
    if r > 1:
        t, y, x = config.primary_position(main.largest)
        st.caption(
            f"The coupling that moved most: type {t + 1} at position ({y}, {x}), from {votes.uniform:.3f} to "
            f"{main.coupling[-1, main.largest]:.2f}. Hover a point for its coupling and its agreement û·v in the "
            "iteration shown."
        )

    return one, main


def _strokes_and_shares(
    config: CapsNetConfig,
    names: list[str],
    image: np.ndarray,
    votes: ag.Votes,
    one: ag.PrimaryReading,
    main: ag.VoteView,
    digit: int,
    step: int,
) -> None:
    """Where the votes come from (the strokes, coloured) and where they go (the selected capsule's couplings, the
    shares of every class)."""
    k = config.num_classes
    overlay_col, share_col = st.columns([1, 1.3], gap="large")
    with overlay_col:
        mode = st.radio(
            "Colour the strokes by", list(OVERLAYS), format_func=OVERLAYS.get, key="overlay_mode", horizontal=True
        )
        pixels = ag.pixel_votes(votes.coupling[step - 1], votes.primary_lengths, config)  # (H, W, K)
        st.plotly_chart(
            figures.vote_overlay_figure(image, pixels, names, digit if mode == "coupling" else None, box=one.box),
            key="vote_overlay",
            config={"displayModeBar": False},
        )
        st.caption(
            routing_texts.overlay(config) + " The dotted square is the selected primary capsule's receptive field."
        )
    with share_col:
        st.plotly_chart(
            figures.primary_coupling_figure(
                one.coupling, one.agreement, names,
                f"Where type {one.kind + 1} at ({one.y}, {one.x}) sends its vote", step - 1, uniform=votes.uniform,
            ),
            key="primary_coupling",
            config={"displayModeBar": False},
        )  # fmt: skip
        st.caption(routing_texts.primary_coupling(one.length, one.coupling[step - 1], names, step, votes.leak))
    share_left, share_right = st.columns(2, gap="large")
    with share_left:
        mass = ag.vote_mass(votes.coupling, votes.primary_lengths)  # weighted by |u_i|: the evidence present
        st.plotly_chart(figures.vote_share_figure(mass, names), key="vote_share", config={"displayModeBar": False})
        st.caption(routing_texts.vote_share(mass, names, prediction))
    with share_right:
        st.plotly_chart(
            figures.coupling_distribution_figure(main.coupling, names[digit], k),
            key="coupling_distribution",
            config={"displayModeBar": False},
        )


def _per_type_and_every_capsule(
    config: CapsNetConfig,
    names: list[str],
    result: ex.Explanation,
    votes: ag.Votes,
    one: ag.PrimaryReading,
    digit: int,
    step: int,
) -> None:
    """The couplings per primary-capsule type, and (while its expander is open) every primary capsule's."""
    k = config.num_classes
    st.subheader("Couplings per primary-capsule type", anchor=False)
    by_type = ex.coupling_by_type(
        result.coupling, result.primary_lengths, result.primary_types, result.primary_grid, "length"
    )  # (r, types, K)
    st.plotly_chart(
        figures.coupling_by_type_figure(
            by_type,
            result.iteration_lengths,
            names,
            config.m_plus,
            config.m_minus,
            step=step - 1,
            uniform=votes.uniform,
        ),  # fmt: skip
        key="coupling_by_type",
        config={"displayModeBar": False},
    )
    with st.expander("How is the heatmap computed?", icon=":material/functions:"):
        st.markdown(routing_texts.aggregation(config))

    # drawn only while open (on_change="rerun"): closed, it costs neither this run nor the browser a chart; the label
    # stays the same for every capsule, so the expander stays open when another capsule is chosen
    every_capsule = st.expander(
        "Every primary capsule's coupling to the capsule looked at, and the lengths per iteration",
        icon=":material/grid_on:",
        key="routing_maps_open",
        on_change="rerun",
    )
    with every_capsule:
        if every_capsule.open:
            maps_col, lines_col = st.columns([1.5, 1], gap="large")
            with maps_col:
                # (r, types, G, G)
                maps = ex.coupling_maps(result.coupling, digit, result.primary_types, result.primary_grid)
                st.plotly_chart(
                    figures.coupling_maps_figure(
                        maps,
                        names[digit],
                        num_classes=k,
                        step=step - 1,
                        selected=(one.kind, one.y, one.x),
                        uniform=votes.uniform,
                    ),  # fmt: skip
                    key="coupling_maps",
                    config={"displayModeBar": False},
                )
            with lines_col:
                st.plotly_chart(
                    figures.iteration_lengths_figure(result.iteration_lengths, names, config.m_plus, config.m_minus),
                    key="iteration_lengths",
                    config={"displayModeBar": False},
                )


@st.fragment
def _one_iteration(
    config: CapsNetConfig,
    names: list[str],
    image: np.ndarray,
    result: ex.Explanation,
    digit: int,
    other: int,
) -> None:
    """Every chart of one iteration, and the buttons that choose it: a click reruns this alone.

    The rest of the page (the sidebar, the explanation, the slider, the input's summary) does not depend on the
    iteration shown, so a click neither recomputes nor resends it, and the browser leaves it as it is.
    """
    r, votes = result.iterations, result.votes
    step = widgets.iteration_stepper(r, STEP_CAPTION)
    one, main = _every_vote(config, names, image, votes, digit, other, step, r)
    _strokes_and_shares(config, names, image, votes, one, main, digit, step)
    _per_type_and_every_capsule(config, names, result, votes, one, digit, step)


_one_iteration(config, names, image, result, digit, other)
