"""Routing: dynamic routing by agreement on the current input, shown through the votes it weighs."""

from __future__ import annotations

from typing import Any

import numpy as np
import streamlit as st

from capsnet.nn.config import CapsNetConfig
from capsnet.nn.routing import MAX_ROUTING_ITERATIONS
from capsnet.readings import agreement as ag
from capsnet.readings import explain as ex
from capsnet.readings.em_layers import LAYER_NAMES, ConvLayerRouting
from dashboard import figures, guards, models, pages, routing_texts, state, widgets

MAX_ITERATIONS = 5  # the slider's end (or the model's own r, if more)
STEP = "routing_step"  # the iteration shown, from 1
STEP_OF = "routing_step_of"  # the number of iterations it was shown for
OVERLAYS = {"votes": "the capsule each stroke votes for", "coupling": "how strongly it votes for the chosen capsule"}
EM_INTRO = (
    "In the EM network every capsule layer after the primary capsules is routed by **EM**: each parent is a Gaussian "
    "over the 16 entries of its children's votes, fitted to the votes given to it (the **M-step**), and each child is "
    "then given to the parents whose Gaussians explain its votes best (the **E-step**), a few times. Choose a layer: "
    "the class capsules, or ConvCaps1 and ConvCaps2, where parents at every position compete for each child."
)
CLASS_LAYER = "class capsules"  # the EM layer choice's first option; ConvCaps1 and ConvCaps2 follow
STEP_CAPTION = "◀ ▶ step every chart on this page, and the stroke overlay, through the routing iterations together."


VOTE_PLOTS = ("votes_chosen", "votes_other")  # the two vote plots' keys: a click on a vote selects its capsule
CLICKED = "routing_vote_clicked"  # the last click taken, so that it is taken once
SELECT_CAPTION = (
    "Click a vote, or choose a primary capsule below: its vote is ringed in both plots, its receptive field is "
    "outlined on the input, and its couplings are drawn beside it. The choice holds on every page."
)


def _select_clicked_vote() -> None:
    """A vote clicked since the last run selects its primary capsule (the plots keep their click: take it once)."""
    for key in VOTE_PLOTS:
        event = st.session_state.get(key) or {}
        points = [p for p in (event.get("selection") or {}).get("points", []) if p.get("curve_number") == 0]
        if points and (key, points[0].get("point_index")) != st.session_state.get(CLICKED):
            st.session_state[CLICKED] = (key, points[0].get("point_index"))
            state.select_primary(int(points[0]["point_index"]))


def _move(delta: int, iterations: int) -> None:
    st.session_state[STEP] = int(np.clip(st.session_state.get(STEP, iterations) + delta, 1, iterations))


def _stepper(r: int, caption: str) -> int:
    """The iteration shown (1..r), and with more than one the page's ◀ Previous / Next ▶ that set it: one iteration
    for the whole page, which every chart below draws. A new number of iterations opens on its last."""
    if st.session_state.get(STEP_OF) != r:
        st.session_state[STEP_OF], st.session_state[STEP] = r, r
    step = int(np.clip(st.session_state.get(STEP, r), 1, r))
    st.session_state[STEP] = step
    if r > 1:
        with st.container(key="routing_step"):
            label, back, forward, note = st.columns([1.5, 1, 1, 2.6], vertical_alignment="center")
            label.markdown(f"Showing **iteration {step} of {r}**")
            back.button("◀ Previous", key="routing_prev", on_click=_move, args=(-1, r), disabled=step == 1,
                        use_container_width=True)  # fmt: skip
            forward.button("Next ▶", key="routing_next", on_click=_move, args=(1, r), disabled=step == r,
                           use_container_width=True)  # fmt: skip
            note.caption(caption)
    return step


