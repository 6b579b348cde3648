"""Widgets that several pages share."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import streamlit as st

from capsnet.data.datasets import DATASETS, dataset_info
from capsnet.errors import CapsNetError
from capsnet.nn.config import CapsNetConfig
from capsnet.readings.claims import Verdict
from dashboard import claim_texts, figures, guards, novelty_texts, routing_texts, state
from dashboard.knobs import views as knob_views
from dashboard.knobs.component import knobs
from dashboard.models import Model

# The first option of the "which capsule" select boxes: follow the prediction, whatever it is. Not None: a select
# box whose value is None shows its placeholder ("Choose an option") once it is drawn again (Streamlit reads None
# as "nothing chosen"); and its label never names the class, since the browser keeps the chosen option by label.
PREDICTED = -1


def capsule_choice(choice: int | None) -> int | None:
    """The class a "which capsule" select box names, or None for the predicted one."""
    return None if choice is None or int(choice) == PREDICTED else int(choice)


def capsule_selectbox(
    label: str,
    names: list[str],
    *,
    key: str,
    predicted_label: str,
    item: str = "capsule",
    help: str | None = None,
    container: Any = st,
    persist_state: str | None = None,
) -> int | None:
    """A select box over "the predicted capsule" and every class; returns the class chosen, or None for the prediction.

    The options are fixed values with fixed labels (say the current prediction in `help`): a label
    that changed with the input would make Streamlit drop the selection and show a blank box.
    """
    choice = container.selectbox(
        label,
        [PREDICTED, *range(len(names))],
        format_func=lambda j: predicted_label if j == PREDICTED else f"{item} {names[j]}",
        key=key,
        help=help,
        persist_state=persist_state,
    )
    return capsule_choice(choice)


PRIMARY_KEYS = ("primary_type", "primary_row", "primary_col")  # the picker's widgets: type (from 1), row, column


def _picked(config: CapsNetConfig) -> None:
    """The picker changed: its (type, row, column) is now the selected primary capsule everywhere."""
    kind, y, x = (int(st.session_state[k]) for k in PRIMARY_KEYS)
    g = config.primary_grid
    state.select_primary((kind - 1) * g * g + y * g + x)


def primary_capsule_picker(config: CapsNetConfig, default: int, container: Any = st) -> int:
    """Three number inputs (type, row, column) over the selected primary capsule, shared by every view.

    The selection is `state.selected_primary()` (a click on a vote sets it too); without one, `default`. Returns
    the capsule's index i = type * G^2 + y * G + x.
    """
    chosen = state.selected_primary()
    if chosen is None or not 0 <= chosen < config.num_primary:  # none yet, or one of a model with another grid
        chosen = int(default)
        state.select_primary(chosen)
    kind, y, x = config.primary_position(chosen)
    for key, value in zip(PRIMARY_KEYS, (kind + 1, y, x)):
        st.session_state[key] = value  # before the widgets are drawn: a selection made elsewhere shows here
    g = config.primary_grid
    a, b, c = container.columns(3)
    a.number_input("Primary capsule type", 1, config.primary_types, key=PRIMARY_KEYS[0], on_change=_picked,
                   args=(config,), help=f"One of the {config.primary_types} kinds of feature detector.")  # fmt: skip
    b.number_input("Row", 0, g - 1, key=PRIMARY_KEYS[1], on_change=_picked, args=(config,),
                   help=f"Its position on the {g}x{g} grid.")  # fmt: skip
    c.number_input("Column", 0, g - 1, key=PRIMARY_KEYS[2], on_change=_picked, args=(config,))
    return chosen


def claim_verdict(verdict: Verdict, key: str, curve: str, start_free: Verdict | None = None) -> None:
    """A claim's verdict: the statement, the table (with the start-free pair's rows and statement, if given), and
    the test error against the examples seen (`curve` says what that error was measured on)."""
    st.markdown(verdict.statement())
    if start_free is not None:
        st.markdown("**Without any warm start.** " + start_free.statement())
    st.table(claim_texts.claim_table_by_network(verdict, start_free), hide_index=True)  # a column per network: it fits
    st.plotly_chart(figures.claim_figure(verdict), key=key, config={"displayModeBar": False})
    st.caption(curve)


STEP = "routing_step"  # the iteration shown, from 1 (one for every routing page)
STEP_OF = "routing_step_of"  # the number of iterations it was shown for


def _move_step(delta: int, iterations: int) -> None:
    st.session_state[STEP] = int(np.clip(st.session_state.get(STEP, iterations) + delta, 1, iterations))


def iteration_stepper(r: int, caption: str) -> int:
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
            back.button("◀ Previous", key="routing_prev", on_click=_move_step, args=(-1, r), disabled=step == 1,
                        use_container_width=True)  # fmt: skip
            forward.button("Next ▶", key="routing_next", on_click=_move_step, args=(1, r), disabled=step == r,
                           use_container_width=True)  # fmt: skip
            note.caption(caption)
    return step


def away_from_trained(model: Model, r: int) -> None:
    """Beside a routing page's answer: at an r other than the model's trained one, how often the model is right at
    that r on its test set (Where routing matters' kept summary), or that nobody has measured it yet."""
    trained = model.config.routing_iterations
    if r == trained:
        return
    try:
        kept, _ = model.routing_matters(measure=False)
    except CapsNetError:  # no test set here: nothing is measured, and the words say so
        kept = None
    title = dataset_info(model.dataset).title if model.dataset in DATASETS else model.dataset
    said = routing_texts.away_from_trained(r, trained, kept, title)
    if said:
        st.info(said, icon=":material/tune:")


def not_like_any_class(model: Model, error: float, winner: float) -> None:
    """Beside the Draw page's answer: whether the input is like a class the model knows (its not-like-any-class
    thresholds, from the winner's redraw `error` and the winner's score `winner`), in a warning when it is not; the
    rule in an expander. Nothing for a model without thresholds (no decoder, or no test set to calibrate on)."""
    thresholds = guards.novelty(model)
    if thresholds is None:
        return
    noun, symbol = model.noun, model.network.score_symbol
    score = float(thresholds.score(error, winner))
    if score > 1.0:
        title = model.info.title or model.dataset
        said = novelty_texts.not_like_any_class(noun, score, error, winner, title, thresholds, symbol)
        st.warning(said, icon=":material/report:")
    else:
        st.caption(novelty_texts.like_a_class(noun, error, winner, thresholds, symbol))
    with st.expander('What is "not like any class"?', icon=":material/report:"):
        st.markdown(novelty_texts.NOVELTY)


def routing_experiment_for_input(model: Model, image: np.ndarray, iterations: int) -> None:
    """The input read with uniform, routed and random couplings on the same weights, in an expander that reads only
    when opened (the Routing and EM routing pages)."""
    box = st.expander(
        "Does routing matter for this input? Uniform, routed and random couplings",
        icon=":material/shuffle:", key="input_rules_open", on_change="rerun",
    )  # fmt: skip
    with box:
        if not box.open:
            return
        reading = model.input_rules(image, iterations)
        names = model.class_names
        st.dataframe(
            routing_texts.input_rules_rows(reading, names, model.network.score_symbol),
            hide_index=True, key="input_rules", width="content",
        )  # fmt: skip
        st.markdown(routing_texts.input_rules_summary(reading, names))
        st.caption(
            "The same weights and votes each time; only the couplings differ. Random couplings share each child among "
            "the parents at random (each draw seeded) and are never routed. Entropy: how evenly the class layer's "
            "couplings spread over the parents (1: uniform). The whole test set's figures: **Where routing matters**."
        )


def _live_routing_moved(key: str) -> None:
    """The routing knobs chose another r or capsule: the session keeps them for this model, and the link and the
    server's views follow on this run."""
    value = st.session_state.get(key) or {}
    if value.get("iterations") is not None:
        state.keep_routing_iterations(int(value["iterations"]))
    if value.get("capsule") is not None:
        state.set_page_capsule(state.ROUTING_CAPSULE, int(value["capsule"]))  # -1: the prediction's


def live_routing(model: Model, image: np.ndarray, lead: str) -> tuple[int, int | None]:
    """The routing pages' live view (`dashboard.knobs`): the class layer routed in the browser, stepped through its
    iterations and read under each coupling rule without a server run. Returns r and the capsule in focus (None: the
    prediction) as the hand last set them: those two come back, since the link and the views below follow them."""
    r = state.page_iterations(model.config.routing_iterations)
    state.keep_routing_iterations(r)  # the page's r, in the link from the first run
    capsule = state.page_capsule(state.ROUTING_CAPSULE)
    st.caption(f"Input: **{state.input_label() or 'current input'}**")
    key = f"{state.ROUTING_KNOBS}-{hashlib.sha1(model.key.encode()).hexdigest()[:10]}"  # one per model: its own r
    knobs(knob_views.routing(model, image, r, capsule, lead), key=key, reports=("iterations", "capsule"),
          on_change=lambda: _live_routing_moved(key))  # fmt: skip
    return state.page_iterations(model.config.routing_iterations), state.page_capsule(state.ROUTING_CAPSULE)
