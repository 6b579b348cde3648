"""Routing, for a network routed by EM: EM routing on the current input, one iteration at a time, in the class layer
or in ConvCaps1 or ConvCaps2 (one child capsule at a time).

Hinton, Sabour & Frosst (2018), "Matrix capsules with EM routing", ICLR. The page registry declares this view for
the networks routed by EM (`dashboard.pages.ROUTING`); dynamic routing's is `routing.py`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import streamlit as st

from capsnet.readings.em_layers import LAYER_NAMES, ConvLayerRouting
from dashboard import figures, guards, models, pages, routing_texts, state, widgets

EM_INTRO = (
    "In the EM network every capsule layer after the primary capsules is routed by **EM**: each parent is a Gaussian "
    "over the 16 entries of its children's votes, fitted to the votes given to it (the **M-step**), and each child is "
    "then given to the parents whose Gaussians explain its votes best (the **E-step**), a few times. Choose a layer: "
    "the class capsules, or ConvCaps1 and ConvCaps2, where parents at every position compete for each child."
)
LEAD = (
    "Step through the EM iterations (◀ ▶) or change r: the class capsules are routed again in your browser. Look for "
    "the class whose activation rises as it is given more of the children's data."
)
CLASS_LAYER = "class capsules"  # the EM layer choice's first option; ConvCaps1 and ConvCaps2 follow


def _em_steps() -> None:
    """The M- and E-steps in words and formulas, folded: the page leads with its live view."""
    with st.expander("How EM routing works (the M-step and the E-step)", icon=":material/functions:"):
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


def _em_routing(model: models.Model) -> None:
    """The page for the EM network: EM routing on the current input, one iteration at a time, in the class layer or
    in ConvCaps1 or ConvCaps2 (one child capsule at a time)."""
    image = guards.require_input()
    if image is None:
        _em_steps()
        st.stop()
    config, names = model.config, model.class_names
    iterations, choice = widgets.live_routing(model, image, LEAD)
    _em_steps()
    layer = st.segmented_control(
        "Layer", [CLASS_LAYER, *LAYER_NAMES], key=state.EM_LAYER, default=CLASS_LAYER, required=True,
        persist_state=state.ACROSS_PAGES,
        help="The class capsules route the last grid to the classes; ConvCaps1 routes the primary capsules' 3x3 "
        "windows, ConvCaps2 ConvCaps1's.",
    )  # fmt: skip
    reading = model.explain_em(image, iterations=int(iterations), layers=True)  # the pass em_layers reads too
    prediction = reading.prediction
    r = reading.iterations
    said = (
        f"Input: **{state.input_label() or 'current input'}**. With **{r}** EM iteration{'s' if r != 1 else ''} "
        f"the network predicts **{names[prediction]}** (a = {reading.activations[prediction]:.2f})."
    )
    if layer != CLASS_LAYER:
        st.markdown(said)
        widgets.away_from_trained(model, r)
        step = widgets.iteration_stepper(r, "◀ ▶ step both charts through the EM iterations together.")
        _em_conv_layer(model.em_layers(image, int(iterations))[LAYER_NAMES.index(layer)], step, st.columns(3)[0])
        return
    klass = prediction if choice is None else choice
    st.markdown(said)
    widgets.away_from_trained(model, r)
    widgets.routing_experiment_for_input(model, image, r)
    step = widgets.iteration_stepper(r, "◀ ▶ step both charts through the EM iterations together.")
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
    st.page_link(state.page_path(pages.PLAYGROUND), label="Route toy votes with EM and with dynamic routing, side by side",
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


st.title("EM routing", anchor=False)
model = guards.require_model(routings=("em",))
if model is None:
    st.stop()
_em_routing(model)
