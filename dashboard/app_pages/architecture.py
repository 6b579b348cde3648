"""Architecture: the network as a diagram of its tensors; a stage chosen shows what it computes on the current input."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import streamlit as st

from capsnet.nn.config import CapsNetConfig
from capsnet.nn.efficient_capsnet import EfficientCapsNetConfig
from capsnet.nn.em_capsnet import EMCapsNetConfig
from capsnet.readings import stages as arch
from dashboard import guards, routing_texts, state, widgets
from dashboard.efficient_stage_views import efficient_stage_view
from dashboard.em_stage_views import em_stage_view
from dashboard.figures import architecture as arch_fig
from dashboard.figures import pixel_image

STAGE = "arch_stage"  # the stage shown (the radio's key; a click on the diagram sets it)
DIGIT = "arch_digit"
MAPS = 16  # Conv1 feature maps shown: the most active ones
PICKS_CAPSULE = ("conv1", "primary", "votes", "routing")  # the stages that show one primary capsule

INTRO = (
    "A Capsule Network is five steps from pixels to an answer, and a sixth that draws the answer back. Each box is "
    "one stage, with the shape of the tensor it hands on (for one input) and how many weights it learns: the shapes "
    "are the chosen model's own. **Click a box** (or choose a stage below) to see what it computes on the current "
    "input, with its formula."
)


def formulas(key: str, c: CapsNetConfig) -> list[str]:
    """The LaTeX lines of one stage, with the model's own sizes."""
    side, g, p, d = c.image_size - c.conv1_kernel + 1, c.primary_grid, c.primary_dim, c.digit_dim
    scale = "" if c.primary_scale == 1.0 else rf"{c.primary_scale:.4g}\,"
    n_text = f"{c.num_primary:,}".replace(",", "{,}")  # 1{,}152: a comma without a space after it
    widths = r" \to ".join(f"{w:,}".replace(",", "{,}") for w in (c.num_classes * d, *c.decoder_hidden, c.image_pixels))
    return {
        "input": [rf"x \in [0, 1]^{{{c.in_channels} \times {c.image_size} \times {c.image_size}}}"],
        "conv1": [
            r"a_k = \operatorname{ReLU}\big(w_k \star x + b_k\big)",
            rf"w_k \in \mathbb{{R}}^{{{c.in_channels} \times {c.conv1_kernel} \times {c.conv1_kernel}}}",
            rf"k = 1, \dots, {c.conv1_channels}",
            rf"a \in \mathbb{{R}}^{{{c.conv1_channels} \times {side} \times {side}}}",
        ],
        "primary": [
            rf"s = {scale}(W \star_{{{c.primary_stride}}} a) + b",
            rf"s \in \mathbb{{R}}^{{{c.primary_types * p} \times {g} \times {g}}}",
            rf"s \to {n_text} \text{{ vectors }} s_i \in \mathbb{{R}}^{{{p}}}",
            r"u_i = \frac{\lVert s_i \rVert^2}{1 + \lVert s_i \rVert^2} \frac{s_i}{\lVert s_i \rVert}",
        ],
        "votes": [
            r"\hat u_{j|i} = W_{ij}\, u_i",
            rf"W_{{ij}} \in \mathbb{{R}}^{{{d} \times {p}}}",
            rf"i = 1, \dots, {n_text}",
            rf"j = 1, \dots, {c.num_classes}",
        ],
        "routing": [*routing_texts.PROCEDURE_LATEX, r"P(\text{class } j) = \lVert v_j \rVert"],
        "decoder": [
            r"m_j = v_j \text{ if } j = \arg\max_k \lVert v_k \rVert",
            r"m_j = 0 \text{ otherwise}",
            r"h_1 = \operatorname{ReLU}(W_1 m + b_1)",
            r"h_2 = \operatorname{ReLU}(W_2 h_1 + b_2)",
            r"\hat x = \sigma(W_3 h_2 + b_3)",
            widths,
        ],
    }[key]


