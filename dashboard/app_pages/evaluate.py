"""Evaluate: the chosen model on its test set: accuracy, confusion, reconstructions and mistakes."""

from __future__ import annotations

import numpy as np
import streamlit as st

from capsnet.data.pictures import as_pictures
from capsnet.readings import reconstruction
from dashboard import figures, guards, links, pages, state, texts, training_texts

QUICK = 1000  # the default: a few seconds with the paper's model on a CPU
SIZES = {QUICK: "first", 0: "all"}
GRID_COUNT = 12
GALLERY_COUNT = 12
GALLERY_COLUMNS = 4
OPENED = "eval_opened"  # (test image, where it was clicked) a click last made the input: said once, just there
HANDLED = "eval_grid_handled"  # the grid selection already acted on


def _open(index: int, dataset: str, origin: str) -> None:
    links.open_test_image(index, dataset)
    st.session_state[OPENED] = (index, origin)


def _opened_notice(origin: str, columns: int = 4) -> None:
    """The notice of a test image just opened, under what was clicked (`origin`): nothing above it moves."""
    opened = st.session_state.get(OPENED)
    if opened is None or opened[1] != origin:
        return
    index = st.session_state.pop(OPENED)[0]
    with st.container(border=True):
        st.markdown(f"**Test image #{index} is now the input** of every page:")
        for n, page in enumerate(pages.INPUT_PAGES):
            if columns == 1:  # in a narrow column already
                st.page_link(state.page_path(page), label=page.title, icon=page.icon)
                continue
            if n % columns == 0:
                row = st.columns(columns)
            row[n % columns].page_link(state.page_path(page), label=page.title, icon=page.icon)


st.title("Evaluate", anchor=False)
model = guards.require_model(routings=guards.EVERY_ROUTING)  # any network that routes: its class scores and answers
st.markdown(texts.evaluate(model.noun, model.network.score_symbol) if model is not None else texts.evaluate("digit"))
if model is None:
    st.stop()
data = guards.try_test_set(model.dataset)
if data is None:
    st.info(f"The other pages still work: draw {texts.a(model.noun)} or upload one on the Draw page.")
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
bar = st.empty()


def _progress(done: int, total: int) -> None:
    if done < total:
        bar.progress(done / total, text=f"Evaluated {done:,} of {total:,} test images (once per model)...")


seconds = model.evaluation_seconds(limit)  # 0 where it is kept: then nothing is said of time
how_long = f": about {texts.format_duration(seconds)} on this machine" if seconds >= 5 else ""
bar.progress(0.0, text=f"Evaluating {limit:,} test images{how_long} (once per model)...")
result = model.evaluation(limit, on_chunk=_progress)
bar.empty()

stored = model.info.test_accuracy
c1, c2, c3, c4 = st.columns(4)
c1.metric("Test accuracy", f"{100 * result.accuracy:.2f}%", border=True)
c2.metric(f"Mistakes (of {result.total:,})", f"{result.total - result.correct:,}", border=True)
c3.metric("Test loss", f"{result.loss:.4f}", border=True, help=training_texts.loss_help(model.config))
c4.metric(
    "At training",
    f"{100 * stored:.2f}%" if stored is not None else "—",
    border=True,
    help="The accuracy recorded at training, from the checkpoint's header: the test set (or the subset) the run evaluated on; "
    "for a shipped model, the full test set, measured on the exported file.",
)

# the table across the page, the chart under it: side by side, a narrow window cut the table's last columns
st.subheader("Per class", anchor=False)
named = any(name != str(k) for k, name in enumerate(names))  # MNIST's names are the class numbers
st.dataframe(
    [
        {
            "class": k,
            **({"name": names[k]} if named else {}),
            "accuracy": acc,
            "correct": f"{c}/{t}",
            "precision": pr,
        }
        for k, (acc, c, t, pr) in enumerate(
            zip(result.class_accuracy(), result.class_correct, result.class_total, result.class_precision())
        )
    ],
    hide_index=True,
    key="per_class_table",
    column_config={
        "accuracy": st.column_config.ProgressColumn(
            "recall (accuracy)",
            format="percent",
            min_value=0.0,
            max_value=1.0,
            help="Of the test images of this class, the share read as this class.",
        ),
        "precision": st.column_config.ProgressColumn(
            format="percent",
            min_value=0.0,
            max_value=1.0,
            help="Of the test images read as this class, the share that are this class.",
        ),
    },  # fmt: skip
)
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
if getattr(model.net, "decoder", None) is None:  # an EM network trained without one
    st.caption("This network has no decoder: it does not redraw its inputs.")
else:
    seed = st.session_state.setdefault("eval_sample_seed", 0)
    if st.button("Other examples", key="eval_shuffle", icon=":material/shuffle:"):
        seed = st.session_state["eval_sample_seed"] = seed + 1
    sample = tuple(
        int(i) for i in np.random.default_rng(seed).choice(limit, size=min(GRID_COUNT, limit), replace=False)
    )
    recon = model.reconstructions(sample)
    originals = as_pictures(images[list(sample)])  # (n, H, W), or (n, H, W, 3) in colour
    event = st.plotly_chart(
        figures.image_rows_figure([originals, recon.reconstructions], ["original", "reconstruction"], ids=sample),
        key="reconstruction_grid",
        config={"displayModeBar": False},
        on_select="rerun",
        selection_mode="points",
    )
    picked = [int(point["customdata"]) for point in (event.selection.points if event else []) if "customdata" in point]
    if not picked:
        st.session_state.pop(HANDLED, None)  # nothing selected now: the same image can be opened again
    elif picked != st.session_state.get(HANDLED):
        st.session_state[HANDLED] = picked
        _open(picked[0], model.dataset, "grid")
        st.rerun()
    st.caption(
        "Predicted: "
        + ", ".join(f"{names[p]}" + ("" if p == labels[i] else " ✗") for i, p in zip(sample, recon.predictions))
        + ". Click an image to make it the input of the other pages."
    )
    _opened_notice("grid")

st.subheader("The most confident mistakes", anchor=False)
predictions, lengths, truth = result.predictions.numpy(), result.lengths.numpy(), labels[:limit].numpy()
wrong = reconstruction.misclassified(predictions, truth, lengths, GALLERY_COUNT)
if len(wrong) == 0:
    st.success("No mistakes on these test images.")
else:
    scores = texts.SCORE_NAMES[model.network.score_symbol]
    st.caption(f"Each with the {scores}s ({model.network.score_symbol}) of its {len(names)} capsules: the red bar "
               "is the (wrong) winner.")  # fmt: skip
    cols = st.columns(GALLERY_COLUMNS)
    for n, index in enumerate(wrong.tolist()):
        with cols[n % GALLERY_COLUMNS]:
            true_class, predicted = int(truth[index]), int(predictions[index])
            st.image(
                figures.pixel_image(as_pictures(images[index : index + 1])[0], 3),
                caption=f"#{index}: true {names[true_class]}, predicted {names[predicted]}",
                width=84,
                output_format="PNG",
            )
            st.plotly_chart(
                figures.lengths_bar(
                    lengths[index], names, predicted, height=150, compact=True, symbol=model.network.score_symbol
                ),  # fmt: skip
                key=f"mistake_{index}",
                config={"displayModeBar": False, "staticPlot": True},
            )
            st.button(
                f"Explore #{index}", key=f"explore_{index}", icon=":material/open_in_new:", on_click=_open,
                args=(index, model.dataset, f"mistake {index}"), help="Make this test image the input of Draw, "
                "Routing, Dimensions and the transform lens.",
            )  # fmt: skip
            _opened_notice(f"mistake {index}", columns=1)
