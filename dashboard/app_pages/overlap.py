"""Overlapping digits: a MultiMNIST model reads two digits at once and redraws each from its own capsule.

The two digits are test digits (chosen, or a random pair) or two drawings made on the canvas in turn.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import streamlit as st

from capsnet.data.multimnist import PAD, overlay, two_highest
from capsnet.readings import agreement as ag
from dashboard import baselines, claim_texts, figures, guards, models, routing_texts, texts, widgets
from dashboard.knobs import canvas

SHIFTS = ("first_dy", "first_dx", "second_dy", "second_dx")
SOURCES = ("Test digits", "Draw two")
SLOTS = ("first", "second")
CANVAS = "overlap_canvas"  # the drawing canvas (dashboard.knobs.canvas)


def _random_pair(count: int, labels: np.ndarray) -> None:
    first = random.randrange(count)
    others = np.flatnonzero(labels != labels[first])
    st.session_state["overlap_first"], st.session_state["overlap_second"] = first, int(random.choice(others))
    for key in SHIFTS:
        st.session_state[f"overlap_{key}"] = random.randint(-PAD, PAD)


def _keep_drawing(slot: str) -> None:
    """Keep the canvas's digit as the `slot` digit, and give the canvas back empty for the next one."""
    st.session_state[f"overlap_drawn_{slot}"] = canvas.digit(CANVAS)
    canvas.clear(CANVAS)


def _drawn_pair() -> tuple[np.ndarray, np.ndarray] | None:
    """A canvas and the two drawings kept from it, in turn; both drawings once there are two."""
    digit = canvas.drawing_canvas(CANVAS, label="drawing canvas: draw a digit",
                                  caption="Draw one digit, large; then keep it as the first or the second.")  # fmt: skip
    ready = digit is not None
    for column, slot in zip(st.columns(2), SLOTS):
        column.button(f"Use as the {slot} digit", key=f"overlap_use_{slot}", disabled=not ready,
                      on_click=_keep_drawing, args=(slot,), icon=":material/check:")  # fmt: skip
        kept = st.session_state.get(f"overlap_drawn_{slot}")
        if kept is not None:
            column.image(figures.pixel_image(kept, 2), caption=f"the {slot} digit", width=56, output_format="PNG")
    drawn: list[Any] = [st.session_state.get(f"overlap_drawn_{slot}") for slot in SLOTS]
    if any(d is None for d in drawn):
        st.caption("Draw a digit, keep it as the first, then draw another and keep it as the second.")
        return None
    return drawn[0], drawn[1]


st.title("Overlapping digits", anchor=False)
st.markdown(texts.OVERLAP)
model = guards.require_model(pairs=True)
if model is None:
    st.stop()
data = guards.try_test_set(model.dataset)
if data is None:
    st.stop()
digits, labels = models.test_digits(model.dataset)
names, count = model.class_names, len(digits)
for key, value in (("overlap_first", 0), ("overlap_second", 1), *((f"overlap_{k}", 0) for k in SHIFTS)):
    # re-set on every run, so that Streamlit keeps the value through runs that stop before drawing the widget
    # ("Draw two" waits for its drawings; the digit inputs are hidden while drawings are used)
    st.session_state[key] = st.session_state.get(key, value)


def _verdict(label: str, chosen: list[int], truth: tuple[int, int] | None) -> None:
    """A metric naming two classes; right or wrong when the true digits are known (not for drawings)."""
    value = f"{names[chosen[0]]} and {names[chosen[1]]}"
    if truth is None:
        st.metric(label, value, border=True)
        return
    right = set(chosen) == set(truth)
    st.metric(label, value, border=True, delta="right" if right else "wrong",
              delta_color="normal" if right else "inverse", delta_arrow="off")  # fmt: skip