def _input_words(c: CapsNetConfig | EMCapsNetConfig | EfficientCapsNetConfig) -> str:
    """The input stage in words: a grey image or a colour one, at the model's side."""
    if c.in_channels == 1:
        return f"One grey image, {c.image_size}x{c.image_size} pixels, each between 0 (background) and 1 (ink)."
    return (
        f"One colour image, {c.image_size}x{c.image_size} pixels of {c.in_channels} channels (red, green, blue), "
        "each between 0 and 1; Conv1's filters read the channels together."
    )


def explanation(key: str, c: CapsNetConfig) -> str:
    """What one stage does, in words, with the model's own sizes."""
    g, n, k, side = c.primary_grid, c.num_primary, c.num_classes, c.image_size - c.conv1_kernel + 1
    return {
        "input": _input_words(c),
        "conv1": (
            f"An ordinary convolution: {c.conv1_channels} learned {c.conv1_kernel}x{c.conv1_kernel} filters slide "
            f"over the image, giving {c.conv1_channels} maps of {side}x{side} local features (edges, stroke ends). "
            f"The outlined square is the {c.primary_kernel}x{c.primary_kernel} window the chosen primary capsule reads."
        ),
        "primary": (
            f"A second convolution whose {c.primary_types * c.primary_dim} output channels are read in groups of "
            f"{c.primary_dim}: each group at each of the {g}x{g} positions is one capsule, a {c.primary_dim}-D vector "
            f"(its *pose*) squashed so that its length lies below 1: how sure it is that its feature is there. "
            f"{c.primary_types} types x {g * g} positions = **{n:,} capsules**. Each sees only part of the input: "
            "its receptive field, outlined."
        ),
        "votes": (
            f"Every primary capsule i predicts every digit capsule j through its own learned {c.digit_dim}x"
            f"{c.primary_dim} matrix W_ij: {n:,} x {k} = {n * k:,} votes, each a {c.digit_dim}-D guess of what "
            "digit j's pose should be if capsule i's part belongs to it. These matrices hold the part-whole "
            "knowledge of the network."
        ),
        "routing": (
            "Routing by agreement decides how much of each vote reaches each digit capsule: the couplings c_ij of a "
            f"primary capsule sum to 1 over the {k} digit capsules, start uniform (1/{k}) and move towards the "
            f"capsules its votes agree with, over {c.routing_iterations} iterations. The digit capsule v_j is the "
            "squashed weighted sum of its votes, and its length is the probability that its class is present."
        ),
        "decoder": (
            f"Every digit capsule but one is zeroed (the prediction's is kept; the true class's in training), and "
            "three fully connected layers redraw the image from the 16 numbers left. The reconstruction error, "
            f"weighted by {c.reconstruction_weight}, pushes the capsule to encode how the digit looks."
        ),
    }[key]


EM_INTRO = (
    "The EM network (the second capsule paper's) is a convolution and then three layers of **matrix capsules**, each "
    "a 4x4 pose and an activation, every layer after the first routed by EM. Each box is one stage, with the shape "
    "of what it hands on (capsules x 17 numbers: 16 pose entries and the activation) and how many weights it learns, "
    "from the chosen model's config. **Click a box** (or choose a stage below) for its formula and what it computes on "
    "the current input."
)


def em_formulas(key: str, c: EMCapsNetConfig) -> list[str]:
    """The LaTeX lines of one stage of the EM network, with the model's own sizes."""
    g1 = c.conv1_grid
    widths = r" \to ".join(
        f"{w:,}".replace(",", "{,}") for w in (c.num_classes * 16, *c.decoder_hidden, c.image_pixels)
    )
    convcaps = [
        r"V_{ij} = M_i\, W_{ij}, \quad W_{ij} \in \mathbb{R}^{4 \times 4}",
        *routing_texts.EM_M_STEP_LATEX,
        *routing_texts.EM_E_STEP_LATEX,
    ]
    return {
        "input": [rf"x \in [0, 1]^{{{c.in_channels} \times {c.image_size} \times {c.image_size}}}"],
        "conv1": [
            rf"f = \operatorname{{ReLU}}(w \star_{{{c.conv1_stride}}} x + b)",
            rf"f \in \mathbb{{R}}^{{{c.conv1_channels} \times {g1} \times {g1}}}",
        ],
        "primary": [
            r"M_i = W_M f_{(y, x)} + b_M \in \mathbb{R}^{4 \times 4}",
            r"a_i = \operatorname{logistic}(w_a \cdot f_{(y, x)} + b_a)",
        ],
        "convcaps1": convcaps,
        "convcaps2": convcaps,
        "classes": [
            r"V_{ij} = M_i\, W_{t(i) j}",
            r"V_{ij}^{(1,4)} \mathrel{+}= y_i, \quad V_{ij}^{(2,4)} \mathrel{+}= x_i",
            *routing_texts.EM_M_STEP_LATEX[-1:],
            r"\text{class} = \arg\max_j a_j",
        ],
        "decoder": [r"m_j = \mu_j \text{ if } j = \arg\max_k a_k", r"m_j = 0 \text{ otherwise}", widths],
    }[key]


