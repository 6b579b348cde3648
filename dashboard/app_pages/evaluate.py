"""Evaluate: the chosen model on its test set: accuracy, confusion, reconstructions and mistakes."""

from __future__ import annotations

import numpy as np
import streamlit as st

from capsnet import explain as ex
from dashboard import figures, models, texts

QUICK = 1000  # the default: a few seconds with the paper's model on a CPU
SIZES = {QUICK: "first", 0: "all"}
GRID_COUNT = 12
GALLERY_COUNT = 12
GALLERY_COLUMNS = 4

st.title("Evaluate", anchor=False)
st.markdown(texts.EVALUATE)

model = models.require_model()
if model is None:
    st.stop()
data = models.try_test_set(model.dataset)
if data is None:
    st.info("The other pages still work: draw a digit or upload one on the Draw page.")
    st.stop()
images, labels = data
names = model.class_names


def _size_label(n: int) -> str:
    count = len(images) if n == 0 else min(n, len(images))
    return f"{SIZES[n]} {count:,}" + (" (takes a while on a CPU)" if n == 0 else "")


size = st.segmented_control(
    "Test images",
    list(SIZES),
    default=QUICK,
    required=True,
    format_func=_size_label,
    key="eval_size",
    help=f"The first {QUICK:,} give a quick estimate. All {len(images):,} take a while on a CPU (minutes with the "
    "paper's model); each result is kept for this model.",
)
limit = len(images) if not size else min(int(size), len(images))
slow = " This takes a while on a CPU." if limit > QUICK else ""
with st.spinner(f"Evaluating on {limit:,} test images (once per model).{slow}"):
    result = model.evaluation(limit)

stored = model.info.test_accuracy
c1, c2, c3, c4 = st.columns(4)
c1.metric("Test accuracy", f"{100 * result.accuracy:.2f}%", border=True)
c2.metric(f"Mistakes (of {result.total:,})", f"{result.total - result.correct:,}", border=True)
c3.metric("Test loss", f"{result.loss:.4f}", border=True, help=texts.loss_help(model.config))
c4.metric(
    "Accuracy recorded at training",
    f"{100 * stored:.2f}%" if stored is not None else "—",
    border=True,
    help="From the checkpoint's header: the test set (or the subset) the run evaluated on; "
    "for a shipped model, the full test set, measured on the exported file.",
)

table_col, chart_col = st.columns([1, 1.6], gap="large")
with table_col:
    st.subheader("Per class", anchor=False)
    named = any(name != str(k) for k, name in enumerate(names))  # MNIST's names are the class numbers
    st.dataframe(
        [
            {"class": k, **({"name": names[k]} if named else {}), "accuracy": acc, "correct": f"{c}/{t}"}
            for k, (acc, c, t) in enumerate(zip(result.class_accuracy(), result.class_correct, result.class_total))
        ],
        hide_index=True,
        key="per_class_table",
        column_config={"accuracy": st.column_config.ProgressColumn(format="percent", min_value=0.0, max_value=1.0)},
    )
with chart_col:
    st.plotly_chart(
        figures.per_class_accuracy_figure(result.class_accuracy(), names),
        key="per_class_chart",
        config={"displayModeBar": False},
    )

st.subheader("Confusion matrix", anchor=False)
st.plotly_chart(
    figures.confusion_figure(result.confusion.numpy(), names), key="confusion", config={"displayModeBar": False}
)

st.subheader("Originals over their reconstructions", anchor=False)
seed = st.session_state.setdefault("eval_sample_seed", 0)
if st.button("Other examples", key="eval_shuffle", icon=":material/shuffle:"):
    seed = st.session_state["eval_sample_seed"] = seed + 1
sample = tuple(int(i) for i in np.random.default_rng(seed).choice(limit, size=min(GRID_COUNT, limit), replace=False))
recon = model.reconstructions(sample)
originals = images[list(sample), 0].numpy()
st.plotly_chart(
    figures.image_rows_figure([originals, recon.reconstructions], ["original", "reconstruction"]),
    key="reconstruction_grid",
    config={"displayModeBar": False},
)
st.caption(
    "Predicted: "
    + ", ".join(f"{names[p]}" + ("" if p == labels[i] else " ✗") for i, p in zip(sample, recon.predictions))
)

st.subheader("The most confident mistakes", anchor=False)
predictions, lengths, truth = result.predictions.numpy(), result.lengths.numpy(), labels[:limit].numpy()
wrong = ex.misclassified(predictions, truth, lengths, GALLERY_COUNT)
if len(wrong) == 0:
    st.success("No mistakes on these test images.")
else:
    st.caption(f"Each with the lengths of its {len(names)} capsules: the red bar is the (wrong) winner.")
    cols = st.columns(GALLERY_COLUMNS)
    for n, index in enumerate(wrong.tolist()):
        with cols[n % GALLERY_COLUMNS]:
            true_class, predicted = int(truth[index]), int(predictions[index])
            st.image(
                figures.pixel_image(images[index, 0].numpy(), 3),
                caption=f"#{index}: true {names[true_class]}, predicted {names[predicted]}",
                width=84,
                output_format="PNG",
            )
            st.plotly_chart(
                figures.lengths_bar(lengths[index], names, predicted, height=150, compact=True),
                key=f"mistake_{index}",
                config={"displayModeBar": False, "staticPlot": True},
            )