controls, view = st.columns([1, 2], gap="large")
with controls:
    source = st.segmented_control("Digits", SOURCES, default=SOURCES[0], key="overlap_source") or SOURCES[0]
    drawn = _drawn_pair() if source == SOURCES[1] else None
    if source == SOURCES[1] and drawn is None:
        st.stop()
    c1, c2 = st.columns(2)
    if drawn is None:
        first = c1.number_input("First test digit", 0, count - 1, step=1, key="overlap_first")
        second = c2.number_input("Second test digit", 0, count - 1, step=1, key="overlap_second")
    for column, name in ((c1, "first"), (c2, "second")):
        column.slider("Shift down", -PAD, PAD, key=f"overlap_{name}_dy")
        column.slider("Shift right", -PAD, PAD, key=f"overlap_{name}_dx")
    if drawn is None:
        st.button("Random pair", key="overlap_random", icon=":material/casino:", on_click=_random_pair,
                  args=(count, labels.numpy()))  # fmt: skip
offsets = [[st.session_state[f"overlap_{n}_{a}"] for a in ("dy", "dx")] for n in SLOTS]
if drawn is None:
    truth: tuple[int, int] | None = (int(labels[int(first)]), int(labels[int(second)]))
    image = overlay(digits[int(first)], digits[int(second)], offsets)  # (36, 36)
else:  # the two drawings, stored as uint8 digits like the test set's
    truth = None
    image = overlay(drawn[0], drawn[1], offsets)
reading = model.explain_pair(image)
top = reading.top
with controls:
    if truth is not None:
        st.caption(f"True digits: **{names[truth[0]]}** and **{names[truth[1]]}**.")
        if truth[0] == truth[1]:
            st.warning("Both digits are of one class: the model was trained on pairs of different classes.")
    _verdict("CapsNet: the two longest capsules", list(top), truth)
    cnn = guards.baseline_for(model.dataset)
    if cnn is None:
        st.caption(texts.no_baseline(model.dataset))
    else:
        scores = cnn.scores(image)
        _verdict("CNN baseline: the two highest scores", list(two_highest(scores)), truth)
        st.caption(
            texts.baseline_result("MultiMNIST", model.network.title, model.info.test_accuracy, cnn.accuracy, pairs=True)
        )

with view:
    pictures = st.columns(3)  # each image as wide as its column: a fixed 180 px ran over the next one
    pictures[0].image(figures.pixel_image(image, 5), caption="the overlay", width="stretch", output_format="PNG")
    pictures[1].image(
        figures.segmentation_image(image, reading.reconstructions[0], reading.reconstructions[1], 5),
        caption=f"red: from capsule {names[top[0]]}, green: from capsule {names[top[1]]}", width="stretch",
        output_format="PNG",
    )  # fmt: skip
    pictures[2].image(
        [figures.pixel_image(reading.reconstructions[k], 3) for k in (0, 1)],
        caption=[f"capsule {names[top[k]]} alone" for k in (0, 1)], width="stretch", output_format="PNG",
    )  # fmt: skip
    if cnn is None:
        chart = figures.lengths_bar(
            reading.lengths, names, top[0], model.config.m_plus, model.config.m_minus, height=280
        )
    else:  # the CNN's answer beside the CapsNet's
        chart = figures.comparison_figure(reading.lengths, scores, names, marked=truth or (), height=280)
    st.plotly_chart(chart, key="overlap_lengths", config={"displayModeBar": False})

st.subheader("Which strokes vote for which digit", anchor=False)
pixels = ag.pixel_votes(reading.coupling[-1], reading.primary_lengths, model.config)  # (36, 36, K)
st.plotly_chart(
    figures.vote_overlay_figure(image, pixels, names, pair=top), key="overlap_votes", config={"displayModeBar": False}
)
st.caption(routing_texts.pair_overlay(model.config, names[top[0]], names[top[1]]))

st.subheader("Does the paper's claim hold here?", anchor=False)
claim = baselines.claim_verdict(model)
if claim is None:
    st.caption("The verdict needs a CNN baseline for this dataset beside the CapsNet: train one from the sidebar.")
else:
    widgets.claim_verdict(claim, "overlap_claim", claim_texts.MULTIMNIST_CURVE)
st.markdown(claim_texts.DISPUTE)