def em_explanation(key: str, c: EMCapsNetConfig) -> str:
    """What one stage of the EM network does, in words, with the model's own sizes."""
    k, r = c.convcaps_kernel, c.routing_iterations
    conv = (
        f"Each {k}x{k} window of child capsules votes for the parent types at its place: a child's 4x4 pose times a "
        "learned 4x4 matrix (one per kernel cell, child type and parent type, shared by every window, like a "
        f"convolution's weights). EM routing then fits a Gaussian to each parent's votes, {r} times: a parent whose "
        "votes agree (a small spread) and carry much of the children's data becomes active; a child shared by "
        "several windows is shared between all of their parents."
    )
    return {
        "input": _input_words(c),
        "conv1": (
            f"An ordinary convolution: {c.conv1_channels} learned {c.conv1_kernel}x{c.conv1_kernel} filters with "
            f"stride {c.conv1_stride} give {c.conv1_channels} maps of {c.conv1_grid}x{c.conv1_grid} local features."
        ),
        "primary": (
            f"A 1x1 convolution turns the features at each of the {c.conv1_grid}x{c.conv1_grid} places into "
            f"{c.primary_types} capsules: a 4x4 pose (16 linear outputs) and an activation (a logistic unit)."
        ),
        "convcaps1": f"{c.convcaps1_types} parent types on a {c.convcaps1_grid}x{c.convcaps1_grid} grid. " + conv,
        "convcaps2": f"{c.convcaps2_types} parent types on a {c.convcaps2_grid}x{c.convcaps2_grid} grid. " + conv,
        "classes": (
            f"Every capsule of the last grid votes for each of the {c.num_classes} classes through one 4x4 matrix per "
            "(capsule type, class), shared by every position; the position's scaled row and column are added to the "
            "vote (coordinate addition), so the class poses can still say where the parts were. The class with the "
            "highest activation a_j wins; the spread loss trains the others a margin below it."
        ),
        "decoder": (
            "Every class pose but one is zeroed (the prediction's is kept; the true class's in training), and fully "
            f"connected layers redraw the image from the 16 entries left, weighted by {c.reconstruction_weight} in the "
            "loss. Not in the paper: it gives the Dimensions page something to redraw."
        ),
    }[key]


EFFICIENT_INTRO = (
    "Efficient-CapsNet (Mazzia, Salvetti & Chiaberge 2021) reaches the CapsNet's accuracy with 2% of its weights: "
    "convolutions with batch norm, then a single depthwise convolution that makes a few primary capsules, each "
    "seeing the whole image, then **one pass of self-attention routing**. Each box is one stage, with the shape of "
    "what it hands on and how many weights it learns, from the chosen model's config. **Click a box** (or choose a "
    "stage below) for its formula and what it computes on the current input."
)


