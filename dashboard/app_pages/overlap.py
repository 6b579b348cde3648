"""Overlapping digits: a MultiMNIST model reads two digits at once and redraws each from its own capsule."""

from __future__ import annotations

import random

import numpy as np
import streamlit as st
import torch

from capsnet import agreement as ag
from capsnet.multimnist import PAD, make_batch
from dashboard import baselines, figures, models, texts

SHIFTS = ("first_dy", "first_dx", "second_dy", "second_dx")


def _random_pair(count: int, labels: np.ndarray) -> None:
    first = random.randrange(count)
    others = np.flatnonzero(labels != labels[first])
    st.session_state["overlap_first"], st.session_state["overlap_second"] = first, int(random.choice(others))
    for key in SHIFTS:
        st.session_state[f"overlap_{key}"] = random.randint(-PAD, PAD)


st.title("Overlapping digits", anchor=False)
st.markdown(texts.OVERLAP)
model = models.require_model(pairs=True)
if model is None:
    st.stop()
data = models.try_test_set(model.dataset)
if data is None:
    st.stop()
digits, labels = models.test_digits(model.dataset)
names, count = model.class_names, len(digits)
for key, value in (("overlap_first", 0), ("overlap_second", 1), *((f"overlap_{k}", 0) for k in SHIFTS)):
    st.session_state.setdefault(key, value)

controls, view = st.columns([1, 2], gap="large")
with controls:
    c1, c2 = st.columns(2)
    first = c1.number_input("First test digit", 0, count - 1, step=1, key="overlap_first")
    second = c2.number_input("Second test digit", 0, count - 1, step=1, key="overlap_second")
    for column, name in ((c1, "first"), (c2, "second")):
        column.slider("Shift down", -PAD, PAD, key=f"overlap_{name}_dy")
        column.slider("Shift right", -PAD, PAD, key=f"overlap_{name}_dx")
    st.button("Random pair", key="overlap_random", icon=":material/casino:", on_click=_random_pair,
              args=(count, labels.numpy()))  # fmt: skip
truth = (int(labels[int(first)]), int(labels[int(second)]))
offsets = torch.tensor([[[st.session_state[f"overlap_{n}_{a}"] for a in ("dy", "dx")] for n in ("first", "second")]])
batch = make_batch(digits, labels, torch.tensor([int(first)]), torch.tensor([int(second)]), offsets)  # (1, ...)
image = batch.images[0, 0].numpy()
reading = model.explain_pair(image)
top = reading.top
with controls:
    st.caption(f"True digits: **{names[truth[0]]}** and **{names[truth[1]]}**.")
    if truth[0] == truth[1]:
        st.warning("Both digits are of one class: the model was trained on pairs of different classes.")
    verdict = "right" if set(top) == set(truth) else "wrong"
    st.metric("CapsNet: the two longest capsules", f"{names[top[0]]} and {names[top[1]]}", border=True,
              delta=f"{verdict}", delta_color="normal" if verdict == "right" else "inverse", delta_arrow="off")  # fmt: skip
    cnn = baselines.baseline_for(model.dataset)
    if cnn is None:
        st.caption(texts.no_baseline(model.dataset))
    else:
        scores = cnn.scores(image)
        cnn_top = [int(k) for k in np.argsort(-scores, kind="stable")[:2]]
        right = set(cnn_top) == set(truth)
        st.metric("CNN baseline: the two highest scores", f"{names[cnn_top[0]]} and {names[cnn_top[1]]}", border=True,
                  delta="right" if right else "wrong", delta_color="normal" if right else "inverse",
                  delta_arrow="off")  # fmt: skip
        st.caption(texts.baseline_result("MultiMNIST", model.info.test_accuracy, cnn.accuracy, pairs=True))

with view:
    pictures = st.columns(3)
    pictures[0].image(figures.pixel_image(image, 5), caption="the overlay", width=36 * 5, output_format="PNG")
    pictures[1].image(
        figures.segmentation_image(image, reading.reconstructions[0], reading.reconstructions[1], 5),
        caption=f"red: from capsule {names[top[0]]}, green: from capsule {names[top[1]]}", width=36 * 5,
        output_format="PNG",
    )  # fmt: skip
    pictures[2].image(
        [figures.pixel_image(reading.reconstructions[k], 3) for k in (0, 1)],
        caption=[f"capsule {names[top[k]]} alone" for k in (0, 1)], width=36 * 3, output_format="PNG",
    )  # fmt: skip
    if cnn is None:
        chart = figures.lengths_bar(
            reading.lengths, names, top[0], model.config.m_plus, model.config.m_minus, height=280
        )
    else:  # the CNN's answer beside the CapsNet's
        chart = figures.comparison_figure(reading.lengths, scores, names, marked=truth, height=280)
    st.plotly_chart(chart, key="overlap_lengths", config={"displayModeBar": False})

st.subheader("Which strokes vote for which digit", anchor=False)
pixels = ag.pixel_votes(reading.coupling[-1], reading.primary_lengths, model.config)  # (36, 36, K)
st.plotly_chart(
    figures.vote_overlay_figure(image, pixels, names), key="overlap_votes", config={"displayModeBar": False}
)
st.caption(texts.overlay(model.config))
