"""The words the pages show.

Short explanations written for a student meeting capsules for the first time, the notice
that says what to do when there is no model, and how durations are written. A text that
states a number the model's config holds (a margin, a count of capsules) is a function of
the config, so it says what the model in use really has.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from capsnet.data.datasets import DATASETS
from capsnet.data.tasks import Task
from capsnet.nn.config import CapsNetConfig
from capsnet.nn.em_capsnet import EMCapsNetConfig
from capsnet.nn.registry import network_of
from capsnet.readings import affnist
from capsnet.readings.decoding import DEFAULT_DIMENSION_STD


def literal(value: object, limit: int = 40) -> str:
    """`value` as literal text in Markdown: cut to `limit` characters, in a code span whose fence is longer than any
    run of backticks in it, so that what a link or a file says is shown as it is, never read as a link (a bare URL
    is linked even with its punctuation escaped), an image, an icon, a colour or a formula: a shared link's values
    are data, not the app's words."""
    text = str(value).replace("\n", " ").replace("\r", " ")
    cut = text if len(text) <= limit else text[:limit] + "..."
    fence = "`" * (max((len(run) for run in re.findall("`+", cut)), default=0) + 1)
    pad = " " if cut.startswith("`") or cut.endswith("`") or not cut.strip() else ""
    return f"{fence}{pad}{cut}{pad}{fence}"


def a(noun: str) -> str:
    """The noun with its article: "a digit", "an item"."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def capsule(config: CapsNetConfig) -> str:
    return f"""
**What is a capsule?** An ordinary neuron outputs one number: *how much* a feature is present.
A capsule outputs a **vector**. Its **length** (between 0 and 1) is the probability that an
entity is present; its **direction** encodes *how* it looks: position, thickness, slant,
width... CapsNet ends with one {config.digit_dim}-dimensional capsule per class (the *digit
capsules*), and the class whose capsule is **longest** wins.
"""


def any_capsule(title: str) -> str:
    """What a capsule is, for a network routed in a way no page was written for (`title`: its routing)."""
    return (f"**What is a capsule?** A group of numbers whose length says how present an entity is and whose "
            f"direction says how it looks. This network ends with one capsule per class, routed by {title}; the class "
            "whose capsule scores highest wins.")  # fmt: skip


SQUASH = r"""
**Squash.** A capsule's raw vector $s_j$ can have any length, so it is *squashed* to a length
below 1 without changing its direction: short vectors shrink to almost zero, long ones end up
just under 1.
"""
SQUASH_LATEX = r"v_j = \frac{\lVert s_j \rVert^2}{1 + \lVert s_j \rVert^2}\,\frac{s_j}{\lVert s_j \rVert}"


def margins_title(config: CapsNetConfig) -> str:
    return f"What do the lines at {config.m_plus:g} and {config.m_minus:g} mean?"


def margins(config: CapsNetConfig) -> str:
    return f"""
**The margins {config.m_plus:g} and {config.m_minus:g}.** Training uses a *margin loss*: the capsule
of the true class is pushed to a length of at least **m⁺ = {config.m_plus:g}**, every other capsule
below **m⁻ = {config.m_minus:g}** (the other classes' shortfalls weigh λ = {config.down_weight:g} times
as much). So on a well-trained network one bar clears the green line and all the others stay under
the orange one. Several long capsules mean the network sees several possible classes.
"""


MARGIN_LATEX = (  # on two lines, neither indented, a size smaller: it sits under the Draw page's chart, in its column
    r"\small\begin{gathered} L_k = T_k \max(0, m^+ - \lVert v_k \rVert)^2 \\"
    r" +\, \lambda (1 - T_k) \max(0, \lVert v_k \rVert - m^-)^2 \end{gathered}"
)


def reconstruction(config: CapsNetConfig, noun: str = "digit") -> str:
    layers = len(config.decoder_hidden) + 1
    return f"""
