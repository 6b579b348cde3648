"""The guided path of the Start here page: the pages in the order the paper builds its ideas, each with what to
do there and what to look for."""

from __future__ import annotations

from dataclasses import dataclass

from dashboard import pages

START_PRIMER = """
**What is a capsule?** A neuron of an ordinary network outputs one number. A *capsule* outputs a
vector: its **length** (always below 1) says how sure the capsule is that the thing it stands for
is present, and its **direction** says how that thing looks: its pose, slant, thickness. In the
picture, the capsule for a 7 is long (a 7 is there, slanted right) and the one for a 3 is short.
A CapsNet has a layer of small capsules for parts and one capsule per digit; each part *votes* for
each digit's vector, and **routing by agreement** sends a part's vote to the digits whose other
votes agree with it. That is the paper's idea, *Dynamic Routing Between Capsules* (Sabour, Frosst
& Hinton, 2017).
"""

START_INTRO = """
This path takes you through the paper's ideas in the order it builds them: the network's shapes,
the squash and routing on a toy you can move, then a trained network reading your own drawing,
what its capsules encode, and the paper's two claims put to the test. Each step opens a page; come
back here for the next. About 30 minutes in all.
"""

START_POINTER = (
    "New to capsules? **Start here**: what a capsule is, in one picture, then a guided path through the pages "
    "(about 30 minutes)."
)

START_AFTER = """
**After the path.** The paper's claims are contested (Gu & Tresp 2019; Gu, Tresp & Hu 2021): the
Transform lens and Overlapping digits pages say what *these* models show, on equal terms with a
CNN, and where that differs from the paper. To dig into the code, every figure comes from a
function in `capsnet/` that takes a model and an image and returns arrays.
"""


@dataclass(frozen=True)
class Step:
    page: pages.PageInfo
    title: str
    do: str  # what to do there
    notice: str  # what to look for
    network: str | None = None  # the network the page is opened with ("em" for the second algorithm's step); None:
    # whichever model is chosen

    @property
    def visit(self) -> str:
        """What `state.note_page` records when this step's page runs (with its network, where it names one)."""
        return self.page.url_path if self.network is None else f"{self.page.url_path}@{self.network}"


GUIDED_PATH = (
    Step(pages.ARCHITECTURE, "See the whole network and its shapes",
         "Follow one image from 784 pixels to 256 feature maps, to 1,152 eight-dimensional primary capsules, to "
         "ten 16-dimensional digit capsules and back to pixels through the decoder. Click each stage.",
         "most of the 8.2 M parameters sit in PrimaryCaps (5.3 M), then the W_ij (1.5 M: one 16x8 matrix per primary "
         "and digit capsule, turning each primary capsule into a vote for every digit capsule) and the decoder."),
    Step(pages.PLAYGROUND, "Play with routing by agreement, and EM routing beside it",
         "Pick a preset of 2-D votes (an agreeing cluster with outliers, two competing clusters), then step "
         "Procedure 1 one iteration at a time. Move a vote and step again. Beside it the second capsule paper's EM "
         "routing routes the same votes: pick \"a lone outlier\" or \"clusters of unequal spread\" to see them part "
         "ways.",
         "votes that agree with the consensus v_j gain coupling c_ij, outliers lose it; the squash keeps every "
         "length below 1. EM fits a Gaussian per parent instead: a long vote far from the cluster wins under the dot "
         "product and loses under the Gaussian."),
    Step(pages.DRAW, "Draw a digit and read the capsule lengths",
         "The page opens on a test image; choose Draw to draw your own digit, or pick another test image. The bars "
         "are the lengths of the ten digit capsules; the longest wins.",
         "a length is a probability that the digit is present, not a softmax share: several can be long at once, "
         "or none."),
    Step(pages.ROUTING, "Watch routing on your drawing",
         "Step through the iterations, and click a vote: the same primary capsule is then ringed in both vote "
         "plots, outlined on your drawing, and its couplings are drawn.",
         "on a trained network the couplings move only a little: most of the answer is already in the votes."),
    Step(pages.ROUTING_MATTERS, "Find the inputs where routing changes the answer",
         "See how accuracy changes with 1 to 5 routing iterations, and open the few test images whose answer "
         "depends on them. Then the experiment the field argues about: the same weights with uniform, routed and "
         "random couplings, side by side.",
         "how rare those images are, whether they look ambiguous to you too, and whether routing beats couplings "
         "that are never routed on this model."),
    Step(pages.DIMENSIONS, "Slide the 16 dimensions of a capsule",
         "Move one dimension of the winning capsule and watch the reconstruction change: the paper's Figure 4.",
         "dimensions that carry stroke width, skew or scale, and the ones that carry nothing readable."),
    Step(pages.TRANSFORM, "Turn and scale the input: the affine claim",
         "Rotate, scale and thicken the input and follow the capsule's pose and the CNN beside it.",
         "whether the capsule's pose changes smoothly with the transform (equivariance), and which network stays "
         "right longer."),
    Step(pages.OVERLAP, "Overlapping digits: the segmentation claim",
         "Overlay two digits and see each redrawn from its own capsule; read the verdict on the test pairs. The page "
         "reads pairs with the MultiMNIST model: one click opens it, and one click brings back the model you had.",
         "the paper's figures beside what these models reach on a CPU, with the CNN trained on the same pairs."),
    Step(pages.TRAINING, "Train a model and watch its capsules learn",
         "Start a tiny CapsNet run from the sidebar and open it here: the capsule lengths and reconstructions of a "
         "few fixed test images refresh as it trains (the EM demo recipe trains the tiny EM network instead: its "
         "class activations, and no reconstructions, since it has no decoder).",
         "how the reconstructions go from blurs to digits while the lengths of the right capsules grow."),
    Step(pages.EVALUATE, "Measure a model on the test set",
         "Evaluate the chosen model: accuracy, the confusion matrix and its mistakes, each one click from the "
         "Routing page.",
         "which digits it confuses, and whether its mistakes look like mistakes a person would make."),
    Step(pages.ROUTING, "The second algorithm, trained: EM routing",
         "Open the EM network (the second capsule paper's matrix capsules, shipped beside the CapsNet) on the Routing "
         "page, with your input: step its class layer's EM routing one iteration at a time, then see it on Draw, "
         "Dimensions (its 4x4 pose) and Architecture. One click on the Routing page brings back your CapsNet.",
         "each class's Gaussian tightening around the votes it is given, and the winner gathering the children whose "
         "votes agree: the same idea as routing by agreement, with clusters in place of dot products.",
         network="em"),
)  # fmt: skip