def efficient_formulas(key: str, c: EfficientCapsNetConfig) -> list[str]:
    """The LaTeX lines of one stage of Efficient-CapsNet, with the model's own sizes."""
    n, p, d, k, f = c.num_primary, c.primary_dim, c.digit_dim, c.num_classes, c.feature_side
    widths = r" \to ".join(f"{w:,}".replace(",", "{,}") for w in (k * d, *c.decoder_hidden, c.image_pixels))
    return {
        "input": [rf"x \in [0, 1]^{{{c.in_channels} \times {c.image_size} \times {c.image_size}}}"],
        "convs": [r"a^{(l)} = \operatorname{BN}\big(\operatorname{ReLU}(w^{(l)} \star a^{(l-1)} + b^{(l)})\big)",
                  rf"l = 1, \dots, {len(c.convs)}, \quad a^{{(0)}} = x"],
        "primary": [rf"s_c = w_c \star a_c^{{({len(c.convs)})}} + b_c, \quad w_c \in \mathbb{{R}}^{{{f} \times {f}}}",
                    rf"s \to {n} \text{{ vectors }} s_i \in \mathbb{{R}}^{{{p}}}",
                    r"u_i = (1 - e^{-\lVert s_i \rVert})\, s_i / \lVert s_i \rVert"],
        "votes": [r"\hat u_{j|i} = W_{ij}\, u_i", rf"W_{{ij}} \in \mathbb{{R}}^{{{d} \times {p}}}"],
        "routing": [
            rf"c_{{ij}} = \operatorname{{softmax}}_j\!\Big(\hat u_{{j|i}} \cdot \textstyle\sum_m \hat u_{{j|m}} / \sqrt{{{d}}}\Big)"
            r" + b_{ij}",
            r"v_j = \operatorname{squash}\Big(\textstyle\sum_i c_{ij}\, \hat u_{j|i}\Big)",
            r"P(\text{class } j) = \lVert v_j \rVert",
        ],
        "decoder": [r"m_j = v_j \text{ if } j = \arg\max_k \lVert v_k \rVert", r"m_j = 0 \text{ otherwise}", widths],
    }[key]  # fmt: skip


def efficient_explanation(key: str, c: EfficientCapsNetConfig) -> str:
    """What one stage of Efficient-CapsNet does, in words, with the model's own sizes."""
    n, p, k, f, width = c.num_primary, c.primary_dim, c.num_classes, c.feature_side, c.convs[-1][0]
    return {
        "input": _input_words(c),
        "convs": (
            f"{len(c.convs)} ordinary convolutions ("
            + ", ".join(f"{w} of {kk}x{kk}" + (f" stride {st_}" if st_ > 1 else "") for w, kk, st_ in c.convs)
            + f"), each followed by ReLU and batch norm, leave {width} maps of {f}x{f}."
        ),
        "primary": (
            f"A depthwise convolution: each of the {width} maps is read whole by its own {f}x{f} filter, one number "
            f"per map; the {width} numbers are {n} capsules of {p}, squashed by the paper's own squash so that each "
            "length lies below 1. So few capsules, each seeing the whole image: where the CapsNet has 1,152 that "
            "each see a window."
        ),
        "votes": (
            f"Every primary capsule predicts every class capsule through its own {c.digit_dim}x{p} matrix W_ij: "
            f"{n} x {k} = {n * k} votes."
        ),
        "routing": (
            "Self-attention routing: each vote's agreement with its class's whole set of votes, a softmax over the "
            f"{k} classes, plus a learned bias b_ij, weighs the vote in one pass (no iterations). The class capsule is "
            "the squashed weighted sum of its votes, and its length the probability that its class is present."
        ),
        "decoder": (
            "Every class capsule but one is zeroed (the prediction's is kept; the true class's in training), and "
            f"fully connected layers redraw the image from the {c.digit_dim} numbers left, weighted by "
            f"{c.reconstruction_weight} in the loss."
        ),
    }[key]


@dataclass(frozen=True)
class StageTexts:
    """What the page says of a network routed one way: its introduction, each stage's formulas and explanation, and
    the view of what a stage computes on the current input where the network has its own (else the CapsNet's, below)."""

    intro: str
    formulas: Callable[[str, Any], list[str]]
    explanation: Callable[[str, Any], str]
    own_view: Callable[[str, Any, Any, Any], None] | None = None  # (stage, model, image, config)


