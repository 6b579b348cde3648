"""Transform lens: turn, scale, shear, move or thicken the input and watch a capsule's pose follow it."""

from __future__ import annotations

import numpy as np
import streamlit as st

from capsnet.nn.config import CapsNetConfig
from capsnet.readings import equivariance as eq
from dashboard import baselines, claim_texts, figures, guards, texts, widgets

SLIDERS = {  # field: (label, step, format)
    "rotation": ("Rotation (degrees)", 1.0, "%+.0f°"),
    "scale": ("Scale", 0.05, "%.2f×"),
    "shear": ("Shear (degrees)", 1.0, "%+.0f°"),
    "dx": ("Move right (pixels)", 0.5, "%+.1f"),
    "dy": ("Move down (pixels)", 0.5, "%+.1f"),
    "thickness": ("Stroke thickness (pixels)", 0.25, "%+.2f"),
}
STRIP = [-45.0, -30.0, -15.0, 0.0, 15.0, 30.0, 45.0]  # the angles whose reconstructions are shown under the sweep
ROBUSTNESS_SIZES = (100, 500, 2000)  # test images per point of the robustness curves


def _key(name: str) -> str:
    return f"lens_{name}"


def _reset() -> None:
    for name in SLIDERS:
        st.session_state[_key(name)] = float(getattr(eq.Transform(), name))


st.title("Transform lens", anchor=False)
model = guards.require_model(
    routings=("dynamic", "em")
)  # the EM network too: its activations and the 16 entries of a 4x4 pose
config = model.config if model is not None else CapsNetConfig()
st.markdown(texts.equivariance(config))
image = guards.require_input() if model is not None else None
if model is None or image is None:
    st.stop()

names = model.class_names
for name in SLIDERS:
    st.session_state.setdefault(_key(name), float(getattr(eq.Transform(), name)))
controls, view = st.columns([1, 2.2], gap="large")
with controls:
    for name, (label, step, fmt) in SLIDERS.items():
        low, high = eq.LIMITS[name]
        st.slider(label, min_value=low, max_value=high, step=step, format=fmt, key=_key(name))
    st.button("Reset", key="lens_reset", icon=":material/restart_alt:", on_click=_reset)
transform = eq.Transform(**{name: float(st.session_state[_key(name)]) for name in SLIDERS})

start = model.reading(image)  # the winner on the original input
choice = widgets.capsule_selectbox(
    "Capsule to follow", names, key="lens_capsule", predicted_label="the winner on the original input",
    help=f"Whose pose to follow: the capsule that wins on the untransformed input (now {names[start.prediction]}).",
    container=controls,
)  # fmt: skip
capsule = start.prediction if choice is None else choice
reading = model.transformed(image, (eq.Transform(), transform), capsule)  # the original and the transformed input
lengths, predicted = reading.lengths[1], int(reading.predictions[1])
symbol = model.network.score_symbol  # the EM network's activations stand for the lengths

with view:
    pictures, verdict = st.columns([1.6, 1])
    with pictures:
        shown = [reading.images[0], reading.images[1]]
        captions = ["original", "transformed"]
        if reading.reconstructions is not None:
            shown, captions = [*shown, reading.reconstructions[1]], [*captions, f"from capsule {names[capsule]}"]
        st.image([figures.pixel_image(x, 4) for x in shown], caption=captions, width=config.image_size * 4,
                 output_format="PNG")  # fmt: skip
    with verdict:
        st.metric(
            "Prediction", names[predicted], delta=f"{symbol} = {lengths[predicted]:.2f}", delta_color="off",
            delta_arrow="off", border=True,
            help=f"The class capsule with the highest {model.network.scores} for the transformed input.",
        )  # fmt: skip
        st.caption(
            f"Capsule {names[capsule]}: {symbol} = {reading.lengths[0, capsule]:.2f} on the original, "
            f"{lengths[capsule]:.2f} transformed."
        )
    st.plotly_chart(
        figures.pose_figure(reading.poses[0], reading.poses[1], names[capsule]), key="lens_pose",
        config={"displayModeBar": False},
    )  # fmt: skip
    st.plotly_chart(
        figures.scores_bar(lengths, names, predicted, model.network.score_margins(config), height=260),
        key="lens_lengths",
        config={"displayModeBar": False},
    )  # fmt: skip

