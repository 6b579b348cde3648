"""What the Training runs page says: the recipes, a run's window on ten test images, and the loss a test loss is of.

Texts only (no Streamlit): each version is chosen by what the network declares (`capsnet.nn.family`): how it
routes, what its scores are, whether it redraws.
"""

from __future__ import annotations

from collections.abc import Mapping

from capsnet.data.augment import SHIFT
from capsnet.nn.config import CapsNetConfig
from capsnet.nn.em_capsnet import EMCapsNetConfig
from capsnet.nn.registry import named, network_of
from capsnet.training.recipes import Recipe


def training(config: CapsNetConfig, em: EMCapsNetConfig, recipes: Mapping[str, Recipe]) -> str:
    """The page's introduction, for the runs of every network; each recipe says its own schedule (the paper's decays
    per epoch, fast's per batch)."""
    said = "\n".join(f"- **{r.title}** recipe (`--recipe {name}`): {r.summary}" for name, r in recipes.items())
    return f"""
**How the networks are trained.** Every batch, the CapsNet's loss adds the *margin loss* of the capsule
lengths and a small *reconstruction loss* (the sum of squared pixel errors times {config.reconstruction_weight:g},
so that it does not dominate). The EM CapsNet's is the *spread loss* of its class activations, whose margin
grows from {em.margin_start:g} to {em.margin_end:g} over the first {em.margin_anneal:.0%} of the run (with the same
reconstruction loss when it has a decoder); the CNN baseline's is cross-entropy. Adam minimises it, with the
learning rate its run's recipe sets:

{said}

The training images are shifted by up to {SHIFT} pixels, as in the paper.
"""


_WINDOW_START = (
    "Every run keeps a **window** on ten test images it never trains on, one of each class, the same ones for "
    "the whole run. Before the first batch, after every epoch (and every minute within a long one) the trainer "
    "shows them to the network as it is at that moment and keeps what it answers: "
)
_WINDOW_END = " Slide back through the snapshots to replay it."


def training_window(network: str, m_plus: float, m_minus: float, em: EMCapsNetConfig) -> str:
    """What a run's window shows, for the network the run trains (by how it routes, where it routes)."""
    net = named(network)
    routing = net.routing if net is not None else None
    kind = routing.kind if routing is not None else "none"
    other = f"each class's score, its {net.scores if net is not None else 'scores'} (the bars; a red bar is the prediction)."
    return _WINDOW_START + {
        "dynamic": lambda: _window_of_lengths(m_plus, m_minus), "em": lambda: _window_of_activations(em),
        "none": lambda: _WINDOW_OF_PROBABILITIES,
    }.get(kind, lambda: other)() + _WINDOW_END  # fmt: skip


def _window_of_lengths(m_plus: float, m_minus: float) -> str:
    return (
        "the length of each class capsule (the bars; a red bar is the longest, the prediction) and the image the "
        "decoder redraws from that capsule alone. At first every capsule is about as long as every other and "
        f"the redrawing is a grey blur; as the network learns, the right capsule grows past m⁺ = {m_plus:g} "
        f"while the others shrink under m⁻ = {m_minus:g}, and the redrawing takes the shape of the digit "
        f"(slowly: the reconstruction loss weighs only {CapsNetConfig().reconstruction_weight:g})."
    )


def _window_of_activations(em: EMCapsNetConfig) -> str:
    return (
        "the activation a_j of each class capsule (the bars; a red bar is the highest, the prediction). At first "
        "the activations are alike; as the network learns, the spread loss pushes every other class's activation "
        f"a margin below the right one's, the margin growing from {em.margin_start:g} to {em.margin_end:g} "
        "(and, with a decoder, the image it redraws from the highest one)."
    )


_WINDOW_OF_PROBABILITIES = (
    "the probability of each class (the bars; a red bar is the highest, the prediction). At first they are "
    "about equal; as the network learns, cross-entropy raises the right class's (a CNN has no capsules to "
    "redraw from)."
)


def loss_help(config: CapsNetConfig | EMCapsNetConfig) -> str:
    """The loss a test loss is of: the network's own (`Network.loss_name`), with the margin of EM's spread loss,
    plus the reconstruction's share where the network redraws."""
    net = network_of(config)
    redraw = f" + {config.reconstruction_weight:g} x reconstruction loss" if net.redraws(config) else ""
    final_margin = getattr(config, "margin_end", None)  # a spread loss's margin, where it grows during training
    at_margin = f" at margin {final_margin:g}" if final_margin is not None else ""
    return net.loss_name.capitalize() + at_margin + redraw


def running_loss_help(args: Mapping[str, object]) -> str | None:
    """Why a run's loss can rise while it learns, for the sidebar's live Loss: where its network's loss has a margin
    that grows during training (EM's spread loss), said with the run's own numbers; None otherwise (and for a warm
    start, which trains at the margin's end)."""
    net = named(str(args.get("network", "")))
    if net is None or args.get("init"):
        return None
    try:
        config = net.preset(str(args.get("preset", "")))
    except ValueError:  # a preset of another version of capsnet: nothing to say
        return None
    start, end, anneal = (getattr(config, name, None) for name in ("margin_start", "margin_end", "margin_anneal"))
    if start is None or end is None or anneal is None:
        return None
    return (
        f"The {net.loss_name}'s margin grows from {start:g} to {end:g} over the first {anneal:.0%} of the run: each "
        "step asks the right class's activation to lead the others by more, so the loss can rise while the accuracy "
        "rises too."
    )