**Reconstruction.** A small decoder ({layers} fully connected layers) redraws the image from the
winning capsule alone: the other capsules are masked to zero. If the redrawing looks like your
input, the {config.digit_dim} numbers in that capsule really describe the {noun}. Reconstructing
*as another class* feeds that class's capsule instead: the network shows what it would draw if it
believed it were that {noun}.
"""


PREPROCESS = """
**From your input to MNIST.** MNIST digits were made by cropping the ink, scaling it to fit
a 20x20 box (keeping its proportions, with anti-aliasing) and placing it in 28x28 so that its
centre of mass sits in the middle. Your drawing or upload goes through the same steps, so the
network sees it the way it saw its training data.
"""


def robustness_interval(examples: int) -> str:
    """How wide the robustness curves' error bars are, so that a gap between the networks can be judged."""
    widest = 100 * 1.96 * 0.5 / examples**0.5
    return (
        f"Each bar is its point's 95% sampling interval: with {examples:,} images a point is known to within "
        f"±{widest:.1f} points at worst (at 50% accuracy), less near 100%. A gap between the networks narrower "
        "than their bars is no difference; measure with more images per point to tell."
    )


def routed(config: CapsNetConfig | EMCapsNetConfig) -> str:
    """How the config's network routes ("dynamic", "em"; "none"): which version of a text applies to it."""
    routing = network_of(config).routing
    return routing.kind if routing is not None else "none"


SCORE_NAMES = {"|v|": "length", "a": "activation", "p": "probability"}  # by `Network.score_symbol`
SCORE_AXES = {"|v|": "capsule length", "a": "class activation", "p": "class probability"}  # a chart's axis title
REDRAWN_FROM = {"dynamic": "reconstruction from capsule", "em": "redrawn from the pose of"}  # a redraw's caption
POSE_LABELS = {  # a class capsule's pose entry d, by the network's routing: a vector's dimension, a 4x4 matrix's entry
    "dynamic": lambda d: f"Dimension {d + 1}",
    "em": lambda d: f"Pose entry ({d // 4 + 1}, {d % 4 + 1})",
}


def pose_label(routing: str) -> Callable[[int], str]:
    """A class capsule's pose entry d in words, by the network's routing (a vector's dimension where the routing
    has no words of its own)."""
    return POSE_LABELS.get(routing, POSE_LABELS["dynamic"])


def equivariance(config: CapsNetConfig | EMCapsNetConfig) -> str:
    return {"em": lambda: EM_EQUIVARIANCE, "dynamic": lambda: _vector_equivariance(config.digit_dim)}[routed(config)]()


EM_EQUIVARIANCE = """
An EM network's class capsule has an **activation** that should stay put when the input is turned, scaled or moved a
little (the class is the same: *invariance*), and a **4x4 pose matrix** that should follow the change
(*equivariance*): the paper meant it to hold the object's viewpoint. Move the sliders and watch the 16 pose entries;
the sweep below reads all angles from -45° to +45° at once.
"""


def _vector_equivariance(digit_dim: int) -> str:
    return f"""
A capsule's **length** should stay put when the input is turned, scaled or moved a little (the class
is the same: *invariance*), while its **direction**, the {digit_dim} pose dimensions, should
follow the change (*equivariance*): that is what capsules were designed for. Move the sliders and
watch the pose bars; the sweep below reads all angles from -45° to +45° at once.
"""


TRANSFORM_NAMES = {
    "rotation": "rotation",
    "scale": "scale",
    "shear": "shear",
    "dx": "a move to the side",
    "dy": "a move up or down",
    "thickness": "stroke thickness",
}


def sensitivity(moves: dict, name: str, top: int = 3) -> str:
    """Which pose dimensions move most with which kind of transform (`capsnet.readings.equivariance.sensitivity`)."""
    lines = [f"**Which dimensions of capsule {name} follow which transform** (around the current setting):"]
    for kind, change in moves.items():
        order = sorted(range(len(change)), key=lambda d: -float(change[d]))[:top]
        dims = ", ".join(f"{d + 1} ({float(change[d]):.2f})" for d in order)
        lines.append(f"- {TRANSFORM_NAMES.get(kind, kind)}: dimensions {dims}")
    lines.append(
        "\nThe numbers are how far each dimension moves between one step below and one step above the current "
        "setting of that transform. A dimension that answers "
        "to one transform only is one the network has given a meaning to."
    )
    return "\n".join(lines)