def _em_routing(model: models.Model) -> None:
    """The page for the EM network: EM routing on the current input, one iteration at a time, in the class layer or
    in ConvCaps1 or ConvCaps2 (one child capsule at a time)."""
    st.markdown(EM_INTRO)
    m_col, e_col = st.columns(2, gap="large")
    with m_col:
        st.markdown("**M-step**, for each parent j:")
        for line in routing_texts.EM_M_STEP_LATEX:
            st.latex(line)
    with e_col:
        st.markdown("**E-step**, for each child i:")
        for line in routing_texts.EM_E_STEP_LATEX:
            st.latex(line)
    image = guards.require_input()
    if image is None:
        st.stop()
    config, names = model.config, model.class_names
    layer = st.segmented_control(
        "Layer", [CLASS_LAYER, *LAYER_NAMES], key=state.EM_LAYER, default=CLASS_LAYER, required=True,
        persist_state=state.ACROSS_PAGES,
        help="The class capsules route the last grid to the classes; ConvCaps1 routes the primary capsules' 3x3 "
        "windows, ConvCaps2 ConvCaps1's.",
    )  # fmt: skip
    c1, c2 = st.columns([1.2, 2.2], gap="medium")
    if layer == CLASS_LAYER:
        c2 = c2.columns(2)[0]  # a select as wide as a third of the page
    asked = min(state.routing_iterations() or 1, MAX_ROUTING_ITERATIONS)
    iterations = c1.slider(
        "EM iterations", min_value=1, max_value=max(MAX_ITERATIONS, config.routing_iterations, asked),
        key=state.ROUTING_ITERATIONS, persist_state=state.ACROSS_PAGES,
        help=f"How many times every capsule layer routes, for this input. The model was trained with "
        f"{config.routing_iterations}.",
        value=None if state.routing_iterations() is not None else config.routing_iterations,  # None: the kept value
    )  # fmt: skip
    reading = model.explain_em(image, iterations=int(iterations))
    prediction = reading.prediction
    r = reading.iterations
    said = (
        f"Input: **{state.input_label() or 'current input'}**. With **{r}** EM iteration{'s' if r != 1 else ''} "
        f"the network predicts **{names[prediction]}** (a = {reading.activations[prediction]:.2f})."
    )
    if layer != CLASS_LAYER:
        st.markdown(said)
        step = _stepper(r, "◀ ▶ step both charts through the EM iterations together.")
        _em_conv_layer(model.em_layers(image, int(iterations))[LAYER_NAMES.index(layer)], step, c2)
        return
    choice = widgets.capsule_selectbox("Class to look at", names, key=state.ROUTING_CAPSULE,
                                       predicted_label="the prediction", container=c2,
                                       persist_state=state.ACROSS_PAGES,
                                       help=f"Whose share of the children to show: the winner (now "
                                       f"{names[prediction]}) or any other.")  # fmt: skip
    klass = prediction if choice is None else choice
    st.markdown(said)
    step = _stepper(r, "◀ ▶ step both charts through the EM iterations together.")
    t = step - 1
    st.plotly_chart(
        figures.em_fit_figure(reading.activations_by_iteration[t], reading.spreads[t], names, klass),
        key="em_fit", config={"displayModeBar": False},
    )  # fmt: skip
    st.caption(
        f"Each class's Gaussian as the M-step of iteration {step} fitted it to the votes of the children it was "
        "given: the tighter the votes (the smaller the spread) and the more data, the higher the activation."
    )
    st.plotly_chart(
        figures.em_assignment_figure(reading.assignments[t, klass], reading.child_activations, reading.child_grid,
                                     names[klass]),
        key="em_assignments", config={"displayModeBar": False},
    )  # fmt: skip
    st.caption(
        f"What the M-step of iteration {step} weighed: "
        + (
            f"at the start every child is shared evenly, 1/{config.num_classes} to each class."
            if step == 1
            else f"the E-step of iteration {step - 1} gave each child to the classes whose Gaussians explain its "
            "votes best; a child's shares add up to 1 over the classes."
        )
    )
    st.page_link(pages.PLAYGROUND.path, label="Route toy votes with EM and with dynamic routing, side by side",
                 icon=pages.PLAYGROUND.icon)  # fmt: skip


def _child_picker(layer: ConvLayerRouting, container: Any) -> int:
    """Type, row and column of the child capsule looked at in `layer` (`ConvLayerRouting.default_child` until one
    is chosen)."""
    types, side = layer.child_grid
    keys = state.em_child_keys(layer.name)
    kept = state.em_child(layer.name)
    if kept is None or not (1 <= kept[0] <= types and 0 <= kept[1] < side and 0 <= kept[2] < side):
        kind, y, x = layer.position(layer.default_child())
        state.choose_em_child(layer.name, kind + 1, y, x)
    a, b, c = container.columns(3)
    kind = a.number_input(
        "Child type",
        1,
        types,
        key=keys[0],
        help=f"One of the {types} capsule types {layer.name} reads.",
        persist_state=state.ACROSS_PAGES,
    )
    y = b.number_input("Row", 0, side - 1, key=keys[1], help=f"On the {side}x{side} grid {layer.name} reads.",
                       persist_state=state.ACROSS_PAGES)  # fmt: skip
    x = c.number_input("Column", 0, side - 1, key=keys[2], persist_state=state.ACROSS_PAGES)
    return layer.child(int(kind) - 1, int(y), int(x))


