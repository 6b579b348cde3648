"""The words the pages show.

Short explanations written for a student meeting capsules for the first time, the notice
that says what to do when there is no model, and how durations are written.
"""

from __future__ import annotations

import math

CAPSULE = """
**What is a capsule?** An ordinary neuron outputs one number: *how much* a feature is present.
A capsule outputs a **vector**. Its **length** (between 0 and 1) is the probability that an
entity is present; its **direction** encodes *how* it looks: position, thickness, slant,
width... CapsNet ends with one 16-dimensional capsule per class (the *digit capsules*), and
the class whose capsule is **longest** wins.
"""

SQUASH = r"""
**Squash.** A capsule's raw vector $s_j$ can have any length, so it is *squashed* to a length
below 1 without changing its direction: short vectors shrink to almost zero, long ones end up
just under 1.
"""
SQUASH_LATEX = r"v_j = \frac{\lVert s_j \rVert^2}{1 + \lVert s_j \rVert^2}\,\frac{s_j}{\lVert s_j \rVert}"

MARGINS = """
**The margins 0.9 and 0.1.** Training uses a *margin loss*: the capsule of the true class is
pushed to a length of at least **m⁺ = 0.9**, every other capsule below **m⁻ = 0.1**. So on a
well-trained network one bar clears the green line and all the others stay under the orange
one. Several long capsules mean the network sees several possible digits.
"""
MARGIN_LATEX = (
    r"L_k = T_k \max(0,\, m^+ - \lVert v_k \rVert)^2"
    r" + \lambda\,(1 - T_k) \max(0,\, \lVert v_k \rVert - m^-)^2"
)

RECONSTRUCTION = """
**Reconstruction.** A small decoder (three fully connected layers) redraws the image from the
winning capsule alone: the other capsules are masked to zero. If the redrawing looks like your
input, the 16 numbers in that capsule really describe the digit. Reconstructing *as another
class* feeds that class's capsule instead: the network shows what it would draw if it believed
it were that digit.
"""

PREPROCESS = """
**From your input to MNIST.** MNIST digits were made by cropping the ink, scaling it to fit
a 20x20 box (keeping its proportions, with anti-aliasing) and placing it in 28x28 so that its
centre of mass sits in the middle. Your drawing or upload goes through the same steps, so the
network sees it the way it saw its training data.
"""

PROCEDURE = """
**Routing by agreement (Procedure 1 of the paper).** Each of the primary capsules $i$ (32 types
on a 6x6 grid: 1,152 in the paper's model) *predicts* every digit capsule $j$ through a learned
matrix: $\\hat u_{j|i} = W_{ij} u_i$. Routing decides how much of each prediction goes to each
digit capsule with **coupling coefficients** $c_{ij}$ that sum to 1 over $j$. They start equal
($b_{ij} = 0$, so $c_{ij} = 1/10$); each iteration then raises $b_{ij}$ where the prediction
**agrees** with the digit capsule's current output ($\\hat u_{j|i} \\cdot v_j$ is large), so
primary capsules send more of their vote to the parent they agree with.
"""
PROCEDURE_LATEX = [
    r"c_{ij} = \frac{\exp b_{ij}}{\sum_k \exp b_{ik}}",
    r"s_j = \sum_i c_{ij}\, \hat u_{j|i}, \qquad v_j = \operatorname{squash}(s_j)",
    r"b_{ij} \leftarrow b_{ij} + \hat u_{j|i} \cdot v_j",
]

AGGREGATION = """
**How the 1,152 couplings are summarised.** For each of the primary-capsule *types* (rows) the
heatmap shows the mean of $c_{ij}$ over its 6x6 positions. With *length-weighted* (the default)
each position counts in proportion to its capsule's length $\\lVert u_i \\rVert$: a capsule that
detected nothing predicts nothing and keeps the uniform $1/10$, so weighting shows where the
evidence that is really there is sent. Every row still sums to 1 over the digit capsules.
"""

DIMENSIONS = """
**What do the 16 dimensions encode?** Nobody told the network what to store in each dimension
of a digit capsule; it learned whatever helps the decoder redraw the digit. Move a slider and
watch the reconstruction: some dimensions change the stroke thickness, others the slant, the
width or local parts such as the tail of a 9. The slider ranges are the mean ± 2 standard
deviations of that dimension over correctly classified test images of the class.
"""

FIGURE4 = """
**Figure 4 of the paper.** Each row perturbs one dimension of the capsule by -0.25 ... +0.25 in
steps of 0.05 and decodes all 176 variants at once; the middle column (+0.00) is the
reconstruction itself. A row that changes the drawing smoothly is a dimension that encodes a
meaningful property.
"""

TRAINING = """
**How CapsNet is trained.** Every batch, the loss adds the *margin loss* of the capsule lengths
and a small *reconstruction loss* (the sum of squared pixel errors times 0.0005, so that it
does not dominate). Adam with a learning rate that decays every epoch minimises it. The
training images are shifted by up to 2 pixels, as in the paper.
"""

EVALUATE = """
**Reading the evaluation.** The confusion matrix counts, for each true class (row), what the
network predicted (column): the diagonal is right, everything else is a mistake. The gallery
shows the mistakes the network was most sure about, with the lengths of all its capsules:
often two capsules are long at once, because the digit really is ambiguous.
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
python -m capsnet.train --dataset mnist --epochs 10
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