def no_decoder(title: str, network: str, presets: tuple[str, ...]) -> str:
    """Why the Capsule dimensions page cannot show a network without a decoder, and how to train one with it."""
    with_decoder = next((p for p in presets if p.endswith("-decoder")), None)
    how = (f": train one with a decoder (`python -m capsnet train --network {network} --preset {with_decoder}`) to "
           "slide the entries of its poses" if with_decoder else "")  # fmt: skip
    return f"This {title} has no decoder, so its poses cannot be redrawn{how}."


def dimensions(config: CapsNetConfig | EMCapsNetConfig) -> str:
    said = {"em": EM_DIMENSIONS}.get(routed(config))  # by the routing: a vector capsule's where it has no words
    return said if said is not None else _vector_dimensions(config.digit_dim)


EM_DIMENSIONS = """
**What do the 16 pose entries encode?** Each class capsule of the EM network holds a 4x4 **pose matrix**, the mean
of the votes EM routing gave it; the network's decoder redraws the input from the winning class's 16 entries (the
others masked out). Move a slider (one entry, by its row and column) and watch the reconstruction: the paper meant
the pose to hold the viewpoint of the object, so some entries move, turn or stretch the drawing.
"""


def _vector_dimensions(digit_dim: int) -> str:
    return f"""
**What do the {digit_dim} dimensions encode?** Nobody told the network what to store in
each dimension of a class capsule; it learned whatever helps the decoder redraw the input. Move a
slider and watch the reconstruction: some dimensions change the stroke thickness, others the
slant, the width or local parts of the shape.
"""


def dimension_ranges(from_statistics: bool, class_name: str, spread: float = 2.0) -> str:
    """Where the sliders' ranges come from: the checkpoint's statistics, or the fallback."""
    if from_statistics:
        return (
            f"Ranges: mean ± {spread:g} std of each dimension over correctly classified test images "
            f"of class {class_name}."
        )
    return (
        f"Ranges: ±{spread * DEFAULT_DIMENSION_STD:g} around 0. This checkpoint has no usable statistics of "
        "its capsules on the test set (re-export it with `python -m capsnet export` to add them)."
    )


def figure4(config: CapsNetConfig, steps: list[float]) -> str:
    step = steps[1] - steps[0] if len(steps) > 1 else 0.0
    digits = 2 if abs(steps[-1]) >= 0.1 else 3
    narrower = (
        ""
        if abs(steps[-1]) >= 0.25
        else " (the paper moves each by up to 0.25; this capsule's entries spread less, so the range is four of their "
        "standard deviations, and each step as far in their units as the paper's are in the CapsNet's)"
    )
    return f"""
**Figure 4 of the paper.** Each row perturbs one dimension of the capsule by {steps[0]:+.{digits}f} ...
{steps[-1]:+.{digits}f} in steps of {step:.{digits}f}{narrower} and decodes all {config.digit_dim * len(steps)} variants
at once; the middle column (+0) is the reconstruction itself. A row that changes the drawing smoothly is a dimension
that encodes a meaningful property.
"""


def decoding_spinner(config: CapsNetConfig, steps: int) -> str:
    return f"Decoding {config.digit_dim * steps} variants..."


def evaluate(noun: str, symbol: str = "|v|") -> str:
    """How to read the Evaluate page, in the words of the network's class score (`symbol`: "|v|" lengths, "a" the
    EM network's activations)."""
    score, strong = SCORE_NAMES[symbol], {"|v|": "long", "a": "active", "p": "likely"}[symbol]
    return f"""
**Reading the evaluation.** The confusion matrix counts, for each true class (row), what the
network predicted (column): the diagonal is right, everything else is a mistake. The gallery
shows the mistakes the network was most sure about, with the {score}s ({symbol}) of all its capsules:
often two capsules are {strong} at once, because the {noun} really is ambiguous.
"""