TEXTS = {  # by the model's routing (`Routing.kind`): vector capsules and dynamic routing, matrix capsules and EM
    "dynamic": StageTexts(INTRO, formulas, explanation),
    "em": StageTexts(EM_INTRO, em_formulas, em_explanation, em_stage_view),
    "attention": StageTexts(EFFICIENT_INTRO, efficient_formulas, efficient_explanation, efficient_stage_view),
}


def _clicked(chart_key: str) -> None:
    """A click on a box of the diagram: show its stage."""
    event = st.session_state.get(chart_key)
    points = event["selection"]["points"] if event else []
    keys = (*arch.STAGE_KEYS, *arch.EM_STAGE_KEYS, *arch.EFFICIENT_STAGE_KEYS)
    picked = [p["customdata"] for p in points if p.get("customdata") in keys]
    if picked:
        st.session_state[STAGE] = picked[0]


st.title("Architecture", anchor=False)
model = guards.current_model(show_errors=False)
if model is not None and model.routing not in TEXTS:  # a routing with no stages here: the CapsNet's (said below)
    model = None
texts = TEXTS[model.routing if model is not None else "dynamic"]  # each network its own stages and formulas
st.markdown(texts.intro)
if DIGIT in st.session_state:  # kept while a stage without the digit capsule's box is shown
    st.session_state[DIGIT] = st.session_state[DIGIT]
config = model.config if model is not None else CapsNetConfig()
stages = arch.stages_of(config)
titles = {s.key: s.title for s in stages}
if st.session_state.get(STAGE) not in titles:  # first visit, or a stage the other network has
    st.session_state[STAGE] = "primary"
stage = st.radio("Stage", list(titles), format_func=titles.get, key=STAGE, horizontal=True,
                 help="Or click a box of the diagram.")  # fmt: skip
chart_key = f"arch_diagram_{stage}"  # a new chart per stage: no selection left over from the last click
st.plotly_chart(
    arch_fig.diagram_figure(stages, stage),
    key=chart_key,
    on_select=lambda: _clicked(chart_key),
    selection_mode="points",
    config={"displayModeBar": False},
)
whose = "the model chosen in the sidebar" if model is not None else "the paper's network (no model is chosen)"
primaries = stages[2].shape[0]  # PrimaryCaps' capsules, in either network
st.caption(
    f"Shapes of {whose}: {config.image_size}x{config.image_size} input, {primaries:,} primary capsules. "
    f"{arch.parameter_count(config):,} parameters in all"
    + (f", {arch.parameter_count(config, decoder=False):,} without the decoder" if "decoder" in titles else "")
    + ": the sum of the boxes. Hover a box for the tensors on the way."
)

view_col, formula_col = st.columns([1.5, 1], gap="large")  # one formula a line, each whole at 1,100 px
with formula_col:
    st.subheader(titles[stage], anchor=False)
    for line in texts.formulas(stage, config):
        st.latex(line)
    st.markdown(texts.explanation(stage, config))
if texts.own_view is not None and model is not None:  # each stage on the current input, from its routing views' pass
    with view_col:
        reader = guards.require_model(routings=(model.routing,))
        image = guards.require_input() if reader is not None else None
        if reader is None or image is None:
            st.stop()
        texts.own_view(stage, reader, image, config)
    st.stop()

