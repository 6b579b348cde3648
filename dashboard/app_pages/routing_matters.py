"""Where routing matters: the test images whose answer changes with the number of routing iterations."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import streamlit as st

from capsnet.readings.coupling_rules import verdict
from capsnet.readings.routing_matters import RoutingMatters
from capsnet.runs import comparison
from dashboard import figures, guards, links, pages, routing_texts, state
from dashboard.figures import routing_matters as rmf

PER_PAGE = 12
COLUMNS = 4
MEASURE = "rm_measure"  # the model (its key) whose summary this session asked to measure
EFFECTS = {
    "all": "All listed",  # the images the toggle above leaves (all that change, or those from r to r + 1)
    "fixes": "Routing fixes the answer",
    "breaks": "Routing breaks it",
    "other": "Other changes",
}
LEAD = (
    "Does the number of routing iterations change the answer? Every test image read at r = 1 to 5: the accuracy at "
    "each r, and below, each image whose answer changes."
)
INTRO = (
    "Routing by agreement runs **r** times between the primary capsules and the class capsules. With **r = 1** every "
    "coupling stays uniform: each class capsule simply adds up all the votes it gets, and there is no routing at all. "
    "Each further iteration moves weight towards the votes that agree. So how often does that change the answer? "
    "Here every test image is read at r = 1 to 5 (the convolutions and the votes once, routing five times), once per "
    "model, and the images whose answer changes with r are listed: open one on the **Routing** page to watch the "
    "couplings move it."
)
EM_INTRO = (
    "The EM network routes **r** times in each of its three capsule layers. With **r = 1** there is a single M-step: "
    "every child's data is shared evenly among the parents it reaches, and each parent's activation says only how "
    "tightly all of those votes cluster. Each further iteration gives every child to the parents whose Gaussians "
    "explain its votes. So how often does that change the answer? Here every test image is read at r = 1 to 5, once "
    "per model, and the images whose answer changes with r are listed: open one on the **Draw** page to see its "
    "class layer's routing."
)
EM_DURATION = (
    "long on a CPU, since the EM network routes in all three capsule layers at each r: about 5 minutes on two cores "
    "for the paper's network (the shipped EM model's summary ships with it)"
)
FOR_SINGLE_IMAGES = "This view is for models that read one 28x28 image (MNIST, Fashion-MNIST), not MultiMNIST pairs."


@dataclass(frozen=True)
class Voice:
    """What the page says of a model routed one way, and where a changed image opens."""

    intro: str
    duration: str  # how long measuring takes
    verdict: Callable[
        [float, int, float, int, str], str
    ]  # (share changed, trained r, accuracy at r = 1, changed, noun)
    opens_at_r: bool  # a changed image opens on Routing at the r where it changes (else on Draw, at the model's own r)
    # the list opens on the images that one more iteration than the trained r changes: for a network whose r = 1 is
    # no reading at all (the EM network's one class for every image), every image changes somewhere
    next_only: bool = False


def _dynamic_verdict(share: float, trained: int, first: float, changed: int, noun: str) -> str:
    return (
        f"On **{100 * (1 - share):.1f}%** of the test {noun}s the answer is the same whatever r: the votes agree from "
        f"the start, and routing only sharpens what the plain sum already says. It is on the "
        f"**{changed:,}** others, ambiguous ones, that routing decides."
    )


def _em_verdict(share: float, trained: int, first: float, changed: int, noun: str) -> str:
    # its layers were learned for one r: away from it the answers move for every kind of digit
    return (
        f"On **{100 * (1 - share):.1f}%** of the test {noun}s the answer is the same whatever r. The EM network's "
        f"weights and betas, in every capsule layer, were learned for r = {trained}: away from it the activations "
        f"are no longer the ones it learned to read (**{100 * first:.2f}%** right at r = 1), so answers change "
        "for plain digits as much as for ambiguous ones, and the list below is mostly those that the trained r gets "
        "right."
    )


VOICES = {  # by the model's routing (`Routing.kind`)
    "dynamic": Voice(INTRO, "a few minutes on a CPU for the paper's model", _dynamic_verdict, opens_at_r=True),
    "em": Voice(EM_INTRO, EM_DURATION, _em_verdict, opens_at_r=False, next_only=True),
}


def _effect_label(key: str, counts: dict[str, int]) -> str:
    return f"{EFFECTS[key]} ({counts[key]:,})"


def _trained_alike() -> None:
    """The newest comparison of routings trained alike in the runs folder (`python -m capsnet compare-routings`)."""
    found = comparison.newest(state.runs_root())
    with st.expander("Trained with each routing: does routing earn its cost?", icon=":material/compare_arrows:",
                     expanded=found is not None):  # fmt: skip
        if found is None:
            st.markdown(routing_texts.COMPARE_HINT)
            return
        folder, record = found
        st.markdown(comparison.verdict(record))
        st.dataframe(
            [{"Routing": r.title, "Seeds": r.seeds, "Test accuracy": f"{100 * r.accuracy:.2f}%",
              "Spread": f"{100 * r.spread:.2f}", "affNIST-like": r.affine_text,
              "Non-digits flagged": r.flagged_text, "Parameters": f"{r.parameters:,}",
              "Train img/s": f"{r.train_images_per_s:,.0f}", "Read img/s": f"{r.read_images_per_s:,.0f}"}
             for r in comparison.rows(record)],
            hide_index=True, key="rm_comparison", width="content",
        )  # fmt: skip
        st.caption(f"{routing_texts.COMPARE_COLUMNS} {comparison.budget_line(record)}. Kept in "
                   f"`{folder.name}/{comparison.FILE}`; each model it trained opens on every page: pick "
                   f"*run {folder.name}/<routing>-seed<n>* in the sidebar.")  # fmt: skip


st.title("Where routing matters", anchor=False)
model = guards.require_model(routings=("dynamic", "em"))  # the EM network too: its activations at r = 1 to 5
voice = VOICES[model.routing if model is not None else "dynamic"]
st.markdown(LEAD)
with st.expander("What r changes, and how this page measures it", icon=":material/info:"):
    st.markdown(voice.intro)
    st.caption(FOR_SINGLE_IMAGES)
_trained_alike()
if model is None:
    st.stop()
data = guards.try_test_set(model.dataset)
if data is None:
    st.stop()
images, labels = data
names, noun = model.class_names, model.noun

result, error = model.routing_matters(measure=st.session_state.get(MEASURE) == model.key)
if result is None:
    how_long = voice.duration
    st.info(
        f"Not measured yet for this model: each of its {len(labels):,} test images is read at r = 1 to 5 and with "
        f"random couplings, once, and the result is kept beside the checkpoint ({how_long}).",
        icon=":material/hourglass_empty:",
    )
    if not st.button("Measure on the whole test set", key="rm_measure_button", icon=":material/play_arrow:"):
        st.stop()
    st.session_state[MEASURE] = model.key
    bar = st.progress(0.0, text=f"Reading {len(labels):,} test images at r = 1 to 5 (once per model)...")

    def _progress(done: int, total: int) -> None:
        bar.progress(done / total, text=f"Read {done:,} of {total:,} test images at r = 1 to 5 (once per model)...")

    result, error = model.routing_matters(measure=True, on_chunk=_progress)
    bar.empty()
    assert result is not None  # measured
if error:
    st.warning(f"Measured, but not kept (it is measured again in a new session): {error}", icon=":material/save:")

rs, accuracy, trained = result.iterations, result.accuracy, result.trained_iterations
own = trained if trained in rs else rs[-1]
best = max(range(len(rs)), key=lambda n: (accuracy[n], -abs(rs[n] - own)))
# short labels, the details in the delta line and the help: four to a row fit a 1,100 px window
quiet: dict[str, Any] = dict(delta_color="off", delta_arrow="off", border=True)
c1, c2, c3, c4 = st.columns(4)
c1.metric(
    "r = 1", f"{100 * accuracy[0]:.2f}%", "no routing", **quiet, help="The plain sum of the votes: one iteration."
)
c2.metric(
    f"r = {own}",
    f"{100 * accuracy[rs.index(own)]:.2f}%",
    f"{result.correct[rs.index(own)] - result.correct[0]:+,} right",
    border=True,
    help=f"Right answers gained over r = 1. The model was trained with r = {trained}.",
)
c3.metric("Best r", f"{rs[best]}", f"{100 * accuracy[best]:.2f}%", **quiet, help="The r with the highest accuracy.")
c4.metric(
    "Changed", f"{len(result.changed):,}", f"of {result.total:,}", **quiet,
    help=f"Test {noun}s whose prediction differs between at least two of r = 1 to 5.",
)  # fmt: skip
st.plotly_chart(
    rmf.accuracy_figure(rs, accuracy, result.differs_from_first, trained, result.total),
    key="rm_accuracy",
    config={"displayModeBar": False},
)
share = len(result.changed) / result.total
st.markdown(voice.verdict(share, trained, float(accuracy[0]), len(result.changed), noun))

st.subheader("Does routing matter? Uniform, routed and random couplings", anchor=False)
st.markdown(routing_texts.EXPERIMENT_INTRO.format(noun=noun))
st.dataframe(routing_texts.experiment_rows(result), hide_index=True, key="rm_rules", width="content")
st.markdown(verdict(result.rules()))

st.subheader(f"The test {noun}s whose answer changes", anchor=False)
if not result.changed:
    st.success(f"On this model no test {noun}'s answer depends on the number of iterations.")
    st.stop()


@st.fragment
def _changed_list(
    result: RoutingMatters, images: Any, names: list[str], noun: str, dataset: str, voice: Voice, symbol: str
) -> None:
    """The changed images, a page of them at a time: choosing a kind or a page reruns this alone (not the chart)."""
    rs, own = result.iterations, result.trained_iterations
    listed = result.changed
    if own in rs and own + 1 in rs:
        after = own + 1
        one_more = [c for c in listed if c.predictions[rs.index(own)] != c.predictions[rs.index(after)]]
        if st.toggle(
            f"Only the {len(one_more):,} whose answer changes from r = {own} to r = {after}", value=voice.next_only,
            key="rm_next_only", help=f"One more iteration than the model was trained with changes these; the other "
            f"{len(listed) - len(one_more):,} change only between other r.",
        ):  # fmt: skip
            listed = tuple(one_more)
    effects = {image.index: result.effect(image) for image in listed}
    counts = {"all": len(listed)} | {k: sum(e == k for e in effects.values()) for k in EFFECTS if k != "all"}
    chosen = st.segmented_control(
        "Show", list(EFFECTS), default="all", required=True, key="rm_effect",
        format_func=lambda key: _effect_label(key, counts),
        help=f"Fixes: wrong at r = 1, right at r = {own}. Breaks: the reverse. Other: a change at another r, or wrong "
        "both times.",
    )  # fmt: skip
    shown = [image for image in listed if chosen == "all" or effects[image.index] == chosen]
    if not shown:
        st.info("None of this kind.")
        return
    last_page = (len(shown) - 1) // PER_PAGE + 1
    number = 1
    if last_page > 1:
        number = int(st.number_input(f"Page (of {last_page})", 1, last_page, key="rm_page", width=160))
    number = min(number, last_page)
    st.caption(
        f"Each {noun} with its answer at r = 1 to 5 (a wrong one struck through). The button makes it the input of "
        + ("every page and opens the Routing page at the r where its answer changes." if voice.opens_at_r
           else "every page and opens it on the Draw page.")
    )  # fmt: skip
    for n, image in enumerate(shown[(number - 1) * PER_PAGE : number * PER_PAGE]):
        if n % COLUMNS == 0:
            row = st.columns(COLUMNS, gap="medium")
        index, at = image.index, result.shown_iterations(image)
        with row[n % COLUMNS].container(border=True):
            left, right = st.columns([1, 2.2], vertical_alignment="center")
            left.image(figures.pixel_image(images[index, 0].numpy(), 3), width=84, output_format="PNG")
            right.markdown(f"**#{index}**, a {names[image.label]}")
            first, then = image.predictions[0], image.predictions[rs.index(at)]
            right.caption(rmf.margins_text(image.lengths, first, then, names, symbol))
            st.markdown(rmf.answers_text(image.predictions, image.label, rs, names))
            if not voice.opens_at_r and st.button(
                "Open on Draw", key=f"rm_open_{index}", icon=pages.DRAW.icon, use_container_width=True,
                help=f"Make test {noun} #{index} the input and open the Draw page (the EM network's own r).",
            ):  # fmt: skip
                links.open_test_image(index, dataset)
                st.switch_page(state.page_path(pages.DRAW))
            if voice.opens_at_r and st.button(
                f"Routing at r = {at}", key=f"rm_open_{index}", icon=":material/alt_route:", use_container_width=True,
                help=f"Make test {noun} #{index} the input and open the Routing page with {at} iterations.",
            ):  # fmt: skip
                links.open_test_image(index, dataset)
                state.set_routing_iterations(at)
                st.switch_page(state.page_path(pages.ROUTING))


_changed_list(result, images, names, noun, model.dataset, voice, model.network.score_symbol)