def fashion_drawing(noun: str) -> str:
    return (
        "**This model knows clothes, shoes and bags**, photographed in grey on black (Fashion-MNIST). "
        f"A drawing can only be an outline, which no training {noun} looks like: it will still be read as "
        "something (often a sandal or a bag) and is likely to be flagged as not like any class. "
        "The page opens on the test images instead; switch to *Draw* to try anyway."
    )


def wrong_kind_of_model(reads_pairs: bool) -> str:
    if reads_pairs:
        return (
            "The model chosen in the sidebar is a **MultiMNIST** model: it reads two overlapping digits on 36x36, "
            "not one on 28x28. Explore it on the **Overlapping digits** page, or open a model of single digits "
            "(below, or in the sidebar)."
        )
    return (
        "This page reads **two overlapping digits** (MultiMNIST, 36x36), and the model chosen in the sidebar reads "
        "one. Open the shipped MultiMNIST model with the button below (one click back when you are done), pick "
        "another in the sidebar, or train one: "
        "`python -m capsnet train --dataset multimnist --preset multimnist --epochs 30` (its preset has the official "
        "code's initial scales, so it learns at the default learning rate)."
    )


def em_capsule(config: EMCapsNetConfig) -> str:
    return f"""
**The EM network** (Hinton, Sabour & Frosst 2018, "Matrix capsules with EM routing") is the second capsule paper's
design. Each capsule is an **activation** a (a number between 0 and 1: is the entity there?) and a **4x4 pose
matrix** (how it sits: its {config.digit_dim} entries). A child capsule votes for a parent by multiplying its pose
by a learned 4x4 matrix, and **EM routing** fits a Gaussian to each parent's votes, {config.routing_iterations}
times: a parent whose votes lie close together (a small spread) and carry much of the children's data is active.
The class with the highest activation wins; training pushes every other class a margin below it (the spread loss).
"""


EM_ROUTING_READING = """
**Reading the two charts.** EM routing starts by sharing every child capsule of the last grid evenly among the
classes (a share of 1/K each), fits each class's Gaussian to its votes (the M-step: the activation on the left),
then gives each child to the classes whose Gaussians explain its votes best (the E-step: the shares on the right),
and fits again. The prediction's activation rises as it gathers the children whose votes agree.
"""


def takes_no_drawings(title: str, side: int, channels: int, noun: str) -> str:
    """What the Draw page reads for a model of other pictures than drawings (a 40x40 canvas, smallNORB's crops,
    colour CIFAR-10, a folder of one's own): what the model reads, and where its whole test set is read."""
    picture = f"{side}x{side} {'colour ' if channels == 3 else ''}{noun}s ({title})"
    return (
        f"The model chosen in the sidebar reads **{picture}**, not drawings: pick one of its test images or upload "
        f"a picture, read as its data is ({side}x{side}, the centre square). The pages that follow one input step "
        "by step (**Routing**, **Capsule dimensions**, **Transform lens**, **Architecture**) follow the one chosen "
        "here; its whole test set is read on **Evaluate** and **Where routing matters**."
    )


def not_for(routing: str, title: str = "") -> str:
    """Why a page does not read the chosen model, by how that model routes (`Routing.kind`; `title` names a routing
    that no page was written for, such as a family registered after the app's)."""
    if routing in NOT_FOR:
        return NOT_FOR[routing]()
    return (f"This page has no view of {title or routing} yet: the chosen model's prediction, scores and evaluation "
            "are on the Draw and Evaluate pages.")  # fmt: skip


def _not_for_dynamic() -> str:
    return (
        "This page reads a network routed by **EM**, and the chosen model is a CapsNet routed by agreement: its "
        "routing is on the Routing page, or pick an EM model (below, or in the sidebar)."
    )


def _not_for_em() -> str:
    return (
        "This page reads a CapsNet's vector capsules and dynamic routing, not yet the chosen **EM network**'s matrix "
        "capsules: evaluate it on the Evaluate page, or open a CapsNet (below, or in the sidebar)."
    )


NOT_FOR = {"dynamic": _not_for_dynamic, "em": _not_for_em}