st.subheader("Every angle at once", anchor=False)
sweep = model.rotation_sweep(image, transform, capsule)  # 37 angles, one batched forward pass
moves = model.sensitivity(image, transform, capsule)
strongest = [int(d) for d in np.argsort(moves["rotation"])[::-1][:3]]
st.plotly_chart(
    figures.rotation_sweep_figure(eq.SWEEP_ANGLES.tolist(), sweep.poses, transform.rotation, names[capsule], strongest),
    key="lens_sweep",
    config={"displayModeBar": False},
)
strip = [int(np.argmin(np.abs(eq.SWEEP_ANGLES - a))) for a in STRIP]
redrawn = sweep.reconstructions is not None
st.plotly_chart(
    figures.image_rows_figure(
        [sweep.images[strip], *([sweep.reconstructions[strip]] if sweep.reconstructions is not None else [])],
        ["input", *([f"capsule {names[capsule]}"] if redrawn else [])],
        height=190 if redrawn else 110,
    ),
    key="lens_strip",
    config={"displayModeBar": False},
)
st.caption(
    "Inputs at " + ", ".join(f"{a:+.0f}°" for a in STRIP)
    + (", and what the capsule redraws for each." if redrawn else " (this network has no decoder to redraw them).")
)  # fmt: skip
st.markdown(texts.sensitivity(moves, names[capsule]))

st.subheader("Beside a CNN", anchor=False)
cnn = guards.baseline_for(model.dataset)
if cnn is None:
    st.caption(texts.no_baseline(model.dataset))
else:
    scores = cnn.scores(reading.images[1])  # the transformed input, as the CapsNet read it above
    cnn_predicted = int(np.argmax(scores))
    left, right = st.columns(2)
    left.metric(f"{model.network.title} on the transformed input", names[predicted],
                delta=f"{symbol} = {lengths[predicted]:.2f}",
                delta_color="off", delta_arrow="off", border=True)  # fmt: skip
    right.metric("CNN baseline on the transformed input", names[cnn_predicted],
                 delta=f"score {scores[cnn_predicted]:.2f}", delta_color="off", delta_arrow="off", border=True)  # fmt: skip
    st.caption(
        texts.baseline_result(model.info.title, model.network.title, model.info.test_accuracy, cnn.accuracy, False)
    )
st.markdown(texts.robustness(model.dataset))
measure, size = st.columns([2, 1])
limit = size.selectbox(
    "Test images per point", ROBUSTNESS_SIZES, index=1, key="lens_robustness_size", format_func="{:,}".format,
    help="Each network reads this many test images at each of the sweeps' points, the first time; then kept on disk.",
)  # fmt: skip
networks = {model.network.title: model, **({"CNN": cnn} if cnn is not None else {})}
size.caption(texts.robustness_cost(int(limit), len(networks), baselines.robustness_seconds(networks, int(limit))))
if measure.toggle("Measure accuracy as the test set turns and scales", key="lens_robustness"):
    if guards.try_test_set(model.dataset) is None:
        st.stop()
    bar = st.progress(0.0, text="Measuring (once per model: kept on disk)...")
    curves = baselines.robustness_curves(networks, model.dataset, int(limit), lambda f, text: bar.progress(f, text))
    bar.empty()
    for column, kind, current in zip(st.columns(2), ("rotation", "scale"), (transform.rotation, transform.scale)):
        sweeps = curves[kind]
        values = next(iter(sweeps.values())).values
        column.plotly_chart(
            figures.robustness_figure(values, {n: s.accuracy for n, s in sweeps.items()}, kind, current,
                                      examples=int(limit)),
            key=f"lens_robustness_{kind}", config={"displayModeBar": False},
        )  # fmt: skip
    st.caption(texts.robustness_interval(int(limit)))
st.subheader("Does the paper's claim hold here?", anchor=False)
st.markdown(claim_texts.affnist_claim(model.dataset))
claim = baselines.affine_verdict()
if claim is None:
    st.caption(claim_texts.NO_AFFINE_PAIR)
else:
    widgets.claim_verdict(claim, "lens_claim", claim_texts.AFFNIST_CURVE, baselines.start_free_verdict("affnist"))
st.markdown(claim_texts.DISPUTE)