with view_col:
    reader = guards.require_model()  # says why not: no model, a MultiMNIST or a 40x40 model
    if model is not None and model.reads_pairs:
        st.caption("The diagram above has its shapes; what it computes on a pair of digits is on that page.")
    image = guards.require_input() if reader is not None else None
    if reader is None or image is None:
        st.stop()
    names, g = reader.class_names, config.primary_grid
    chosen = state.selected_primary()
    chosen = chosen if chosen is not None and 0 <= chosen < config.num_primary else None
    reading, view = reader.stages(image, chosen, widgets.capsule_choice(st.session_state.get(DIGIT)))
    if (
        stage in PICKS_CAPSULE
    ):  # the capsule looked at: the one selected anywhere, else a long one where the ink is, moved by routing
        if stage == "votes":
            pick_col, digit_col = st.container(), st.container()  # j under i: beside it, "the prediction" was cut
            widgets.capsule_selectbox("Digit capsule j", names, key=DIGIT, predicted_label="the prediction",
                                      help=f"Now the prediction is {names[reading.prediction]}.", container=digit_col)  # fmt: skip
        else:
            pick_col = st.container()
        widgets.primary_capsule_picker(config, default=view.primary.index, container=pick_col)
        st.caption(
            f"Primary capsule i = {view.primary.index:,} (type {view.primary.kind + 1} at ({view.primary.y}, {view.primary.x})), "
            f"length |u_i| = {view.primary.length:.3f}"
            + (
                ""
                if chosen is not None
                else ": a long one where the ink is, whose couplings routing moved, until you choose another"
            )
        )

    if stage == "input":
        st.image(pixel_image(reading.image, 8), caption=f"x: {config.image_size}x{config.image_size}, in [0, 1]")
    elif stage == "conv1":
        channels = arch.strongest_maps(reading.features, MAPS)
        st.plotly_chart(
            arch_fig.feature_maps_figure(reading.features[channels], channels, view.window, config.primary_kernel),
            key="arch_conv1", config={"displayModeBar": False},
        )  # fmt: skip
        st.caption(
            f"The {len(channels)} most active of the {config.conv1_channels} feature maps "
            f"({reading.features.shape[1]}x{reading.features.shape[2]} each); hover for the map's number."
        )
    elif stage == "primary":
        field_col, grid_col = st.columns(2)
        field_col.plotly_chart(
            arch_fig.receptive_field_figure(reading.image, view.field, "its receptive field"),
            key="arch_field", config={"displayModeBar": False},
        )  # fmt: skip
        lengths = reading.votes.primary_lengths.reshape(config.primary_types, g, g)[view.primary.kind]  # (G, G)
        grid_col.plotly_chart(
            arch_fig.grid_lengths_figure(lengths, view.primary.y, view.primary.x, f"type {view.primary.kind + 1}, every position"),
            key="arch_grid", config={"displayModeBar": False},
        )  # fmt: skip
        st.plotly_chart(
            arch_fig.pose_figure(view.pose, f"its pose u_i ({config.primary_dim}-D), length {view.primary.length:.3f}", 240),
            key="arch_pose", config={"displayModeBar": False},
        )  # fmt: skip
    elif stage == "votes":
        st.plotly_chart(
            arch_fig.matrix_product_figure(view.weight, view.pose, view.vote),
            key="arch_product", config={"displayModeBar": False},
        )  # fmt: skip
        st.caption(
            f"The vote of capsule i = {view.primary.index:,} for digit capsule {names[view.digit]}: "
            f"|û| = {view.vote_lengths[view.digit]:.3f}. Its votes for every digit capsule:"
        )
        st.plotly_chart(
            arch_fig.vote_lengths_figure(view.vote_lengths, names, view.digit),
            key="arch_vote_lengths", config={"displayModeBar": False},
        )  # fmt: skip
    elif stage == "routing":
        st.plotly_chart(
            arch_fig.routing_figure(view.primary.coupling, reading.votes.lengths, names),
            key="arch_routing", config={"displayModeBar": False},
        )  # fmt: skip
        strongest = int(view.primary.coupling[-1].argmax())
        st.caption(
            f"After {reading.votes.iterations} iterations capsule i sends {view.primary.coupling[-1, strongest]:.0%} of its "
            f"vote to digit capsule {names[strongest]} (uniform: {config.uniform_coupling:.0%}); the network predicts "
            f"**{names[reading.prediction]}** (|v| = {reading.lengths[reading.prediction]:.2f})."
        )
    else:
        st.plotly_chart(
            arch_fig.masked_figure(reading.masked, names, reading.prediction),
            key="arch_masked", config={"displayModeBar": False},
        )  # fmt: skip
        input_col, output_col, _ = st.columns([1, 1, 1])
        input_col.image(pixel_image(reading.image, 5), caption="input x")
        output_col.image(pixel_image(reading.reconstruction, 5), caption=f"x̂ from capsule {names[reading.prediction]}")