def larger_canvas(size: int) -> str:
    return (
        f"The model chosen in the sidebar reads digits anywhere on a **{size}x{size}** canvas (the `mnist-40` set, "
        "trained for the paper's affNIST experiment), and this page reads 28x28 inputs. Measure it with "
        "`python -m capsnet affnist CHECKPOINT`, or pick another model in the sidebar."
    )


def no_baseline(dataset: str) -> str:
    return (
        f"No CNN baseline for this dataset yet: train one with `python -m capsnet train --network cnn --dataset {dataset}` "
        f"(or ship one as `checkpoints/baselines/{dataset}-cnn.safetensors`)."
    )


def robustness_cost(limit: int, networks: int, seconds: float) -> str:
    """What measuring the robustness curves costs the first time, from this machine's measured reading speed."""
    images = affnist.sweep_images(limit)
    who = "the network" if networks == 1 else f"each of the {networks} networks"
    if seconds < 60:
        when = f"about {max(5, round(seconds / 5) * 5):.0f} s"
    else:
        when = f"about {round(seconds / 60):.0f} min"
    warning = " **Long:** choose fewer images for a first look." if seconds >= 120 else ""
    return f"The first time: {when} on this machine ({who} reads {images:,} images); then kept on disk.{warning}"


def baseline_result(name: str, network: str, accuracy: float | None, cnn_accuracy: float | None, pairs: bool) -> str:
    """The open model's and the CNN baseline's test figures as their checkpoints state them; `network` is the open
    model's network, for people ("CapsNet", "EM CapsNet")."""

    def figure(accuracy: float | None) -> str:
        if accuracy is None:
            return "not stated"
        return f"{100 * (1 - accuracy):.2f}% error" if pairs else f"{100 * accuracy:.2f}% accuracy"

    return f"On {name}'s test set: {network} {figure(accuracy)}, CNN baseline {figure(cnn_accuracy)}."


def robustness(dataset: str) -> str:
    """What the turned-or-scaled curves measure, for a model trained on `dataset` (and its CNN)."""
    info = DATASETS.get(dataset)
    if info is not None and Task.of(info).kind == "placed":
        trained = f"on upright digits placed anywhere on {info.image_size}x{info.image_size} (moved by up to "
        trained += f"{info.shift} pixels each way)"
    else:
        trained = "on upright images moved by up to 2 pixels" + (" (and mirrored)" if info and info.hflip else "")
    return f"""
**Turned or scaled test sets.** Both networks were trained {trained}. Here every test image is turned (or
scaled) alike and each network's accuracy measured: the paper's claim is that capsules generalise better to poses
they were not trained on (section 5.2: 79% on affNIST against 66% for a CNN). Measured once per model on the
first test images, then kept on disk.
"""


OVERLAP = """
**Two digits at once (section 6 of the paper).** CapsNet was trained here on pairs of MNIST digits of
different classes, each shifted by up to 4 pixels and overlaid on 36x36. It has no idea where one digit
ends: it reports the **two longest capsules**, and a pair counts as right only when they are exactly the
two digits (the paper: 5.2% error, against 8.1% for a CNN). Then it redraws **each digit from its own
capsule alone**: the paper's Figure 5, red for the longer capsule and green for the other over the input.
Where the colours separate the strokes, the capsules have segmented the overlap.
"""


def no_model_notice(checkpoints_dir: str) -> str:
    """What to do when there is no trained model yet."""
    return f"""
**No trained model is present yet.** `{checkpoints_dir}` holds no `mnist.safetensors`, and no
training run has finished an epoch, so there is nothing meaningful to predict with (an
untrained network's output is noise, so none is shown).

Train one from the sidebar with **Train a model** (the *tiny* model on a few thousand images
takes a few minutes on a CPU), or in a terminal:

```
python -m capsnet train --dataset mnist --epochs 10
```

It appears in the sidebar's model picker as soon as its first epoch ends.
"""


def format_duration(seconds: float | None) -> str:
    """1 h 02 min, 3 min 05 s, 12 s; an em dash when unknown."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "—"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"
