"""Draw: your own input (drawing, test image or upload), the capsule lengths, the prediction and the reconstruction."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import streamlit as st

from capsnet.data.image_folder import ImageFolderError, picture_from_bytes
from capsnet.data.pictures import as_pictures
from capsnet.data.preprocess import PreprocessError, preprocess_upload
from capsnet.nn.config import CapsNetConfig
from dashboard import figures, guards, guided_path, models, novelty_texts, pages, state, texts, widgets
from dashboard.knobs import views
from dashboard.knobs.canvas import drawing_canvas
from dashboard.knobs.component import knobs

REDRAW_KNOBS = "draw_redraw"  # the what-if: the input redrawn from any class capsule, in the browser (dashboard.knobs)
REDRAW_LEAD = "Redraw from capsule (★ the prediction):"
UPLOAD_MB = 25  # a phone's photo of a digit is often 3-8 MB; decoding is bounded by pixels (capsnet.data.preprocess)

SOURCES = ["Draw", state.TEST_SOURCE, "Upload"]
CANVAS = "canvas"  # the drawing canvas's key (dashboard.knobs.canvas keeps its strokes and digit in the session)
PREVIEW_SCALE = 4  # the 28x28 input at 112 px, beside the answer
LENGTHS_HEIGHT = 230  # the lengths chart under the answer: the whole answer above the fold at 1440x900


def draw_input(noun: str) -> tuple[np.ndarray | None, str, int | None]:
    """The canvas: white ink on black, 280x280, with Undo and Clear; read when the pen lifts."""
    digit = drawing_canvas(
        CANVAS,
        label=f"drawing canvas: draw {texts.a(noun)}",
        caption=f"Draw one {noun}, large, with the mouse, a pen or a finger. Lift it to see what the network reads.",
    )
    return digit, "your drawing" if digit is not None else "", None


def _random_index(count: int) -> None:
    state.set_test_index(random.randrange(count))


def test_image_input(dataset: str, class_names: list[str]) -> tuple[np.ndarray | None, str, int | None]:
    """Pick a test image by index or at random."""
    data = guards.try_test_set(dataset)
    if data is None:
        return None, "", None
    images, labels = data
    count = len(images)
    c1, c2 = st.columns([1.7, 1], vertical_alignment="bottom")  # "Random" whole at 1,100 px
    if state.test_index() >= count:
        state.set_test_index(count - 1)
    index = c1.number_input("Test image index", min_value=0, max_value=count - 1, step=1, key=state.TEST_INDEX,
                             persist_state=state.ACROSS_PAGES)  # fmt: skip
    c2.button("Random", key="random_test_image", icon=":material/casino:", on_click=_random_index, args=(count,))
    true_class = int(labels[int(index)])
    st.caption(f"Test image #{int(index)} (indices 0 to {count - 1:,}) · true class: **{class_names[true_class]}**")
    return as_pictures(images[int(index) : int(index) + 1])[0], f"test image #{int(index)}", true_class


def upload_input(noun: str) -> tuple[np.ndarray | None, str, int | None]:
    """A PNG or JPEG of one example: dark on light or light on dark, any size."""
    upload = st.file_uploader(
        f"Upload an image of {texts.a(noun)} (PNG or JPEG)",
        type=["png", "jpg", "jpeg"],
        key="upload",
        max_upload_size=UPLOAD_MB,
        help="A photo or scan works (a phone's photo too: up to 25 MB): it is inverted if the ink is darker than the "
        "paper, cropped and centred.",
    )
    # one slot for the upload's error, filled or emptied on every run: a new upload never shows an older one's error
    message = st.empty()
    if upload is None:
        return None, "", None
    try:
        digit = preprocess_upload(upload.getvalue(), upload.name)
    except PreprocessError as error:
        message.error(str(error), icon=":material/broken_image:")
        return None, "", None
    return digit, f"upload {upload.name}", None


def upload_picture(model: models.Model, noun: str) -> tuple[np.ndarray | None, str, int | None]:
    """A picture for a model of other pictures than drawings: made like its data (its side, grey or colour)."""
    read = model.task
    upload = st.file_uploader(
        f"Upload a picture of {texts.a(noun)} (PNG, JPEG, BMP or WebP)", type=["png", "jpg", "jpeg", "bmp", "webp"],
        key="upload_picture", max_upload_size=UPLOAD_MB,
        help=f"Read as this model's data is: its shorter side resized to {read.input_size}, the centre square kept, "
        + ("in colour." if read.channels == 3 else "in grey."),
    )  # fmt: skip
    message = st.empty()
    if upload is None:
        return None, "", None
    try:
        picture = picture_from_bytes(upload.getvalue(), read.input_size, read.channels == 3, upload.name)
    except ImageFolderError as error:
        message.error(str(error), icon=":material/broken_image:")
        return None, "", None
    return as_pictures(picture[None].float() / 255)[0], f"upload {upload.name}", None


def _verdict(names: list[str], prediction: int, true_class: int | None) -> None:
    if true_class is not None:
        verdict = "right" if true_class == prediction else "wrong"
        st.caption(f"True class {names[true_class]}: the network is **{verdict}**.")


def _em_reading(
    model: models.Model, digit: np.ndarray, names: list[str], true_class: int | None, answer: Any, chart: Any
) -> None:
    """The EM network's reading of the input: its answer and class activations beside the input (`answer`,
    `chart`), then the redraw (with a decoder, from any class's pose, in the browser) and its class routing."""
    reading = model.explain_em(digit)
    prediction, activations = reading.prediction, reading.activations
    runner_up = reading.runner_up
    with answer:
        st.metric("Prediction", names[prediction], delta=f"a = {activations[prediction]:.2f}", delta_color="off",
                  delta_arrow="off", help="The class whose capsule is most active.", border=True)  # fmt: skip
        _verdict(names, prediction, true_class)
        st.caption(f"Next: {names[runner_up]}, a = {activations[runner_up]:.2f}.")
    with chart:
        st.plotly_chart(figures.activations_bar(activations, names, prediction, height=LENGTHS_HEIGHT),
                        key="lengths_chart", config={"displayModeBar": False})  # fmt: skip
    st.divider()
    check_col, redraw_col = st.columns([1, 1.5], gap="large")
    with check_col:
        if reading.reconstruction_error is not None:  # its redraw and its activation tell a known digit from a scribble
            widgets.not_like_any_class(model, reading.reconstruction_error, float(activations[prediction]))
        if reading.reconstruction is None:
            st.caption(novelty_texts.NO_DECODER_NO_CHECK)
    with redraw_col:
        if reading.reconstruction is not None:
            knobs(views.dimensions(model, digit, None, REDRAW_LEAD, mode="redraw"), key=REDRAW_KNOBS)
    st.subheader("EM routing in the class layer", anchor=False)
    st.plotly_chart(
        figures.em_class_routing_figure(reading.activations_by_iteration, reading.shares, names, prediction),
        key="em_class_routing", config={"displayModeBar": False},
    )  # fmt: skip
    st.markdown(texts.EM_ROUTING_READING)
    st.page_link(state.page_path(pages.PLAYGROUND), label="Route toy votes with EM and with dynamic routing, side by side",
                 icon=pages.PLAYGROUND.icon)  # fmt: skip


def _dynamic_reading(
    model: models.Model, digit: np.ndarray, names: list[str], true_class: int | None, answer: Any, chart: Any
) -> None:
    """The CapsNet's reading of the input: its answer and capsule lengths beside the input (`answer`, `chart`), then
    the not-like-any-class test and the redraw (from any class's capsule, in the browser)."""
    config, noun = model.config, model.noun
    result = model.explain(digit)
    prediction, lengths, runner_up = result.prediction, result.lengths, result.runner_up
    confidence = float(lengths[prediction])
    with answer:
        st.metric("Prediction", names[prediction], delta=f"|v| = {confidence:.2f}", delta_color="off",
                  delta_arrow="off", help="The class whose capsule is longest.", border=True)  # fmt: skip
        _verdict(names, prediction, true_class)
    with chart:
        st.plotly_chart(
            figures.lengths_bar(
                lengths, names, prediction, config.m_plus, config.m_minus, height=LENGTHS_HEIGHT, leaders_only=True
            ),
            key="lengths_chart",
            config={"displayModeBar": False},
        )
        if confidence < 0.5:
            st.warning(
                f"No capsule is long: the network is unsure (next best: {names[runner_up]}, |v| = {lengths[runner_up]:.2f}).",
                icon=":material/help:",
            )
        elif lengths[runner_up] > 0.5:
            st.info(f"Capsule {names[runner_up]} is long too (|v| = {lengths[runner_up]:.2f}): an ambiguous input.")
        with st.expander(texts.margins_title(config), icon=":material/straighten:"):  # the chart's two lines
            st.markdown(texts.margins(config))
            st.latex(texts.MARGIN_LATEX)
    st.divider()
    check_col, redraw_col = st.columns([1, 1.5], gap="large")
    with check_col:
        widgets.not_like_any_class(model, result.reconstruction_error, confidence)
    with redraw_col:
        knobs(views.dimensions(model, digit, None, REDRAW_LEAD, mode="redraw"), key=REDRAW_KNOBS)
        with st.expander("What is the reconstruction?", icon=":material/brush:"):
            st.markdown(texts.reconstruction(config, noun))

    st.page_link(state.page_path(pages.ROUTING), label="See how routing reached this answer", icon=pages.ROUTING.icon)
    st.page_link(
        state.page_path(pages.DIMENSIONS),
        label=f"Tweak the {config.digit_dim} dimensions of this capsule",
        icon=pages.DIMENSIONS.icon,
    )


def _any_reading(
    model: models.Model, digit: np.ndarray, names: list[str], true_class: int | None, answer: Any, chart: Any
) -> None:
    """A network routed in a way this page has no view of its own for: its answer and class scores from the one
    `Reading` every routing gives, and its redraw where it redraws."""
    reading = model.reading(digit)
    prediction, scores, symbol = reading.prediction, reading.scores, reading.symbol
    with answer:
        st.metric("Prediction", names[prediction], delta=f"{symbol} = {scores[prediction]:.2f}", delta_color="off",
                  delta_arrow="off", help=f"The class whose {texts.SCORE_NAMES[symbol]} is highest.", border=True)  # fmt: skip
        _verdict(names, prediction, true_class)
    margins = model.network.score_margins(model.config)  # none: no lines drawn, no labels
    with chart:
        st.plotly_chart(figures.lengths_bar(scores, names, prediction, *(margins or (0.9, 0.1)), height=LENGTHS_HEIGHT,
                                            compact=margins is None, symbol=symbol, leaders_only=True),
                        key="lengths_chart", config={"displayModeBar": False})  # fmt: skip
    if model.redraws:
        st.divider()
        knobs(views.dimensions(model, digit, None, REDRAW_LEAD, mode="redraw"), key=REDRAW_KNOBS)


READINGS = {"dynamic": _dynamic_reading, "em": _em_reading}  # by the model's routing (`Routing.kind`)
DRAW_SAYS = {
    "dynamic": "which class capsule grows longest, and what it redraws from that capsule alone.",
    "em": "which class capsule the EM network activates most, and how routing gave it the children whose votes agree.",
}


def _vector_primer(config: Any) -> None:
    st.markdown(texts.capsule(config))
    st.markdown(texts.SQUASH)
    st.latex(texts.SQUASH_LATEX)


def _matrix_primer(config: Any) -> None:
    st.markdown(texts.em_capsule(config))


CAPSULE_PRIMERS = {"dynamic": _vector_primer, "em": _matrix_primer}  # what a capsule is, by the model's routing

model = guards.current_model()
if model is not None and model.task.pairs:  # a MultiMNIST model: said why, with one click to a model of one digit
    st.title("Draw a digit", anchor=False)
    guards.require_model()
    st.stop()
drawn = model is None or model.task.takes_drawings  # else a model of other pictures: its test images and uploads
names = models.class_names(model)
dataset = model.dataset if model is not None else "mnist"
noun = model.noun if model is not None else "digit"
routing = model.routing if model is not None else "dynamic"  # each network its own reading (`READINGS`)
config = model.config if model is not None else CapsNetConfig()
if st.session_state.get("draw_dataset") != dataset or not drawn and state.input_source() == "Draw":
    st.session_state["draw_dataset"] = dataset  # a model of another dataset: its own default input
    if noun != "digit" or not drawn:
        state.show_test_images()

st.title(f"Draw {texts.a(noun)}" if drawn else f"Read {texts.a(noun)}", anchor=False)
if pages.START.url_path not in state.visited_pages():  # a first visit: the way to the primer and the path
    with st.container(key="start_pointer"):
        st.info(guided_path.START_POINTER, icon=pages.START.icon)
        st.page_link(state.page_path(pages.START), label=f"Open {pages.START.title}", icon=pages.START.icon)
st.markdown(
    f"Draw {texts.a(noun)}, pick one from the test set or upload a picture, and see how a **Capsule Network** reads it: "
    + DRAW_SAYS.get(routing, "which class capsule scores highest.")
)
if not drawn:
    assert model is not None  # `drawn` without a model
    read = model.task
    st.info(texts.takes_no_drawings(model.info.title or model.dataset, read.input_size, read.channels, noun),
            icon=":material/image:")  # fmt: skip
elif noun != "digit":
    st.info(texts.fashion_drawing(noun), icon=":material/checkroom:")
with st.expander("What is a capsule?", icon=":material/help:"):
    if routing in CAPSULE_PRIMERS:
        CAPSULE_PRIMERS[routing](config)
    else:
        st.markdown(texts.any_capsule(model.network.routes().title if model is not None else routing))


def _link_follows_the_input() -> None:
    """A test image is in the page's link (`dashboard.links`), which a full run writes: a new one read by this
    fragment's run has the app run once more, so that the link names it; a stroke or an upload needs none."""
    shown = state.chosen_test_image()
    if st.query_params.get("test") != (None if shown is None else str(shown)):
        st.rerun(scope="app")


@st.fragment
def _input_and_reading() -> None:
    """The input (a stroke, a test image, an upload) and what the network reads from it: a stroke reruns this
    alone, not the sidebar and the rest of the page."""
    left, right = st.columns([1.2, 1], gap="large")
    with left:
        source = st.segmented_control(  # its value starts in the session state (a link or a model may choose it)
            "Input",
            SOURCES if drawn else SOURCES[1:],
            required=True,
            key=state.INPUT_SOURCE,
            persist_state=state.ACROSS_PAGES,
            format_func=lambda s: s,
            help="Where the input comes from",
        )
        if source == state.TEST_SOURCE:
            digit, label, true_class = test_image_input(dataset, names)
        elif source == "Upload":
            digit, label, true_class = upload_input(noun) if drawn or model is None else upload_picture(model, noun)
        else:
            digit, label, true_class = draw_input(noun)
    state.set_input(digit, label, true_class, dataset if source == state.TEST_SOURCE else None)
    _link_follows_the_input()

    with right:  # the answer beside the input, above the fold
        side = config.image_size
        st.markdown(f"**What the network sees** ({side}x{side}, {model.info.title if model else 'MNIST'}-style)")
        if digit is None:
            st.info(
                {
                    "Test image": "Pick a test image.",
                    "Upload": f"Upload a PNG or JPEG image of {texts.a(noun)}.",
                }.get(source or "Draw", f"Draw {texts.a(noun)} on the canvas: the prediction appears here."),
                icon=":material/gesture:",
            )
            answer = chart = None
        else:
            picture_col, answer = st.columns([1, 1.3], vertical_alignment="center")
            picture_col.image(figures.pixel_image(digit, PREVIEW_SCALE), caption=f"input: {label}",
                              width=28 * PREVIEW_SCALE, output_format="PNG")  # fmt: skip
            chart = st.container()
        with st.expander("How is the input prepared?", icon=":material/crop:"):
            st.markdown(texts.PREPROCESS)

    if digit is None:
        return
    if model is None:
        guards.require_model()
        return
    READINGS.get(model.routing, _any_reading)(model, digit, names, true_class, answer, chart)


_input_and_reading()