def _em_conv_layer(layer: ConvLayerRouting, step: int, picker: Any) -> None:
    """One convolutional capsule layer at M-step `step`: where the chosen child's unit of data went, over every
    window that holds it, on the map of the parents' activations."""
    child = _child_picker(layer, picker)
    kind, y, x = layer.position(child)
    types, side = layer.child_grid
    parent_types, n = layer.parent_grid
    split = layer.split(child, step)
    k, s = layer.kernel, layer.stride
    name = f"child type {kind + 1} at ({y}, {x})"
    windows = [(int(p) // n * s, int(p) % n * s, k) for p in split.positions]
    left, right = st.columns([1, 1.3], gap="large")
    left.plotly_chart(
        figures.em_child_windows_figure(layer.child_activations[kind], y, x, windows,
                                        f"type {kind + 1} on the {side}x{side} grid, its windows"),
        key="em_child_windows", config={"displayModeBar": False},
    )  # fmt: skip
    a_i = float(layer.child_activations[kind, y, x])
    if not len(split.positions):
        right.markdown(
            f"**{name}** (a_i = {a_i:.2f}) is in **no window**: the {k}x{k} windows of stride {s} stop at row and "
            f"column {(n - 1) * s + k - 1}, so {layer.name} never reads it and its data goes to no parent."
        )
    else:
        count = len(split.positions)
        if step == 1:  # before any agreement every parent that sees the child is given the same share
            given = f"each of them is given the same 1/{count * parent_types} = {1 / (count * parent_types):.1%}"
        else:
            order = np.argsort(-split.shares, axis=None)[:3]  # the three largest R_ij, (window, type) flattened
            given = f"after the E-step of iteration {step - 1}, the most went to " + "; ".join(
                f"type {j + 1} at ({int(split.positions[m]) // n}, {int(split.positions[m]) % n}): "
                f"{split.shares[m, j]:.0%}"
                for m, j in (np.unravel_index(o, split.shares.shape) for o in order)
            )
        right.markdown(
            f"**{name}** (a_i = {a_i:.2f}) is in **{count} window{'s' if count != 1 else ''}** (outlined), so "
            f"{count * parent_types} parents share its one unit of data: the {parent_types} types at each of those "
            f"positions compete for it. In the M-step of iteration {step}, {given}."
        )
        right.caption(
            "EM gives a child to the parents whose Gaussians explain its vote best, across positions as well as types "
            "(a parent with one child, or parents that do not compete across positions, are pitfalls Gritzman lists: "
            "arXiv:1907.00652)."
        )
    st.plotly_chart(
        figures.em_layer_figure(layer.parent_activations[step - 1], split.positions, split.shares, layer.name, name),
        key="em_layer", config={"displayModeBar": False},
    )  # fmt: skip
    st.caption(
        f"{layer.name}'s {parent_types} parent types at its {n}x{n} positions as the M-step of iteration {step} fitted "
        "them: the brighter, the more active (a_j). The circles are the parents the chosen child was given to."
    )


chosen_model = guards.current_model(show_errors=False)
if chosen_model is not None and chosen_model.em:
    st.title("EM routing", anchor=False)
    model = guards.require_model(em=True)
    if model is not None:
        _em_routing(model)
    st.stop()
st.title("Routing by agreement", anchor=False)
st.markdown(
    "Between the primary capsules and the class capsules there are no fixed weights deciding *who talks to whom*: "
    "**routing** decides it anew for every input. Every primary capsule casts a **vote** for every class capsule; "
    "votes that **agree** with the consensus get more weight, in a few iterations."
)
model = guards.require_model()
config = model.config if model is not None else CapsNetConfig()
explain_col, formula_col = st.columns([1.25, 1], gap="large")
with explain_col:
    st.markdown(routing_texts.procedure(config))
with formula_col:
    for line in routing_texts.PROCEDURE_LATEX:
        st.latex(line)
    st.caption("Repeated r times (3 in the paper). The squash keeps each |v_j| below 1.")

image = guards.require_input() if model is not None else None
if model is None or image is None:
    st.stop()

names, k = model.class_names, config.num_classes
c1, c2, _ = st.columns([1.2, 1, 1.2])
# the slider reaches 5, the model's own r, or what a link asked for (at most the config's bound): never clamped silently
asked = min(state.routing_iterations() or 1, MAX_ROUTING_ITERATIONS)
most = max(MAX_ITERATIONS, config.routing_iterations, asked)
iterations = c1.slider(
    "Routing iterations",
    min_value=1,
    max_value=most,
    key=state.ROUTING_ITERATIONS,
    persist_state=state.ACROSS_PAGES,
    help=f"How many times to run the loop for this input. The model was trained with {config.routing_iterations}.",
    value=None if state.routing_iterations() is not None else config.routing_iterations,  # None: the kept value
)
result = model.explain(image, int(iterations))  # one forward pass: its trace carries the votes too
prediction = result.prediction
choice = widgets.capsule_selectbox(
    "Capsule to look at",
    names,
    key=state.ROUTING_CAPSULE,
    persist_state=state.ACROSS_PAGES,
    predicted_label="the prediction",
    help=f"Whose votes to show: the winning capsule (now {names[prediction]}) or any other.",
    container=c2,
)
digit = prediction if choice is None else choice
other = result.runner_up if digit == prediction else prediction  # beside it: the runner-up, or the winner
r = result.iterations
first, last = result.iteration_lengths[0], result.iteration_lengths[-1]
summary = (
    f"Input: **{state.input_label() or 'current input'}**. With **{r}** "
    f"iteration{'s' if r != 1 else ''} the network predicts **{names[prediction]}** (|v| = {last[prediction]:.2f}"
)
if r > 1:
    summary += f"; after the first iteration, with uniform couplings, it was {first[prediction]:.2f})."
else:
    summary += "). With one iteration every coupling stays uniform: routing has not begun."
st.markdown(summary)
notice = st.empty()  # always there, filled or not: the charts below keep their place in the page when it changes
if r > 1 and result.first_prediction != prediction:
    notice.info(
        f"Routing changed the answer: with uniform couplings capsule {names[result.first_prediction]} was longest.",
        icon=":material/alt_route:",
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
    k, r, votes = config.num_classes, result.iterations, result.votes
    step = _stepper(r, STEP_CAPTION)

    # ---------------------------------------------------------------- the votes, and one primary capsule in every view
    st.subheader("The votes", anchor=False)
    _select_clicked_vote()
    st.caption(SELECT_CAPTION)
    chosen = widgets.primary_capsule_picker(config, default=ag.first_primary(votes, image, config))
    one = ag.primary_reading(votes, config, chosen)
    views = [ag.vote_view(votes, j) for j in (digit, other)]
    reach = max(float(np.abs(v.coupling - 1.0 / k).max()) for v in views)  # one colour scale for both plots
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
            f"The coupling that moved most: type {t + 1} at position ({y}, {x}), from 1/{k} to "
            f"{main.coupling[-1, main.largest]:.2f}. Hover a point for its coupling and its agreement û·v in the "
            "iteration shown."
        )

    # ---------------------------------------------------------------- where they come from, where they go
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
                f"Where type {one.kind + 1} at ({one.y}, {one.x}) sends its vote", step - 1,
            ),
            key="primary_coupling",
            config={"displayModeBar": False},
        )  # fmt: skip
        st.caption(routing_texts.primary_coupling(one.length, one.coupling[step - 1], names, step))
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

    # ---------------------------------------------------------------- per type, and every capsule
    st.subheader("Couplings per primary-capsule type", anchor=False)
    by_type = ex.coupling_by_type(
        result.coupling, result.primary_lengths, result.primary_types, result.primary_grid, "length"
    )  # (r, types, K)
    st.plotly_chart(
        figures.coupling_by_type_figure(
            by_type, result.iteration_lengths, names, config.m_plus, config.m_minus, step=step - 1
        ),
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
                        maps, names[digit], num_classes=k, step=step - 1, selected=(one.kind, one.y, one.x)
                    ),
                    key="coupling_maps",
                    config={"displayModeBar": False},
                )
            with lines_col:
                st.plotly_chart(
                    figures.iteration_lengths_figure(result.iteration_lengths, names, config.m_plus, config.m_minus),
                    key="iteration_lengths",
                    config={"displayModeBar": False},
                )


_one_iteration(config, names, image, result, digit, other)
